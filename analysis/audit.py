"""Judge audit (paper Appendix 14.2): agreement of each judge with human labels, and agreement between two judge
models over the same records. (The label-free audit against the judge-free bounds is ``tables.judge_self_audit``.)

Human-label file: JSONL, one gold judgment per line::

    {"run": "mem0/minilm/middle/openai", "task_id": "155", "judge": "application", "label": 0,
     "annotator": "expert-1", "note": "generic disclaimer, fact not in context"}

* ``run`` names the configuration: a run label as in Table 1, an MLflow run id, or a config hash (a unique prefix
  of an id or hash is enough); ``config_hash`` may be given instead of ``run``.
* ``judge`` is one of ``naive``, ``target_recall``, ``application``, ``answer_only`` (or a judge-free metric:
  ``target_recall_exact`` (verbatim), ``target_recall_provenance``, ``naive_recall_provenance``); ``label`` is the
  expert's 0/1 under that judge's rubric. Each judgment is audited on its own verdict, whatever the task's others.
* ``annotator`` and ``note`` are optional; with several annotators each gets its own rows.

A false positive is a judge score of 1 where the expert says 0; a false negative a 0 where the expert says 1.
Judgments whose verdict errored are excluded and counted; labels that match no record are counted as unmatched.

``corrected_rates`` carries the audit into the numbers (issue #41 item 8): each run's rate of a labelled judge
corrected for the judge's sensitivity and specificity (Rogan–Gladen), its interval including the audit's own
sampling error.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from inmind_exp.protocol.judges import JUDGES
from inmind_exp.protocol.metrics import METRICS
from inmind_exp.records import Answer

from analysis.compare import verdict_outcome
from analysis.load import LoadError, Run, find_run
from analysis.agreement import cohen_kappa, rogan_gladen
from analysis.stats import wilson_interval
from analysis.table import METRIC_TITLES, Table

LLM_JUDGES: tuple[str, ...] = tuple(JUDGES)  # the registry's judges (inmind_exp/protocol/judges.py)


class LabelError(ValueError):
    """A human-label file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class HumanLabel:
    run: str
    task_id: str
    judge: str
    label: int
    annotator: str = ""
    note: str = ""


def read_labels(path: Path | str) -> list[HumanLabel]:
    """Parse and validate a human-label JSONL file (format in the module docstring)."""
    path = Path(path)
    out: list[HumanLabel] = []
    seen: set[tuple[str, str, str, str]] = set()
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{i}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise LabelError(f"{where}: not JSON ({e.msg})") from None
            run = d.get("run") or d.get("config_hash")
            if not run or "task_id" not in d or "judge" not in d or "label" not in d:
                raise LabelError(f"{where}: needs 'run' (or 'config_hash'), 'task_id', 'judge' and 'label'")
            if d["judge"] not in METRICS:
                raise LabelError(f"{where}: judge {d['judge']!r} is not one of {', '.join(METRICS)}")
            if d["label"] not in (0, 1) or isinstance(d["label"], bool):
                raise LabelError(f"{where}: label must be 0 or 1, got {d['label']!r}")
            lab = HumanLabel(str(run), str(d["task_id"]), d["judge"], int(d["label"]), str(d.get("annotator", "")),
                             str(d.get("note", "")))
            key = (lab.run, lab.task_id, lab.judge, lab.annotator)
            if key in seen:
                raise LabelError(f"{where}: duplicate label for run={lab.run} task={lab.task_id} judge={lab.judge}"
                                 + (f" annotator={lab.annotator}" if lab.annotator else ""))
            seen.add(key)
            out.append(lab)
    if not out:
        raise LabelError(f"{path}: no labels")
    return out


@dataclass(frozen=True)
class Matched:
    """Labels of one judge matched to its verdicts: the human and the judge's 0/1 side by side, and the labels
    left out (no loaded record; the verdict errored)."""

    human: tuple[int, ...]
    model: tuple[int, ...]
    unmatched: int
    errored: int

    def counts(self) -> tuple[int, int, int, int]:
        """(true positives, false negatives, true negatives, false positives) against the human labels."""
        pairs = list(zip(self.human, self.model))
        return (sum(1 for h, m in pairs if h == m == 1), sum(1 for h, m in pairs if h == 1 and m == 0),
                sum(1 for h, m in pairs if h == m == 0), sum(1 for h, m in pairs if h == 0 and m == 1))


