"""Command line: ``python -m analysis {report,view,export,compare,runs,audit}`` over an MLflow experiment or a sweep directory.

    python -m analysis report --experiment inmind --out reports/inmind [--tracking-uri sqlite:///mlflow.db]
    python -m analysis report --sweep-dir multirun/inmind --out reports/inmind
    python -m analysis view --experiment inmind --out reports/inmind [--tasks tasks.jsonl]
    python -m analysis export --experiment inmind --out reports/inmind
    python -m analysis compare --experiment inmind --a always_in_state/minilm/middle/openai --b <run id or hash> [--json FILE]
    python -m analysis runs [--experiment inmind] [--tracking-uri sqlite:///mlflow.db]
    python -m analysis audit --experiment inmind --labels labels.jsonl [--out DIR]
    python -m analysis audit --experiment inmind --judges RUN_A RUN_B
    python -m analysis rejudge --experiment inmind [--run REF] [--judges strict] [--judge-model M] [--samples N]
    python -m analysis export-submission --sweep-dir multirun/inmind --out submissions/ [--run REF ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from inmind_exp.protocol.metrics import METRICS  # noqa: E402

from analysis.audit import LabelError  # noqa: E402
from analysis.load import LoadError, RunSet, load_sweep_dir  # noqa: E402
from analysis.mlflow_runs import load_experiment  # noqa: E402
from analysis.pairwise import verdict_lines  # noqa: E402
from analysis.rejudge import RejudgeError  # noqa: E402
from inmind_exp.data.errors import DataError  # noqa: E402
from inmind_exp.data.release import ReleaseError  # noqa: E402
from inmind_exp.errors import EndpointError  # noqa: E402

if TYPE_CHECKING:
    pass

DEFAULT_URI = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")


def _source_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--experiment", help="MLflow experiment name")
    src.add_argument("--sweep-dir", type=Path, help="a sweep directory (per-job records.jsonl + config.yaml, ledger/)")
    p.add_argument("--tracking-uri", default=DEFAULT_URI, help=f"MLflow tracking URI (default {DEFAULT_URI})")


def _load(args: argparse.Namespace) -> RunSet:
    import dataclasses

    from analysis.rejudged import load_rejudged

    if args.experiment:
        runset = load_experiment(args.experiment, args.tracking_uri)
    else:
        runset = load_sweep_dir(args.sweep_dir)
    return dataclasses.replace(runset, rejudged=load_rejudged(runset))


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.headline import terminal
    from analysis.publish import publish
    from analysis.report import build
    from analysis.viewer import write_viewer

    runset = _load(args)
    viewer, problems = write_viewer(runset, args.out, args.tasks)  # first, so that the report links to it
    rep = build(runset, args.out, labels=args.labels, formats=args.formats)
    print(terminal(runset.runs))
    print(f"Full table (every metric, the Δ columns, the judge audit):\n  {rep.out / 'tables' / 'table1.md'}")
    print(f"Per-task viewer:\n  {viewer}")
    for p in problems:
        print(f"[analysis] WARNING: per-task viewer: {p}", file=sys.stderr)
    for w in rep.warnings:
        print(f"\n[analysis] WARNING: {w}", file=sys.stderr)
    print(f"\n[analysis] {len(runset.runs)} configurations; {len(rep.files)} files in {rep.out}; "
          f"report: {rep.html}")
    for s in runset.skipped:
        print(f"[analysis] skipped {s}", file=sys.stderr)
    if args.no_log:
        return 0
    logged = publish(runset, rep.out)
    if logged:
        print(f"[analysis] logged to MLflow parent run(s) {', '.join(logged)} under artifacts/analysis/")
    elif runset.tracking_uri:
        print("[analysis] no sweep parent run in this experiment: report not logged to MLflow", file=sys.stderr)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from analysis.publish import publish_viewer
    from analysis.viewer import write_viewer

    runset = _load(args)
    path, problems = write_viewer(runset, args.out, args.tasks)
    for p in problems:
        print(f"[analysis] WARNING: {p}", file=sys.stderr)
    print(f"[analysis] per-task viewer of {len(runset.runs)} configurations: {path}")
    if not args.no_log and (logged := publish_viewer(runset, path)):
        print(f"[analysis] logged to MLflow parent run(s) {', '.join(logged)} under artifacts/analysis/")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from analysis.export import write_export

    runset = _load(args)
    for p in write_export(runset, args.out):
        print(f"[analysis] wrote {p}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import EXCLUSION_NOTE, compare

    runset = _load(args)
    a, b = runset.get(args.a), runset.get(args.b)
    comps = [compare(a, b, metric) for metric in args.metric or METRICS]
    if args.json:
        doc = {"a": {"label": a.label, "source": a.source}, "b": {"label": b.label, "source": b.source},
               "metrics": {c.metric: c.as_dict() for c in comps}, "note": EXCLUSION_NOTE}
        text = json.dumps(doc, indent=2, allow_nan=False)
        if str(args.json) == "-":  # machine-readable stdout: the JSON only
            print(text)
            return 0
        args.json.write_text(text + "\n", encoding="utf-8")
    index = {id(r): k for k, r in enumerate(runset.runs)}
    print(verdict_lines(comps, (index[id(a)], index[id(b)])))
    print(f"\nA = {a.label} ({a.source})\nB = {b.label} ({b.source})\n")
    for c in comps:
        print(c.summary())
    print(f"\n{EXCLUSION_NOTE}")
    if args.json:
        print(f"[analysis] wrote {args.json}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from analysis.mlflow_runs import list_runs
    from analysis.table import to_markdown

    import pandas as pd

    names, rows = list_runs(args.tracking_uri, args.experiment)
    for name in names:
        mine = [r for r in rows if r.experiment == name]
        print(f"experiment {name!r}: {len(mine)} configuration run(s)")
        if mine:
            print(to_markdown(pd.DataFrame([{"sweep": r.sweep, "configuration": r.name, "n/planned":
                                             f"{r.done}/{r.planned}", "status": r.status, "fidelity": r.fidelity}
                                            for r in mine])) + "\n")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from analysis.audit import audit_human, corrected_rates, judge_agreement, judge_pairs, read_labels

    runset = _load(args)
    tables = []
    if args.labels:
        labels = read_labels(args.labels)
        tables += [audit_human(labels, runset.runs), corrected_rates(labels, runset.runs)]
    if args.judges:
        tables.append(judge_agreement([(runset.get(args.judges[0]), runset.get(args.judges[1]))]))
    elif not args.labels:
        pairs = judge_pairs(runset.runs)
        if not pairs:
            print("error: give --labels FILE or --judges RUN_A RUN_B (no runs differ only in the judge model)",
                  file=sys.stderr)
            return 2
        tables.append(judge_agreement(pairs))
    for t in tables:
        print(f"{t.caption}\n\n{t.markdown()}\n\n{t.note}\n")
        if args.out:
            for p in t.write(Path(args.out)):
                print(f"[analysis] wrote {p}")
    return 0


def cmd_rejudge(args: argparse.Namespace) -> int:
    """Re-judge the stored answers of the chosen runs (all config runs by default) under one judge setting."""
    import tempfile

    from inmind_exp.config.sources import logged_tasks
    from inmind_exp.data.tasks import load_tasks
    from inmind_exp.llm import CallCache

    from analysis.rejudge import DEFAULT_CACHE_DIR, planned_calls, rejudge, setting_for, task_path, tasks_for
    from analysis.rejudged import write_mlflow, write_sweep

    runset = _load(args)
    runs = [runset.get(ref) for ref in args.run] if args.run else list(runset.runs)
    task_sets: dict[str | None, dict] = {}
    plans = []
    for run in runs:  # every input is checked (judge set, endpoint, key, task file) before the first call
        setting = setting_for(run, args.judges, args.samples, model=args.judge_model, base_url=args.base_url,
                              api_key_env=args.api_key_env, temperature=args.temperature, workers=args.workers)
        path = str(args.tasks) if args.tasks else task_path(run)
        if path not in task_sets:
            task_sets[path] = {t.id: t for t in (load_tasks(path) if args.tasks else logged_tasks(run.params))}
        cache_dir = args.cache_dir or run.params.get("run.cache_dir") or DEFAULT_CACHE_DIR
        plans.append((run, tasks_for(run, task_sets[path]), setting, CallCache(cache_dir)))
    if args.dry_run:
        total = cached = 0
        for run, tasks, setting, cache in plans:
            n, hit = planned_calls(run, tasks, setting, cache)
            total, cached = total + n, cached + hit
            print(f"{run.label}: judge {setting.name} × {setting.samples} sample(s): {n} judge calls, {hit} cached, "
                  f"{n - hit} to make (no memory or answerer call)")
        print(f"total: {total} judge calls, {cached} cached, {total - cached} to make")
        return 0
    results = []
    for run, tasks, setting, cache in plans:
        done = rejudge(run, tasks, setting, cache, attempts=args.attempts)
        results += done
        for r in done:
            m = r.records
            print(f"{run.label} ⟂ {setting.name} #{r.sample}: {r.calls} judge calls ({r.cached_calls} cached, "
                  f"{r.http_requests} requests), {sum(1 for x in m if x.error)} of {len(m)} tasks with an error")
    if runset.tracking_uri and runset.experiment:
        with tempfile.TemporaryDirectory(prefix="inmind-rejudge-") as tmp:
            ids = write_mlflow(results, runset.tracking_uri, runset.experiment, Path(tmp))
        print(f"[analysis] {len(ids)} rejudge run(s) in MLflow experiment {runset.experiment!r}: {', '.join(ids)}")
    else:
        paths = write_sweep(results, args.sweep_dir)
        print(f"[analysis] {len(paths)} rejudged record file(s) under {args.sweep_dir / 'rejudge'}")
    return 0


def cmd_export_submission(args: argparse.Namespace) -> int:
    from analysis.submission_export import export_selected

    return export_selected(args, lambda: _load(args))


#: ``analysis.plots.FORMATS``, spelled here so that ``--help`` imports no matplotlib
FIGURE_FORMATS = ("png", "svg")


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    if not formats or any(f not in FIGURE_FORMATS for f in formats):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {','.join(FIGURE_FORMATS)}")
    return formats


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("report", help="all tables, plots and the HTML report; logged to the MLflow parent run")
    _source_args(rp)
    rp.add_argument("--out", type=Path, required=True, help="output directory")
    rp.add_argument("--labels", type=Path, help="human-label JSONL for the judge audit (format: analysis/audit.py)")
    rp.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    rp.add_argument("--tasks", type=Path, help="task JSONL for the viewer's task texts (default: each run's dataset.path)")
    rp.add_argument("--formats", type=_formats, default=",".join(FIGURE_FORMATS),
                    help=f"figure formats, comma-separated, of {','.join(FIGURE_FORMATS)} (default: both; the "
                         "end-of-sweep report draws png only)")
    rp.set_defaults(func=cmd_report)
    vp = sub.add_parser("view", help="the per-task viewer: one static HTML page (viewer.html) across configurations")
    _source_args(vp)
    vp.add_argument("--out", type=Path, required=True, help="output directory (the report's, to sit beside it)")
    vp.add_argument("--tasks", type=Path, help="task JSONL for the task texts (default: each run's dataset.path)")
    vp.add_argument("--no-log", action="store_true", help="do not log the viewer to MLflow")
    vp.set_defaults(func=cmd_view)
    ep = sub.add_parser("export", help="one flat per-task file (CSV, and Parquet with pyarrow): configuration x task")
    _source_args(ep)
    ep.add_argument("--out", type=Path, required=True, help="output directory (tasks.csv, tasks.parquet)")
    ep.set_defaults(func=cmd_export)
    cp = sub.add_parser("compare", help="paired comparison of two runs on the same tasks")
    _source_args(cp)
    cp.add_argument("--a", required=True, help="run label, MLflow run id or config hash, or a prefix of one only one run has")
    cp.add_argument("--b", required=True, help="run label, MLflow run id or config hash, or a prefix of one only one run has")
    cp.add_argument("--metric", action="append", choices=METRICS, help="metric(s) to compare (default: all)")
    cp.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON, per metric: diff, "
                    "ci_low, ci_high (points), ci_method, p_exact, p_midp, the discordant counts and task ids "
                    "('-': the JSON alone on stdout)")
    cp.set_defaults(func=cmd_compare)
    ls = sub.add_parser("runs", help="list experiments and their configuration runs: n/planned, status, fidelity")
    ls.add_argument("--experiment", help="only this MLflow experiment (default: every experiment of the store)")
    ls.add_argument("--tracking-uri", default=DEFAULT_URI, help=f"MLflow tracking URI (default {DEFAULT_URI})")
    ls.set_defaults(func=cmd_runs)
    au = sub.add_parser("audit", help="judge audit: human labels, or agreement of two judge models")
    _source_args(au)
    au.add_argument("--labels", type=Path, help="human-label JSONL (format: analysis/audit.py)")
    au.add_argument("--judges", nargs=2, metavar=("RUN_A", "RUN_B"), help="two runs differing in the judge model")
    au.add_argument("--out", type=Path, help="also write the tables (md, tex, csv) here")
    au.set_defaults(func=cmd_audit)
    from inmind_exp.protocol.judges import JUDGE_SETS

    rj = sub.add_parser("rejudge", help="re-judge the stored answers with another judge model, prompt set or N samples")
    _source_args(rj)
    rj.add_argument("--run", action="append", help="run label, id or config hash to re-judge (default: every run)")
    rj.add_argument("--judges", default="strict", choices=sorted(JUDGE_SETS),
                    help="judge prompt set (inmind_exp.protocol.judges.JUDGE_SETS; default strict, the set runs use)")
    rj.add_argument("--judge-model", "--model", dest="judge_model", help="judge model (default: the run's judge)")
    rj.add_argument("--samples", type=int, default=1, help="repeated samples per verdict, each its own cache entry")
    rj.add_argument("--base-url", help="OpenAI-compatible endpoint for the judge (default: the run's judge endpoint)")
    rj.add_argument("--api-key-env", help="environment variable holding the endpoint's API key (never the key)")
    rj.add_argument("--temperature", type=float, help="judge temperature (default: the run's)")
    rj.add_argument("--tasks", type=Path, help="the task file the runs read (default: their dataset.path)")
    rj.add_argument("--cache-dir", help="call cache (default: the run's run.cache_dir, else $INMIND_CACHE_DIR or "
                                        ".inmind_cache)")
    rj.add_argument("--attempts", type=int, default=3, help="judge attempts at a valid JSON verdict (default 3)")
    rj.add_argument("--workers", type=int, default=4, help="concurrent judge calls (default 4)")
    rj.add_argument("--dry-run", action="store_true", help="count the judge calls (and cache hits); call nothing")
    rj.set_defaults(func=cmd_rejudge)
    ex = sub.add_parser("export-submission", help="the official release's submission file of each configuration, "
                                                  "validated against the release's schema")
    _source_args(ex)
    ex.add_argument("--out", type=Path, required=True,
                    help="a directory (one <label>.submission.jsonl per configuration), or a .jsonl file for one run")
    ex.add_argument("--run", action="append", help="run label, MLflow run id or config hash (default: every run)")
    ex.add_argument("--release-dir", help="the official release (default: $INMIND_RELEASE, then the fetch cache)")
    ex.add_argument("--system", help="the system name written into every row (default: the record's system)")
    ex.set_defaults(func=cmd_export_submission)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (LoadError, LabelError, RejudgeError, EndpointError, DataError, ReleaseError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
