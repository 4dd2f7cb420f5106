"""The mismatched control's figures on the official tasks (issue #41, item 3): a 2-system ``controls=all`` sweep of
``dataset=official`` through ``launch.py -m`` against the fake OpenAI-compatible server, printing per configuration
the pairs the relevance screen excluded, over-application unconditional and given the fact reached the control
answer's context, the spurious-recall rate, the no-fact application false positives and the paired within-row
differences (from MLflow and the sweep report's controls table).

The fake judges nothing: its verdicts are rules stated here, so the figures check the plumbing, not a system. The
screen calls a pair related when the fact and the partner's query share a word of six letters or more; every judge
that sees a context scores 1 exactly when the fact's text is in it (so over-application given recalled must be 100%
and a no-fact answer can never be an application false positive); the always-in-state updater echoes its file plus
the session. The background is the small six-session trace of the tests (the official one makes the echoed file
hundreds of kilobytes per call).

    INMIND_RELEASE=/work/shared/inmind-official python -m benchmarks.controls_official [--sample N]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from inmind_exp.testing.fake_openai import FakeOpenAI
from tests.launch_helpers import launch_cmd, mlflow_runs, run, write_small_data

FACT = re.compile(r"\[user_message\] \(the fact the user stated earlier\)\n(.*?)\n\n", re.S)
CONTEXT = re.compile(r"\[context\] \(what the assistant had in view when answering\)\n(.*?)\n\n\[query\]", re.S)
LATER = re.compile(r"\[query\] \(the later request\)\n(.*)", re.S)
STOP = {"should", "before", "about", "would", "something", "anything", "recently", "started"}


def _last(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def screen(body: dict[str, Any]) -> dict[str, Any]:
    text = _last(body)
    fact, query = FACT.search(text), LATER.search(text)
    words = [{w for w in re.findall(r"[a-z]{6,}", m.group(1).lower()) if w not in STOP} for m in (fact, query) if m]
    shared = words[0] & words[1] if len(words) == 2 else set()
    return {"score": int(bool(shared)), "reason": f"shared: {sorted(shared)}"}


def fact_in_context(body: dict[str, Any]) -> dict[str, Any]:
    text = _last(body)
    fact, context = FACT.search(text), CONTEXT.search(text)
    return {"score": int(bool(fact and context and fact.group(1).strip() in context.group(1))), "reason": "rule"}


def echo_memory(body: dict[str, Any]) -> str:
    text = _last(body)
    old = text.split("<memory>\n", 1)[1].split("\n</memory>", 1)[0]
    session = text.split("<session>\n", 1)[1].split("\n</session>", 1)[0]
    return (old + "\n" + session).strip()


KEYS = ("over_application_related", "over_application", "spurious_recall", "over_application_given_recalled",
        "no_fact_application", "no_fact_warning", "application")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None, help="dataset.sample (default: all 125 tasks)")
    args = ap.parse_args()
    rules = [("Rewrite the complete memory file", echo_memory), ("[query] (the later request)", screen),
             ("[context] (what the assistant had in view when answering)", fact_in_context)]
    with tempfile.TemporaryDirectory(prefix="inmind-controls-") as d, FakeOpenAI(rules=rules) as fake:
        tmp = Path(d)
        write_small_data(tmp / "data")
        cmd = [c for c in launch_cmd(tmp, fake.base_url, "system=naive_rag,always_in_state", "embedding=bm25",
                                     "controls=all", "dataset=official", "cluster.workers=1", "cluster.num_cpus=1",
                                     *([f"dataset.sample={args.sample}"] if args.sample else []))
               if not c.startswith(("dataset.path=", "cluster.workers=2", "cluster.num_cpus=2"))]
        proc = run(cmd, timeout=3600)
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            return proc.returncode
        print("$ " + " ".join(c for c in cmd[1:] if "sqlite" not in c and tmp.name not in c))
        for r in sorted(mlflow_runs(tmp), key=lambda r: r.info.run_name or ""):
            m = r.data.metrics
            if r.data.tags.get("inmind.kind") != "config":
                continue
            print(f"\n{r.info.run_name}: n_tasks {m['n_tasks']:.0f}, errors {m['n_errors']:.0f}")
            for k in KEYS:
                if k in m:
                    k_ = round(m[k] * m[f"{k}_n"] / 100)
                    print(f"  {k}: {k_}/{m[f'{k}_n']:.0f} = {m[k]:.1f}% [{m[f'{k}_ci_low']:.1f}, "
                          f"{m[f'{k}_ci_high']:.1f}], left out {m[f'{k}_errors']:.0f}")
        report = (tmp / "sweep" / "analysis" / "report.md").read_text()
        start = report.find("Negative controls: application beside")
        end = report.find("\n**", report.find("\n|", start))
        print("\n" + report[max(0, report.rfind("\n", 0, start - 2)):end if end > 0 else None].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
