"""The dry run's expected figures: the upper bound (``estimate``) with the cross-task cache hits taken off, from each
system's measured hit profile (``calibration.json``, re-measured by ``benchmarks/cache_profile.py``: the prefix's,
the first task's and a later task's paid memory calls, each as a fraction of the ``CallProfile`` bound of the same
setting). A configuration's later tasks reuse its first task's cached background replies, so they pay only what the
fact changes; with ``run.cache_scope=task`` every task pays as the first does. Answer and judge calls are never
shared between tasks and stay as bounded. A system without a calibration is expected at its bound."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inmind_exp.errors import PlanError

if TYPE_CHECKING:
    from inmind_exp.plan.plan import Plan

CALIBRATION = Path(__file__).with_name("calibration.json")
FRACTIONS = ("prefix", "first_task", "later_task")


@dataclass(frozen=True)
class HitProfile:
    """Paid memory calls as fractions of the bound: the prefix's, the first task's, each later task's."""

    prefix: float
    first_task: float
    later_task: float


def load_calibration(path: Path = CALIBRATION) -> dict[str, dict[str, Any]]:
    """The shipped calibration, by system; PlanError naming the file and key of a malformed entry."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: line {e.lineno}: not JSON ({e.msg})") from None
    for name, entry in data.items():
        for k in FRACTIONS:
            v = entry.get(k) if isinstance(entry, dict) else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise PlanError(f"{path}: {name}.{k}={v!r}: expected a fraction >= 0 of the bound")
    return data


def hit_profile(system: str, calibration: dict[str, dict[str, Any]] | None = None) -> HitProfile | None:
    entry = (load_calibration() if calibration is None else calibration).get(system)
    return None if entry is None else HitProfile(*(float(entry[k]) for k in FRACTIONS))


def expected_memory_calls(entry: dict[str, Any] | HitProfile | None, bound_prefix: float, bound_task: float,
                          n_tasks: int, first_pays: bool = True, per_task: bool = False) -> float:
    """Expected paid memory calls of a prefix (``bound_prefix`` of the bound, 0 when built) and ``n_tasks`` tasks
    (``bound_task`` each): the first at its fraction (``first_pays``: no earlier task of the configuration cached
    its replies), the others at the later tasks' (``per_task``: at the first's). No profile: the bound."""
    if entry is None:
        return bound_prefix + n_tasks * bound_task
    p = entry if isinstance(entry, HitProfile) else HitProfile(*(float(entry[k]) for k in FRACTIONS))
    later = p.first_task if per_task else p.later_task
    first = (p.first_task if first_pays else later) if n_tasks else 0.0
    return bound_prefix * p.prefix + bound_task * (first + max(0, n_tasks - 1) * later)


def expected(plan: Plan, est: dict[str, float]) -> dict[str, float]:
    """``est`` (the bound of ``plan``'s remaining work) with the expected memory calls and tokens in place of the
    bound's, and the chains of the expected calls for its wall time (``estimate.expected_estimate`` sets it): the
    prefix's, then the lead task's (``run.lead_task``) before its later tasks spread over the slots."""
    out = dict(est)
    profile = hit_profile(plan.system_cls.name)
    fresh = int(est["tasks_to_run"] - est["answers_cached_tasks"])
    prefix = est["prefix_chain_calls"]
    per_task = (est["memory_calls"] - prefix) / fresh if fresh else 0.0
    first_pays = not plan.done  # a configuration with tasks done has their replies in the cache
    memory = expected_memory_calls(profile, prefix, per_task, fresh, first_pays, plan.run.cache_scope == "task")
    scale = memory / est["memory_calls"] if est["memory_calls"] else 1.0
    for k in ("memory_calls", "memory_prompt_tokens", "memory_completion_tokens"):
        out[k] = est[k] * scale
    out["prompt_tokens"] += out["memory_prompt_tokens"] - est["memory_prompt_tokens"]
    out["completion_tokens"] += out["memory_completion_tokens"] - est["memory_completion_tokens"]
    if profile is not None:
        out["prefix_chain_calls"] = prefix * profile.prefix
        lead = profile.first_task if first_pays else profile.later_task
        others = est["task_chain_calls"] - per_task
        out["task_chain_calls"] = per_task * lead + others + (
            per_task * profile.later_task + others if est.get("chains", 1) == 2 else 0)
    else:
        out["task_chain_calls"] = est["task_chain_calls"] * est.get("chains", 1)
    out["chains"] = 1  # the lead task's chain is in task_chain_calls (a sweep's total takes the longest)
    return out


def calls(est: dict[str, float]) -> float:
    return est["memory_calls"] + est["answer_calls"] + est["judge_calls"]


def entry(est: dict[str, float], cost: float | None, bound: dict[str, float], bound_cost: float | None) -> dict[str, Any]:
    """One configuration's (or the total's) line of ``estimate.json``."""
    return {"expected_calls": round(calls(est)), "expected_usd": None if cost is None else round(cost, 2),
            "expected_wall_s": round(est["wall_s"]), "upper_bound_calls": round(calls(bound)),
            "upper_bound_usd": None if bound_cost is None else round(bound_cost, 2)}


def write_estimate(path: Path, rows: dict[str, dict[str, Any]], total: dict[str, Any]) -> Path:
    """``estimate.json``: per configuration and under ``total``, the expected and upper-bound figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**rows, "total": total}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path
