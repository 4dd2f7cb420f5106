"""The dry run: an upper bound on the calls and tokens a plan still needs (cache hits not subtracted), per role, from
the system's ``CallProfile``, the trace's shape and the run's judge set's judges that apply (``judges.applicable``; the
paper set is sized by its prompts), and the answer prompt's size under ``answer=paper``, priced
per role at its own model's prices; a sweep's dry run ends with the total over its configurations."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from inmind_exp.llm.endpoint import ROLES
from inmind_exp.plan.expected import calls, entry, expected, hit_profile, write_estimate
from inmind_exp.records import Session

if TYPE_CHECKING:  # the package's __init__ imports this module: it stays light (the plan and judges import openai)
    from inmind_exp.memory.base import CallProfile
    from inmind_exp.plan.plan import Plan


def _user_turns(sessions: Sequence[Session]) -> int:
    return sum(1 for s in sessions for t in s.turns if t.role == "user")


def memory_bounds(cost: CallProfile, sessions: Sequence[Session], j: int, queries: int) -> tuple[float, float]:
    """The profile's memory calls of the prefix (sessions before ``j``) and of one task (the fact, the sessions from
    ``j`` on, ``queries`` reads): the bound the measured hit profile (``plan.expected``) is a fraction of."""
    prefix = cost.memory_calls_per_user_turn * _user_turns(sessions[:j]) + cost.memory_calls_per_session * j
    suffix = (cost.memory_calls_per_user_turn * (_user_turns(sessions[j:]) + 1)
              + cost.memory_calls_per_session * (len(sessions) - j))
    return prefix, suffix + cost.memory_calls_per_query * queries


def _answer_prompt_delta(plan: Plan) -> int:
    """Tokens the release's answer prompt (``answer=paper``) adds to, or takes from, an answer call's profile, which
    is sized for the shared prompt (about four characters a token)."""
    if plan.answer_prompt is None:
        return 0
    from inmind_exp.memory.answering import SHARED_ANSWER_SYSTEM

    return (len(plan.answer_prompt.text) - len(SHARED_ANSWER_SYSTEM)) // 4


def estimate(plan: Plan, retry_errors: bool | None = None,
             earlier: dict[str, list[str]] | None = None) -> dict[str, float]:
    """Upper-bound calls, prompt and completion tokens of what remains to run (cache hits not subtracted), in total
    and per role (``memory_prompt_tokens``, ``judge_completion_tokens``, ...). A task whose memory and answer calls
    a configuration differing only in the judge made (or, ``earlier``: will make first in the same sweep) counts its
    judge calls only (``run.reuse``; ``answers_cached_tasks``)."""
    from inmind_exp.plan.reuse import answered_tasks

    cost = plan.system_cls.cost
    remaining = plan.remaining(retry_errors)
    answered = answered_tasks(plan, remaining, earlier)
    sessions = plan.trace.sessions
    j = plan.session_index
    queries = 2 if plan.asks_naive else 1
    prefix_calls, per_task_memory = memory_bounds(cost, sessions, j, queries)
    prefix_only = prefix_calls
    per_task_answer = cost.answer_calls_per_query * queries
    from inmind_exp.protocol.judges import applicable

    judges = applicable(plan.asks_naive, plan.judges)
    n = len(remaining)
    fresh = n - len(answered)  # tasks whose memory and answer calls are still to make
    prefix_needed = fresh > 0 and not plan.prefix_path.is_file()
    # the negative controls: one query and one judge call per task each, plus the relevance screen; the no-fact state
    # is one replay of the rest of the background (no fact) built with the prefix (``inmind_exp.protocol.controls``)
    control_judges = list(_control_judges(plan).values())
    if plan.controls is not None and plan.controls.no_fact:
        prefix_calls += (cost.memory_calls_per_user_turn * _user_turns(sessions[j:])
                         + cost.memory_calls_per_session * (len(sessions) - j))
    asked = plan.controls.asked if plan.controls is not None else ()  # (no_fact_application judges no_fact's answer)
    per_task_memory += cost.memory_calls_per_query * len(asked)
    per_task_answer += cost.answer_calls_per_query * len(asked)
    memory_calls = fresh * per_task_memory + (prefix_calls if prefix_needed else 0)
    answer_calls = fresh * per_task_answer
    est = {
        "tasks_total": len(plan.tasks),
        "tasks_to_run": n,
        "answers_cached_tasks": len(answered),
        "memory_calls": memory_calls,
        "answer_calls": answer_calls,
        "judge_calls": n * (len(judges) + len(control_judges)),
        "memory_prompt_tokens": memory_calls * cost.prompt_tokens_per_memory_call,
        "memory_completion_tokens": memory_calls * cost.completion_tokens_per_memory_call,
        "answerer_prompt_tokens": answer_calls * (cost.prompt_tokens_per_answer_call + _answer_prompt_delta(plan)),
        "answerer_completion_tokens": answer_calls * cost.completion_tokens_per_answer_call,
        "judge_prompt_tokens": n * sum(jd.prompt_tokens for jd in [*judges, *control_judges]),
        "judge_completion_tokens": n * sum(jd.completion_tokens for jd in [*judges, *control_judges]),
        # of the calls above, the controls' (per task: a query each, a judge call each, and the no-fact replay)
        "control_calls": n * (len(asked) * (cost.memory_calls_per_query + cost.answer_calls_per_query)
                              + len(control_judges))
        + (prefix_calls - prefix_only if prefix_needed and plan.controls is not None and plan.controls.no_fact else 0),
    }
    est["prompt_tokens"] = sum(est[f"{r}_prompt_tokens"] for r in ROLES)
    est["completion_tokens"] = sum(est[f"{r}_completion_tokens"] for r in ROLES)
    # the wall-time estimate's inputs: calls that can run side by side, and the chains that cannot
    est["prefix_chain_calls"] = prefix_calls if prefix_needed else 0
    est["task_chain_calls"] = (((per_task_memory + per_task_answer) if fresh else 0) + len(judges)
                               + len(control_judges)) if n else 0
    # run.lead_task: the first task's chain runs alone before the others start, so two chains are waited for
    est["chains"] = 2 if plan.run.lead_task and fresh > 1 else 1
    est["slots"] = in_flight(plan)
    est["wall_s"] = wall_time_s(est, plan.run.latency_s)
    return est


def expected_estimate(plan: Plan, est: dict[str, float]) -> dict[str, float]:
    """``est`` with the expected figures of ``plan.expected`` (cross-task cache hits taken off) and their wall time."""
    out = expected(plan, est)
    out["wall_s"] = wall_time_s(out, plan.run.latency_s)
    return out


def _control_judges(plan: Plan) -> dict[str, Any]:
    """The judges of the plan's negative controls (``controls.control_judges``), sized like the others, and for
    ``mismatched`` the relevance screen (one call per pair; counted for every configuration, though the call cache
    serves the second configuration of a task set the first one's verdicts)."""
    if plan.controls is None:
        return {}
    from inmind_exp.protocol.controls import control_judges
    from inmind_exp.protocol.judges import RELEVANCE_JUDGE

    out = control_judges(plan.controls, plan.judges)
    return {**out, "relevance": RELEVANCE_JUDGE} if "mismatched" in plan.controls else out


def in_flight(plan: Plan) -> int:
    """How many calls of this plan can be in flight at once: ``cluster.tasks_per_worker`` tasks per worker, at most
    the tightest endpoint limit (``llm.max_concurrency`` or a role's own) of the roles it calls."""
    roles = [r for r in ROLES if r != "memory" or plan.system_cls.cost.memory_calls_per_user_turn
             or plan.system_cls.cost.memory_calls_per_session or plan.system_cls.cost.memory_calls_per_query]
    limits = [plan.endpoints[r].max_concurrency for r in roles if r in plan.endpoints]
    tasks = plan.cluster.workers * max(1, plan.cluster.tasks_per_worker)
    return max(1, min([tasks, *[c for c in limits if c]]))


def wall_time_s(est: dict[str, float], latency_s: float) -> float:
    """Expected wall time at ``latency_s`` per call: the prefix build's calls one after another (its tasks wait
    for it), the tasks' calls spread over the slots that can be in flight, plus one task's own chain of calls
    (the last task to start still runs its calls in order). Start-up and local computing are not included."""
    task_calls = calls(est) - est["prefix_chain_calls"]
    return latency_s * (est["prefix_chain_calls"] + task_calls / max(1.0, est["slots"])
                        + est["task_chain_calls"] * est.get("chains", 1))


def duration(seconds: float) -> str:
    """``1h 05m`` / ``12m 30s`` / ``45s``: the dry run's wall-time figure."""
    s = int(round(seconds))
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def price(plan: Plan, est: dict[str, float]) -> tuple[float | None, list[str]]:
    """The estimate's cost in dollars, each role's tokens at its own model's prices (prompt and completion), and
    the models without a price (then the cost is None: a partial sum would read as the whole)."""
    total, unpriced = 0.0, []
    for role in ROLES:
        if not est[f"{role}_prompt_tokens"] and not est[f"{role}_completion_tokens"]:
            continue
        model = plan.endpoints[role].model
        p = plan.prices.get(model)
        if p is None:
            unpriced.append(model)
            continue
        total += est[f"{role}_prompt_tokens"] * p[0] / 1e6 + est[f"{role}_completion_tokens"] * p[1] / 1e6
    return (None if unpriced else total), sorted(set(unpriced))


class SweepTotal:
    """The dry run's running total over the configurations of a sweep (printed when the sweep's planning ends)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.configs = 0
        self.latency_s = 0.0
        self.est: dict[str, float] = {}
        self.cost: float | None = 0.0
        #: the same sums of the expected figures (``plan.expected``: cross-task cache hits taken off)
        self.exp: dict[str, float] = {}
        self.exp_cost: float | None = 0.0
        self.unpriced: set[str] = set()
        #: ``estimate.json``'s lines by configuration, and where it goes (the sweep's or run's directory)
        self.entries: dict[str, dict[str, Any]] = {}
        self.root: Path | None = None
        #: answers key -> task ids an estimated configuration answers (``run.reuse``): a later one re-judges them
        self.answers: dict[str, list[str]] = {}
        #: each configuration's row of the closing table: name, tasks to run / planned, then calls, cost and wall time
        #: expected and as bounded
        self.rows: list[tuple[str, str, int, float | None, float, int, float | None, float]] = []

    def add(self, est: dict[str, float], cost: float | None, unpriced: list[str], latency_s: float = 10.0,
            name: str = "", exp: dict[str, float] | None = None, exp_cost: float | None = None) -> None:
        """One configuration's bound ``est`` and its expected figures ``exp`` (the bound when not given)."""
        self.configs += 1
        exp, exp_cost = (est, cost) if exp is None else (exp, exp_cost)
        self.rows.append((name, f"{est['tasks_to_run']:.0f}/{est['tasks_total']:.0f}", round(calls(exp)), exp_cost,
                          exp.get("wall_s", 0.0), round(calls(est)), cost, est.get("wall_s", 0.0)))
        self.latency_s = max(self.latency_s, latency_s)
        _accumulate(self.est, est)
        _accumulate(self.exp, exp)
        self.cost = None if cost is None or self.cost is None else self.cost + cost
        self.exp_cost = None if exp_cost is None or self.exp_cost is None else self.exp_cost + exp_cost
        self.unpriced.update(unpriced)

    def wall_s(self, expected: bool = False) -> float:
        """The sweep's wall time: every configuration's calls share one pool of workers (one schedule per
        sweep), so the longest prefix and task chains count once."""
        return wall_time_s(self.exp if expected else self.est, self.latency_s)

    def table(self) -> list[str]:
        """The one-screen summary the dry run ends with: a row per configuration and the total."""
        money = lambda c: f"${c:,.2f}" if c is not None else "no price"  # noqa: E731
        rows = [(n, t, f"{c:,}", money(d), duration(w), f"{bc:,}", money(bd), duration(bw))
                for n, t, c, d, w, bc, bd, bw in self.rows]
        if len(self.rows) > 1:
            rows.append(("total", f"{self.est['tasks_to_run']:.0f}", f"{sum(r[2] for r in self.rows):,}",
                         money(self.exp_cost), duration(self.wall_s(True)), f"{sum(r[5] for r in self.rows):,}",
                         money(self.cost), duration(self.wall_s())))
        head = ("configuration", "tasks", "calls", "$", "wall", "bound: calls", "$", "wall")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        cell = lambda r: "| " + " | ".join(v.ljust(w) if i == 0 else v.rjust(w)  # noqa: E731
                                           for i, (v, w) in enumerate(zip(r, widths))) + " |"
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return [cell(head), rule, *map(cell, rows),
                "(expected: cross-task cache hits from each system's measured hit profile; bound: none subtracted; "
                "wall at run.latency_s per call; total wall: one shared pool)"]

    def line(self) -> str:
        return (f"[dry run total] {self.configs} configuration(s): {self.est['tasks_to_run']:.0f} tasks to run; "
                f"expected {_figures(self.exp, self.exp_cost, sorted(self.unpriced))}, "
                f"{_wall(self.wall_s(True), self.latency_s, self.est['slots'])}; upper bound "
                f"{_calls(self.est, self.cost)}, {_wall(self.wall_s(), self.latency_s, self.est['slots'])}")

    def write(self) -> Path | None:
        """``estimate.json`` in the sweep's (or run's) directory: each configuration's figures and the total."""
        if self.root is None or not self.configs:
            return None
        total = entry({**self.exp, "wall_s": self.wall_s(True)}, self.exp_cost, self.est, self.cost)
        return write_estimate(self.root / "estimate.json", self.entries, total)


def _accumulate(total: dict[str, float], est: dict[str, float]) -> None:
    for k, v in est.items():
        if k in ("prefix_chain_calls", "task_chain_calls", "chains", "slots"):  # a sweep's chains overlap; its pool is shared
            total[k] = max(total.get(k, 0), v)
        elif k != "wall_s":
            total[k] = total.get(k, 0) + v


def _calls(est: dict[str, float], cost: float | None) -> str:
    money = f", ~${cost:,.2f}" if cost is not None else ""
    return f"~{calls(est):,.0f} calls{money}"


def _wall(wall_s: float, latency_s: float, slots: float) -> str:
    return f"~{duration(wall_s)} wall at {latency_s:g} s per call, {slots:.0f} in flight"


def _figures(est: dict[str, float], cost: float | None, unpriced: list[str]) -> str:
    """Calls per role, prompt and completion tokens, and the cost (or the models without a price)."""
    from inmind_exp.config.checks import price_override

    money = (f", ~${cost:,.2f}" if cost is not None else
             f", no price for {', '.join(unpriced)} (price it: {' '.join(map(price_override, unpriced))})" if unpriced
             else "")
    controls = f" (~{est['control_calls']:.0f} of them the controls')" if est.get("control_calls") else ""
    return (f"~{est['memory_calls']:.0f} memory + {est['answer_calls']:.0f} answer + {est['judge_calls']:.0f} judge "
            f"calls{controls}, ~{est['prompt_tokens'] / 1e6:.2f}M prompt + {est['completion_tokens'] / 1e6:.2f}M completion "
            f"tokens{money}")


def print_estimate(plan: Plan, retry_errors: bool | None = None, out: Any = None,
                   total: SweepTotal | None = None) -> dict[str, float]:
    """Print the estimate as the dry run's output: calls per role, prompt and completion tokens, and the cost with
    each role's tokens at its own model's prices (completions estimated from the system's ``CallProfile``; a
    reasoning model's hidden reasoning tokens are not included). Adds it to ``total``, the sweep's, if given (a
    configuration whose answers an earlier one of ``total`` makes is priced for its judge calls only)."""
    from inmind_exp.plan.reuse import answers_key


    total = total if total is not None else SweepTotal()
    est = estimate(plan, retry_errors, total.answers)
    cost, unpriced = price(plan, est)
    exp = expected_estimate(plan, est)
    exp_cost, _ = price(plan, exp)
    total.add(est, cost, unpriced, plan.run.latency_s, plan.name, exp, exp_cost)
    total.entries[plan.name] = entry(exp, exp_cost, est, cost)
    total.root = plan.root
    total.answers.setdefault(answers_key(plan), []).extend(t.id for t in plan.remaining(retry_errors))
    reused = (f"; {est['answers_cached_tasks']:.0f} of them only re-judged (same configuration but the judge: their "
              "memory and answer calls come from the call cache)" if est["answers_cached_tasks"] else "")
    basis = ("no memory calls: as bounded" if not est["memory_calls"] else
             "cross-task cache hits from the system's measured hit profile" if hit_profile(plan.system_cls.name)
             else "no measured hit profile for this system: the bound")
    print(f"[dry run] {plan.name} (config {plan.config_hash}): {est['tasks_to_run']:.0f}/{est['tasks_total']:.0f} "
          f"tasks to run{reused}; expected {_figures(exp, exp_cost, unpriced)}, "
          f"{_wall(exp['wall_s'], plan.run.latency_s, est['slots'])} ({basis}); upper bound {_calls(est, cost)} "
          f"(cache hits not subtracted), {_wall(est['wall_s'], plan.run.latency_s, est['slots'])} (run.latency_s)",
          file=out or sys.stdout, flush=True)
    from inmind_exp.official.fidelity import fidelity

    print(f"[fidelity] {plan.name}: as configured, {fidelity(plan).tag} (the run records what was served)",
          file=out or sys.stdout, flush=True)
    return est


def print_sweep_total(total: SweepTotal, out: Any = None) -> None:
    """Print ``total`` when it sums two or more configurations (a dry run's sweep), then the summary table (expected
    figures and bounds); write ``estimate.json`` (the expected figures beside the bounds)."""
    if total.configs > 1:
        print(total.line(), file=out or sys.stdout, flush=True)
    if total.configs:
        print("\n" + "\n".join(total.table()), file=out or sys.stdout, flush=True)
    path = total.write()
    if path is not None:
        print(f"[dry run estimate] per configuration and in total: {path}", file=out or sys.stdout, flush=True)
