"""Provenance by the one rule, per system: ``check_system``'s task (the fact in the second of four sessions) through
the protocol against the fake server whose memory model keeps the user's words
(``inmind_exp.testing.user_words.user_words_reply``): origin and union recall of the indirect query's context and
how many of its items carry the fact turn as origin. The fake's answers mean nothing; the figures show how each
system attributes what it wrote.

    python -m benchmarks.provenance_rule [system[:key=value,...] ...] [--plugin]

e.g. ``memoryos:short_term_capacity=1,mid_term_heat_threshold=1`` evicts every pair, so its profile and chain
overviews are written on this short trace.
"""

from __future__ import annotations

import argparse
import sys

import yaml
import tempfile
from pathlib import Path

from inmind_exp import env

env.apply(env.HF)

from inmind_exp.llm import CallCache, Models  # noqa: E402
from inmind_exp.memory import SYSTEMS, MemorySystem  # noqa: E402
from inmind_exp.protocol.task import run_task  # noqa: E402
from inmind_exp.records import FACT_TURN_ID  # noqa: E402
from inmind_exp.testing.check_system import TASK, encoder_for, fake_endpoints, make_trace  # noqa: E402
from inmind_exp.testing.fake_openai import FakeOpenAI  # noqa: E402
from inmind_exp.testing.user_words import user_words_reply  # noqa: E402


def measure(name: str, cls: type[MemorySystem], workdir: Path, params: dict[str, object]) -> str:
    with FakeOpenAI() as fake:
        fake.add_rule("", user_words_reply)
        cache = CallCache(workdir / "cache")
        models = Models.build(fake_endpoints(fake.base_url), cache)
        encoder = encoder_for(cls, fake.base_url, cache)
        rec = run_task(TASK, make_trace(n_sessions=4, user_turns_per_session=2), 1,
                       lambda wd: cls(models, encoder, wd, **params), models, workdir / "run", config_hash="rule",
                       system_name=name)
    items = (rec.indirect.items or ()) if rec.indirect is not None else ()
    carrying = sum(FACT_TURN_ID in it.sources for it in items)
    inherited = sum(FACT_TURN_ID in it.derived for it in items)
    faults = ", ".join(sorted({f"{f.kind} at {f.where}" for f in rec.faults if not f.diagnostic})) or "none"
    return (f"| {name} | {rec.target_recall_provenance} | {rec.target_recall_provenance_union} | {carrying} "
            f"| {inherited} | {rec.target_recall_exact} | {faults} | {(rec.error or '').splitlines()[0][:100] if rec.error else ''} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("systems", nargs="*")
    ap.add_argument("--plugin", action="store_true", help="also the plug-in example (examples/plugin_memory)")
    args = ap.parse_args()
    names = args.systems or SYSTEMS.names()
    print("| system | origin recall | union recall | items with the fact as origin | as derived | verbatim | faults "
          "| error |")
    print("|---|---|---|---|---|---|---|---|")
    targets = []
    for spec in names:
        name, _, given = spec.partition(":")
        params = {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in given.split(",") if p)}
        targets.append((spec, SYSTEMS.get(name), params))
    if args.plugin:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "plugin_memory"))
        from profile_memory.hybrid import ProfileRAG  # type: ignore[import-not-found]
        targets.append(("plug-in", ProfileRAG, {}))
    for name, cls, params in targets:
        with tempfile.TemporaryDirectory(prefix="provenance-rule-") as d:
            print(measure(name, cls, Path(d), params), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