def _resolver(runs: Sequence[Run]) -> Callable[[str], Run | None]:
    cache: dict[str, Run | None] = {}

    def resolve(ref: str) -> Run | None:
        if ref not in cache:
            try:
                cache[ref] = find_run(runs, ref)
            except LoadError:
                cache[ref] = None
        return cache[ref]

    return resolve


def match(group: Sequence[HumanLabel], judge: str, resolve: Callable[[str], Run | None]) -> Matched:
    human, model = [], []
    unmatched = errored = 0
    for lab in group:
        run = resolve(lab.run)
        rec = run.by_task.get(lab.task_id) if run else None
        if rec is None:
            unmatched += 1
            continue
        v = verdict_outcome(rec, judge)
        if v is None:
            errored += 1
            continue
        human.append(lab.label)
        model.append(v)
    return Matched(tuple(human), tuple(model), unmatched, errored)


def audit_human(labels: Sequence[HumanLabel], runs: Sequence[Run]) -> Table:
    """Per judge (and annotator): n, accuracy with a Wilson interval, false positives/negatives and Cohen's κ."""
    resolve = _resolver(runs)
    annotators = sorted({lab.annotator for lab in labels})
    rows, display = [], []
    for judge in METRICS:
        for annotator in annotators:
            group = [lab for lab in labels if lab.judge == judge and lab.annotator == annotator]
            if not group:
                continue
            got = match(group, judge, resolve)
            human, model, unmatched, errored = list(got.human), list(got.model), got.unmatched, got.errored
            n = len(human)
            agree = sum(1 for h, m in zip(human, model) if h == m)
            fp = sum(1 for h, m in zip(human, model) if m == 1 and h == 0)
            fn = sum(1 for h, m in zip(human, model) if m == 0 and h == 1)
            lo, hi = wilson_interval(agree, n)
            kappa = cohen_kappa(human, model)
            row = {"judge": judge, "annotator": annotator, "n": n, "agree": agree,
                   "accuracy": 100.0 * agree / n if n else float("nan"), "ci_low": 100 * lo, "ci_high": 100 * hi,
                   "false_positives": fp, "false_negatives": fn, "kappa": kappa,
                   "human_positive": sum(human), "judge_positive": sum(model), "judge_errors": errored,
                   "unmatched": unmatched}
            rows.append(row)
            disp = {"Judge": METRIC_TITLES[judge]}
            if len(annotators) > 1:
                disp["Annotator"] = annotator or "–"
            disp.update({"n": str(n), "Accuracy": f"{row['accuracy']:.1f} [{row['ci_low']:.1f}, {row['ci_high']:.1f}]"
                         if n else "–", "FP": str(fp), "FN": str(fn), "κ": _fmt_kappa(kappa),
                         "errored": str(errored), "unmatched": str(unmatched)})
            display.append(disp)
    return Table("audit_human", "Judge audit against human labels (Appendix 14.2)", pd.DataFrame(rows),
                 pd.DataFrame(display),
                 note=("FP: judge 1, expert 0. FN: judge 0, expert 1. Accuracy with a Wilson 95% interval. Judgments "
                       "whose verdict errored are excluded ('errored'); labels naming no loaded record are "
                       "'unmatched'."))


def corrected_rates(labels: Sequence[HumanLabel], runs: Sequence[Run]) -> Table:
    """Per run and labelled judge: the judge's rate as observed and corrected for its misclassification
    (``agreement.rogan_gladen``), the judge's sensitivity and specificity from every label of that judge (all runs and
    annotators pooled), and a 95% interval carrying both the run's and the audit's sampling error."""
    resolve = _resolver(runs)
    rows, display = [], []
    for judge in METRICS:
        group = [lab for lab in labels if lab.judge == judge]
        if not group:
            continue
        tp, fn, tn, fp = match(group, judge, resolve).counts()
        se = tp / (tp + fn) if tp + fn else float("nan")
        sp = tn / (tn + fp) if tn + fp else float("nan")
        for run in runs:
            r = run.metrics.rates[judge]
            if not r.n:
                continue
            est, lo, hi = rogan_gladen(r.successes, r.n, tp, fn, tn, fp)
            olo, ohi = r.ci
            rows.append({"configuration": run.label, "judge": judge, "n": r.n, "observed": r.pct,
                         "observed_ci_low": olo, "observed_ci_high": ohi, "sensitivity": 100 * se,
                         "specificity": 100 * sp, "audit_positive": tp + fn, "audit_negative": tn + fp,
                         "corrected": 100 * est, "ci_low": 100 * lo, "ci_high": 100 * hi})
            display.append({"Configuration": run.label, "Judge": METRIC_TITLES[judge], "n": str(r.n),
                            "observed %": f"{r.pct:.1f} [{olo:.1f}, {ohi:.1f}]",
                            "Se / Sp % (audit n1 / n0)": f"{100 * se:.0f} / {100 * sp:.0f} ({tp + fn} / {tn + fp})"
                            if tp + fn and tn + fp else "–",
                            "corrected % [95% CI]": "–" if est != est else
                            f"{100 * est:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"})
    return Table("audit_corrected", "Rates corrected for judge error (Rogan–Gladen, from the human-label audit)",
                 pd.DataFrame(rows), pd.DataFrame(display),
                 note=("corrected = (observed + Sp − 1) / (Se + Sp − 1), Se and Sp the judge's sensitivity and "
                       "specificity against the human labels (every labelled task of that judge, runs and annotators "
                       "pooled: one judge's error assumed the same across configurations). The 95% interval is the "
                       "delta method over the run's binomial error and the audit's (Se over the n1 labelled 1s, Sp "
                       "over the n0 labelled 0s), so a small audit widens it; estimate and bounds are clipped to "
                       "[0, 100]. '–' when the audit has no labelled 1 or 0, or Se + Sp ≤ 1."))


