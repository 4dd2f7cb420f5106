"""The judge-robustness panel's per-system tables beside ``rejudge.panel`` (issue #22 item 2): how much the verdicts
move between every two judge settings (flip rate and Cohen's κ, the run's own judge counted as one setting), and how
each setting fares in the label-free self-audit (certain false positives / negatives of its target-recall verdicts
against the provenance and verbatim bounds), with the mean ± SD and the range over its repeated samples.

Pure functions over loaded runs: the source runs and their rejudged runs (``rejudge.load_rejudged``)."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from analysis.load import Run
from analysis.rejudge import PANEL_JUDGES, agreement, settings_of
from analysis.tables import METRIC_TITLES, Table, display_frame

#: The name the run's own judge has in these tables.
ORIGINAL = "run's judge"


@dataclass(frozen=True)
class SettingRuns:
    """One judge setting over one configuration: its name and its samples (the run itself for the run's judge)."""

    name: str
    samples: tuple[Run, ...]


def settings(source: Run, rejudged: Sequence[Run]) -> list[SettingRuns]:
    """The run's own judge first, then each rejudge setting of ``source`` (sorted by name)."""
    model = source.params.get("llm.roles.judge.model") or source.config.judge_model
    prompts = source.params.get("judges.prompts") or "strict"
    out = [SettingRuns(f"{ORIGINAL} ({prompts}/{model})", (source,))]
    return out + [SettingRuns(k, tuple(v)) for k, v in settings_of(source, rejudged).items()]


def _spread(values: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, SD, min, max) of the values that are not NaN; NaNs when none; SD NaN ("–") for one value."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return (math.nan,) * 4
    return (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan, min(vals), max(vals))


def _two(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.2f}"


def _fmt_spread(mean: float, sd: float, lo: float, hi: float, n: int) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.1f}" if n == 1 else f"{mean:.1f} ± {sd:.1f} [{lo:.1f}–{hi:.1f}]"


def between_settings(sources: Sequence[Run], rejudged: Sequence[Run]) -> Table:
    """Per configuration and judge, every two judge settings (sample 0 of each): tasks both judged validly, how
    many verdicts flip, the flip rate and Cohen's κ."""
    data, display = [], []
    for source in sources:
        group = settings(source, rejudged)
        if len(group) < 2:
            continue
        for jname in PANEL_JUDGES:
            for a, b in itertools.combinations(group, 2):
                ag = agreement(a.samples[0], b.samples[0], jname)
                if not ag.n:
                    continue
                data.append({"configuration": source.label, "judge": jname, "setting_a": a.name,
                             "setting_b": b.name, "n": ag.n, "flips": ag.flips, "flip_rate": ag.flip_rate,
                             "flip_ci_low": ag.ci[0], "flip_ci_high": ag.ci[1], "kappa": ag.kappa,
                             "positive_agreement": ag.positive, "negative_agreement": ag.negative})
                display.append({"Configuration": source.label, "Judge": METRIC_TITLES.get(jname, jname),
                                "Setting A": a.name, "Setting B": b.name,
                                "flip rate % (flips/n)": f"{ag.flip_rate:.1f} ({ag.flips}/{ag.n})",
                                "95% CI": f"[{ag.ci[0]:.1f}, {ag.ci[1]:.1f}]",
                                "κ (PA / NA)": f"{_two(ag.kappa)} ({_two(ag.positive)} / {_two(ag.negative)})"})
    return Table(
        "judge_settings_agreement", "Judge robustness: verdict flips and Cohen's κ between every two judge settings",
        pd.DataFrame(data), display_frame(display),
        note=("Per configuration, the same stored answers judged under two settings (the run's own judge is one; "
              "sample 0 of each): flip rate is the share of tasks, among those both judged validly, whose verdict "
              "differs, with its Wilson 95% interval; κ is Cohen's κ of the two settings' verdicts ('–' when both "
              "are constant), PA / NA the positive / negative specific agreement (κ collapses at low prevalence "
              "where they do not). A κ near 1 says "
              "the ranking of systems does not hinge on the judge; a high flip rate says it may."),
    )


