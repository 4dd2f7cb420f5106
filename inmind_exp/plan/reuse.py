"""Configurations that differ only in the judge: the same memory and answer calls (issue #22: a sweep that only
changes the judge must cost only judge calls).

Two configurations whose result identities are equal once the judge's parts are taken out (the judge role's
endpoint, the judge prompt set's versions and texts, ``run.judge_attempts``) send the same memory, embedding and
answer requests, so with one call cache the second one's are all cache hits. Two things make that hold and be seen:

- in a sweep, a configuration waits for the first one with the same ``answers_key`` (its *leader*) before it starts
  (``leaders``; ``run.sweep.run_plans``), so the two never run a task at the same time and both miss the cache;
- the dry run counts no memory or answer call for a task whose answers a leader of the same dry run, or a finished
  configuration of the same root (``mark`` writes ``<root>/answers/<answers_key>/<config hash>`` when a plan runs),
  already makes or made (``answered_tasks``); only its judge calls.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Sequence

from inmind_exp.config.identity import identity_hash
from inmind_exp.plan.ledger import read_records

#: The directory under a root holding one marker per (answers key, configuration) that ran.
ANSWERS_DIR = "answers"


def answers_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """``identity`` without what only the judges read: the judge role, the judge prompt set and ``judge_attempts``.
    Everything else (memory, answerer, embedding, data, code, controls ...) stays, so an unknown key is kept."""
    out = copy.deepcopy(dict(identity))
    out.pop("judges", None)
    if isinstance(out.get("roles"), dict):
        out["roles"].pop("judge", None)
    if isinstance(out.get("code"), dict):
        out["code"].pop("judges", None)
    if isinstance(out.get("settings"), dict):
        out["settings"].pop("judge_attempts", None)
    return out


def answers_key(plan: Any) -> str:
    """Equal for two plans that send the same memory and answer requests into the same call cache."""
    return identity_hash({"answers": answers_identity(plan.identity), "session_index": plan.session_index,
                          "cache_dir": str(Path(plan.run.cache_dir).resolve()), "cache": plan.run.cache})


def leaders(plans: Sequence[Any]) -> dict[int, int]:
    """For each plan that only changes the judge of an earlier one, the index of the first such plan (its leader)."""
    first: dict[str, int] = {}
    out: dict[int, int] = {}
    for i, p in enumerate(plans):
        k = answers_key(p)
        if k in first and plans[first[k]].config_hash != p.config_hash:
            out[i] = first[k]
        first.setdefault(k, i)
    return out


def mark(plan: Any) -> None:
    """Record that ``plan``'s configuration runs under its answers key (an empty marker file), for later dry runs."""
    d = Path(plan.root) / ANSWERS_DIR / answers_key(plan)
    d.mkdir(parents=True, exist_ok=True)
    (d / plan.config_hash).touch()


def _answered(record: Any) -> bool:
    """The task's memory and answer calls were all made: its indirect answer, asked last, is there (whatever its
    judges did)."""
    return record.indirect is not None


def answered_tasks(plan: Any, tasks: Sequence[Any], earlier: Mapping[str, Sequence[str]] | None = None) -> set[str]:
    """Of ``tasks`` (``plan``'s still to run), those whose memory and answer calls are already in the call cache or
    will be by the time ``plan`` runs: answered by another configuration of the same root under the same answers
    key (its ledger), or among ``earlier[answers_key]``, the tasks of a plan before it in the same sweep."""
    key = answers_key(plan)
    wanted = {t.id for t in tasks}
    out = wanted & set((earlier or {}).get(key, ()))
    d = Path(plan.root) / ANSWERS_DIR / key
    if d.is_dir():
        for marker in sorted(d.iterdir()):
            ledger = Path(plan.root) / "ledger" / f"{marker.name}.jsonl"
            if marker.name == plan.config_hash or not ledger.is_file() or out == wanted:
                continue
            out |= {tid for tid, r in read_records(ledger).items() if tid in wanted and _answered(r)}
    return out