def _fmt_kappa(k: float) -> str:
    return "–" if k != k else f"{k:.2f}"


def _same_inputs(a: Answer | None, b: Answer | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.text == b.text and a.context == b.context


def judge_pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs that differ only in the judge model (same system, embedding, injection, LLM and answerer)."""
    groups: dict[tuple[str, ...], list[Run]] = {}
    for r in runs:
        c = r.config
        groups.setdefault((c.system, c.embedding, c.injection, c.llm, c.answerer_model), []).append(r)
    return [(a, b) for g in groups.values() for a, b in itertools.combinations(g, 2)
            if a.config.judge_model != b.config.judge_model]


def judge_agreement(pairs: Sequence[tuple[Run, Run]]) -> Table:
    """Agreement of two judge models over the same records: per judge, the 2×2 counts, agreement and κ.

    A task counts only when both runs judged identical inputs (same answer text and context for that query) and
    both verdicts are valid; otherwise it is excluded and counted.
    """
    rows, display = [], []
    for ra, rb in pairs:
        shared = sorted(set(ra.by_task) & set(rb.by_task))
        for judge in LLM_JUDGES:
            xs, ys = [], []
            differ = errored = 0
            for tid in shared:
                a, b = ra.by_task[tid], rb.by_task[tid]
                same = _same_inputs(a.naive, b.naive) if judge == "naive" else _same_inputs(a.indirect, b.indirect)
                if not same:
                    differ += 1
                    continue
                x, y = verdict_outcome(a, judge), verdict_outcome(b, judge)
                if x is None or y is None:
                    errored += 1
                    continue
                xs.append(x)
                ys.append(y)
            if not xs and not errored:
                continue
            n = len(xs)
            both = sum(1 for x, y in zip(xs, ys) if x and y)
            a_only = sum(1 for x, y in zip(xs, ys) if x and not y)
            b_only = sum(1 for x, y in zip(xs, ys) if y and not x)
            kappa = cohen_kappa(xs, ys)
            agree = n - a_only - b_only
            rows.append({"a": ra.label, "b": rb.label, "judge_a": ra.config.judge_model,
                         "judge_b": rb.config.judge_model, "judge": judge, "n": n, "agree": agree,
                         "agreement": 100.0 * agree / n if n else float("nan"), "both_1": both, "a_only": a_only,
                         "b_only": b_only, "both_0": n - both - a_only - b_only, "kappa": kappa,
                         "excluded_inputs_differ": differ, "excluded_errors": errored})
            display.append({"Judge A": ra.config.judge_model, "Judge B": rb.config.judge_model,
                            "Configuration": ra.label, "Judge": METRIC_TITLES[judge], "n": str(n),
                            "Agreement": f"{100.0 * agree / n:.1f}" if n else "–",
                            "1/1": str(both), "A only": str(a_only), "B only": str(b_only),
                            "0/0": str(n - both - a_only - b_only), "κ": _fmt_kappa(kappa),
                            "excluded": f"{differ} inputs differ, {errored} errored"})
    return Table("judge_agreement", "Agreement between two judge models over the same records", pd.DataFrame(rows),
                 pd.DataFrame(display),
                 note=("Only tasks whose judged inputs (answer text and context) are identical in both runs are "
                       "compared; errored verdicts are excluded."))