def self_audit(sources: Sequence[Run], rejudged: Sequence[Run]) -> Table:
    """Per configuration and judge setting: target recall and application over the samples (mean ± SD and range),
    and the target-recall judge's certain false positives (verdict 1, provenance 0) and false negatives (verdict 0,
    the fact's text verbatim in the context), mean ± SD over samples; the last rows pool every configuration."""
    data, display = [], []
    pooled: dict[str, list[tuple[int, int, int]]] = {}
    for source in sources:
        for s in settings(source, rejudged):
            audits = [m.metrics.audit for m in s.samples]
            fp = _spread([float(len(a.false_positives)) for a in audits])
            fn = _spread([float(len(a.false_negatives)) for a in audits])
            tr = _spread([m.metrics.rates["target_recall"].pct if m.metrics.rates["target_recall"].n else math.nan
                          for m in s.samples])
            app = _spread([m.metrics.rates["application"].pct if m.metrics.rates["application"].n else math.nan
                           for m in s.samples])
            checked = audits[0].checked if audits else 0
            pooled.setdefault(s.name if not s.name.startswith(ORIGINAL) else ORIGINAL, []).extend(
                (len(a.false_positives), len(a.false_negatives), a.checked) for a in audits)
            k = len(s.samples)
            data.append({"configuration": source.label, "setting": s.name, "samples": k, "audited": checked,
                         "target_recall_mean": tr[0], "target_recall_sd": tr[1], "target_recall_min": tr[2],
                         "target_recall_max": tr[3], "application_mean": app[0], "application_sd": app[1],
                         "application_min": app[2], "application_max": app[3], "false_positives_mean": fp[0],
                         "false_positives_sd": fp[1], "false_negatives_mean": fn[0], "false_negatives_sd": fn[1]})
            display.append({"Configuration": source.label, "Judge setting": s.name, "samples": str(k),
                            "audited": str(checked), "Target recall %": _fmt_spread(*tr, k),
                            "Application %": _fmt_spread(*app, k),
                            "certain FP": _fmt_spread(*fp, k).split(" [")[0],
                            "certain FN": _fmt_spread(*fn, k).split(" [")[0]})
    for name, rows in sorted(pooled.items()):
        if not rows:
            continue
        fp, fn, checked = (sum(x[i] for x in rows) for i in range(3))
        data.append({"configuration": "(all configurations)", "setting": name, "samples": len(rows),
                     "audited": checked, "false_positives_total": fp, "false_negatives_total": fn})
        display.append({"Configuration": "(all configurations)", "Judge setting": name, "samples": str(len(rows)),
                        "audited": str(checked), "Target recall %": "", "Application %": "",
                        "certain FP": f"{fp} ({100.0 * fp / checked:.1f}%)" if checked else "–",
                        "certain FN": f"{fn} ({100.0 * fn / checked:.1f}%)" if checked else "–"})
    return Table(
        "judge_settings_self_audit",
        "Judge robustness: each judge setting's rates over repeated samples and its free self-audit",
        pd.DataFrame(data), display_frame(display),
        note=("Rates are mean ± SD [min–max] over a setting's samples (a single value for one sample). The "
              "self-audit needs no labels: a target-recall verdict of 1 where no item derived from the fact turn "
              "reached the answerer (provenance 0) is certainly wrong (FP), and a 0 where the fact's text is "
              "verbatim in the context certainly wrong (FN); counts are mean ± SD over samples, and the pooled "
              "rows sum every sample of every configuration over the verdicts audited. Errors between the two "
              "bounds are not caught here."),
    )


def tables(sources: Sequence[Run], rejudged: Sequence[Run]) -> tuple[Table, ...]:
    """The tables this module adds to the report's judge-robustness section."""
    return between_settings(sources, rejudged), self_audit(sources, rejudged)
