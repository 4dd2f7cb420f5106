"""What a reader must see before the numbers: incomplete runs, small samples, ties at the top, demo tasks,
flagged fact-write faults and repeated embedding-free runs."""

from __future__ import annotations

from typing import Sequence

from inmind_exp.display.headline import flag_note

from analysis.caveats import small_sample_warning
from analysis.headline import flagged
from analysis.load import Run, RunSet
from analysis.official import run_fidelity
from analysis.breakdowns import embedding_free_repeats
from analysis.tables import retrieval_leaders

PAIRED_METRICS: tuple[str, ...] = ("application", "target_recall")


def valid_sizes(runs: list[Run]) -> list[tuple[str, int]]:
    """Per run, the tasks that count towards its rates (those that ran; a failed verdict leaves only its own rate)."""
    return [(r.label, r.metrics.n_tasks - len(r.metrics.excluded)) for r in runs]


def warnings(runset: RunSet) -> list[str]:
    """What a reader must see before the numbers: too few tasks, a tie at the top, repeated embedding-free runs."""
    runs = list(runset.runs)
    out = []
    if runset.incomplete:
        out.append(incomplete_warning(runset.incomplete))
    small = small_sample_warning(valid_sizes(runs))
    if small:
        out.append(small)
    leaders = retrieval_leaders(runs)
    if len(leaders) > 1:
        app = leaders[0].metrics.rates["application"].pct
        out.append(f"Tie: no single best retrieval configuration; {', '.join(r.label for r in leaders)} share "
                   f"application {app:.1f}% and the same target recall.")
    demo = [r.label for r in runs if run_fidelity(r).demo]
    if demo:
        out.append(f"Demo tasks: {len(demo)} of {len(runs)} configuration(s) ran the bundled demo tasks, not the "
                   f"official InMind set ({', '.join(demo)}): their numbers cannot be set beside the paper's or a "
                   "leaderboard's (dataset=official runs the release's tasks).")
    bad = [r for r in runs if flagged(r)]
    if bad:
        out.append(flag_note([f"{r.label} {r.fault_metrics.fact_write_fault_rate:.0f}%" for r in bad]))
    repeats = embedding_free_repeats(runs)
    if repeats:
        out.append(f"{', '.join(repeats)} use(s) no embedding but ran under several embeddings: those runs repeat one "
                   "configuration (differences between them are run-to-run noise) and are left out of the embedding "
                   "comparison.")
    return out


#: what stopped an incomplete run (``tags.INCOMPLETE``), and how to finish it
INCOMPLETE_WHY = {
    "capped": ("stopped at the spend cap", "rerun the launch with a higher run.max_usd (its last lines print the "
               "command with the cap that finishes)"),
    "interrupted": ("interrupted", "rerun the same command"),
    "errors": ("tasks ended in error", "rerun the same command to retry them"),
}


def incomplete_warning(incomplete: Sequence[tuple[str, int, int, str]]) -> str:
    """The report's first warning: which configurations did not run every planned task, why, and how to finish;
    finished tasks are never run or paid again."""
    parts, hows = [], []
    for name, done, planned, why in incomplete:
        what, how = INCOMPLETE_WHY.get(why, (why, "rerun the same command"))
        missing = f"{planned - done} of {planned} planned tasks missing" if planned > done else "tasks in error"
        parts.append(f"{name} ({missing}: {what})")
        if how not in hows:
            hows.append(how)
    return (f"Incomplete: {len(parts)} configuration(s) did not finish: {'; '.join(parts)}. Their rates cover only "
            f"the tasks that ran (and a comparison only the tasks both ran). To finish, {' / '.join(hows)}; "
            f"finished tasks are not run or paid again.")
