"""Command line: ``python -m analysis {report,view,export,compare,audit}`` over an MLflow experiment or a sweep directory.

    python -m analysis report --experiment inmind --out reports/inmind [--tracking-uri sqlite:///mlflow.db]
    python -m analysis report --sweep-dir multirun/inmind --out reports/inmind
    python -m analysis view --experiment inmind --out reports/inmind [--tasks tasks.jsonl]
    python -m analysis export --experiment inmind --out reports/inmind
    python -m analysis compare --experiment inmind --a always_in_state/minilm/middle/openai --b <run id or hash>
    python -m analysis audit --experiment inmind --labels labels.jsonl [--out DIR]
    python -m analysis audit --experiment inmind --judges RUN_A RUN_B
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from inmind_exp.metrics import METRICS  # noqa: E402

from analysis.audit import LabelError  # noqa: E402
from analysis.load import LoadError, RunSet, load_experiment, load_sweep_dir  # noqa: E402
from analysis.stats import N_BOOT  # noqa: E402

DEFAULT_URI = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")


def _source_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--experiment", help="MLflow experiment name")
    src.add_argument("--sweep-dir", type=Path, help="a sweep directory (per-job records.jsonl + config.yaml, ledger/)")
    p.add_argument("--tracking-uri", default=DEFAULT_URI, help=f"MLflow tracking URI (default {DEFAULT_URI})")
    p.add_argument("--n-boot", type=int, default=N_BOOT, help=f"paired bootstrap resamples (default {N_BOOT}, as the "
                   "end-of-sweep report)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def _load(args: argparse.Namespace) -> RunSet:
    if args.experiment:
        return load_experiment(args.experiment, args.tracking_uri)
    return load_sweep_dir(args.sweep_dir)


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.headline import terminal
    from analysis.report import build, publish
    from analysis.viewer import write_viewer

    runset = _load(args)
    viewer, problems = write_viewer(runset, args.out, args.tasks)  # first, so that the report links to it
    rep = build(runset, args.out, labels=args.labels, n_boot=args.n_boot, seed=args.seed)
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
    from analysis.viewer import publish_viewer, write_viewer

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
    print(f"A = {a.label} ({a.source})\nB = {b.label} ({b.source})\n")
    for metric in args.metric or METRICS:
        print(compare(a, b, metric, n_boot=args.n_boot, seed=args.seed).summary())
    print(f"\n{EXCLUSION_NOTE}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from analysis.audit import audit_human, judge_agreement, judge_pairs, read_labels

    runset = _load(args)
    tables = []
    if args.labels:
        tables.append(audit_human(read_labels(args.labels), runset.runs))
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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("report", help="all tables, plots and the HTML report; logged to the MLflow parent run")
    _source_args(rp)
    rp.add_argument("--out", type=Path, required=True, help="output directory")
    rp.add_argument("--labels", type=Path, help="human-label JSONL for the judge audit (format: analysis/audit.py)")
    rp.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    rp.add_argument("--tasks", type=Path, help="task JSONL for the viewer's task texts (default: each run's dataset.path)")
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
    cp.add_argument("--a", required=True, help="run label, MLflow run id or config hash (or a unique prefix)")
    cp.add_argument("--b", required=True, help="run label, MLflow run id or config hash (or a unique prefix)")
    cp.add_argument("--metric", action="append", choices=METRICS, help="metric(s) to compare (default: all)")
    cp.set_defaults(func=cmd_compare)
    au = sub.add_parser("audit", help="judge audit: human labels, or agreement of two judge models")
    _source_args(au)
    au.add_argument("--labels", type=Path, help="human-label JSONL (format: analysis/audit.py)")
    au.add_argument("--judges", nargs=2, metavar=("RUN_A", "RUN_B"), help="two runs differing in the judge model")
    au.add_argument("--out", type=Path, help="also write the tables (md, tex, csv) here")
    au.set_defaults(func=cmd_audit)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (LoadError, LabelError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
