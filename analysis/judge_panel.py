"""The judge-robustness panel (``panel``: every source run beside its rejudged runs, majority vote, Fleiss' κ and
flip rates) and its per-system tables (issue #22 item 2): how much the verdicts
move between every two judge settings (flip rate and Cohen's κ, the run's own judge counted as one setting), and how
each setting fares in the label-free self-audit (certain false positives / negatives of its target-recall verdicts
against the provenance and verbatim bounds), with the mean ± SD and the range over its repeated samples.

Pure functions over loaded runs: the source runs and their rejudged runs (``rejudged.load_rejudged``)."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from analysis.load import Run
from inmind_exp.protocol.metrics import Rate

from analysis.agreement import Agreement, _mean_sd, across_samples, agreement
from analysis.compare import verdict_outcome
from analysis.rejudge import P_SAMPLE, P_SETTING, P_SOURCE, PANEL_JUDGES
from analysis.table import METRIC_TITLES, Table, display_frame

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


def same_tasks(source: Run, samples: Sequence[Run], judge_name: str) -> tuple[Rate, list[Rate]]:
    """The original rate and each sample's rate over the same tasks: those with a valid verdict of this judge in
    the original and in every sample (a failed verdict leaves this comparison only)."""
    def outcomes(run: Run) -> dict[str, int]:
        return {tid: v for tid, r in run.by_task.items() if (v := verdict_outcome(r, judge_name)) is not None}

    orig, each = outcomes(source), [outcomes(m) for m in samples]
    common = set(orig).intersection(*each) if each else set(orig)

    def rate(o: dict[str, int]) -> Rate:
        return Rate(sum(o[t] for t in common), len(common), len(o) - len(common))

    return rate(orig), [rate(o) for o in each]


def _fmt(v: float, digits: int = 1) -> str:
    return "–" if math.isnan(v) else f"{v:.{digits}f}"


def settings_of(source: Run, rejudged: Sequence[Run]) -> dict[str, list[Run]]:
    """``source``'s rejudged runs by judge setting name (sorted), each setting's samples in order. One setting name
    at two endpoints (same model name, another server) is two settings, named ``<setting> @ <base url>``."""
    names: dict[str, set[str]] = {}
    for r in rejudged:
        names.setdefault(r.params.get(P_SETTING, "?"), set()).add(r.params.get("rejudge.base_url", ""))
    by_id = [r for r in rejudged if source.run_id and r.params.get(P_SOURCE) == source.run_id]
    mine = by_id or [r for r in rejudged if r.params.get(P_SOURCE) == source.config.config_hash]
    out: dict[str, list[Run]] = {}
    for r in mine:
        name, url = r.params.get(P_SETTING, "?"), r.params.get("rejudge.base_url", "")
        out.setdefault(name if len(names[name]) == 1 else f"{name} @ {url}", []).append(r)
    return {k: sorted(v, key=lambda r: int(r.params.get(P_SAMPLE, "0"))) for k, v in sorted(out.items())}


def _ci_cell(rate: float, ci: tuple[float, float], k: int, n: int) -> str:
    return f"{_fmt(rate)} [{_fmt(ci[0])}, {_fmt(ci[1])}] ({k}/{n})" if n else "–"


def panel(sources: Sequence[Run], rejudged: Sequence[Run]) -> Table:
    """Per source configuration, judge setting and judge: the original rate and the rejudged rate (mean ± SD over
    samples) on the same tasks; the verdict flip rate (Wilson interval), Cohen's κ and specific agreement against
    the original verdicts (sample 0); the majority-vote rate of an odd number of samples (Wilson interval), Fleiss'
    κ and the flip rate between repeated samples; and the target-recall judge's certain errors against the
    judge-free bounds."""
    data, display = [], []
    for source in sources:
        for setting, members in settings_of(source, rejudged).items():
            for jname in PANEL_JUDGES:
                if not source.metrics.rates[jname].n and not any(m.metrics.rates[jname].n for m in members):
                    continue
                orig, rates = same_tasks(source, members, jname)
                mean, sd = _mean_sd([x.pct for x in rates])
                first = agreement(source, members[0], jname)
                repeat = [agreement(members[0], m, jname) for m in members[1:]]
                rep_n, rep_flips = sum(a.n for a in repeat), sum(a.flips for a in repeat)
                rep = Agreement(rep_n, rep_flips, math.nan)
                ss = across_samples(members, jname)
                maj = ss.majority
                audits = [m.metrics.audit for m in members] if jname == "target_recall" else []
                fp, _ = _mean_sd([float(len(a.false_positives)) for a in audits])
                fn, _ = _mean_sd([float(len(a.false_negatives)) for a in audits])
                data.append({"configuration": source.label, "setting": setting, "judge": jname,
                             "samples": len(members), "same_n": orig.n, "original_pct": orig.pct,
                             "original_all_pct": source.metrics.rates[jname].pct,
                             "original_all_n": source.metrics.rates[jname].n,
                             "rejudged_mean_pct": mean, "rejudged_sd_pct": sd, "flip_n": first.n,
                             "flips": first.flips, "flip_rate": first.flip_rate, "flip_ci_low": first.ci[0],
                             "flip_ci_high": first.ci[1], "kappa": first.kappa,
                             "positive_agreement": first.positive, "negative_agreement": first.negative,
                             "majority_pct": maj.pct if maj else math.nan, "majority_n": maj.n if maj else 0,
                             "majority_ci_low": maj.ci[0] if maj else math.nan,
                             "majority_ci_high": maj.ci[1] if maj else math.nan,
                             "majority_undecided": maj.errors if maj else 0,
                             "fleiss_kappa": ss.fleiss, "fleiss_n": ss.fleiss_n,
                             "repeat_pairs": rep_n, "repeat_flips": rep_flips, "repeat_flip_rate": rep.flip_rate,
                             "repeat_ci_low": rep.ci[0], "repeat_ci_high": rep.ci[1],
                             "original_fp": len(source.metrics.audit.false_positives) if audits else math.nan,
                             "original_fn": len(source.metrics.audit.false_negatives) if audits else math.nan,
                             "rejudged_fp_mean": fp, "rejudged_fn_mean": fn})
                rejudged_cell = ("–" if math.isnan(mean) else _fmt(mean) if math.isnan(sd)
                                 else f"{_fmt(mean)} ± {_fmt(sd)}")
                display.append({
                    "Configuration": source.label, "Judge setting": setting, "Judge": METRIC_TITLES.get(jname, jname),
                    "samples": str(len(members)), "same tasks": str(orig.n),
                    "original %": _fmt(orig.pct) if orig.n else "–", "rejudged % (mean ± SD)": rejudged_cell,
                    "flips vs original % [95% CI]": _ci_cell(first.flip_rate, first.ci, first.flips, first.n),
                    "κ vs original (PA / NA)": (f"{_fmt(first.kappa, 2)} ({_fmt(first.positive, 2)} / "
                                                f"{_fmt(first.negative, 2)})" if first.n else "–"),
                    "majority % [95% CI]": (f"{_fmt(maj.pct)} [{_fmt(maj.ci[0])}, {_fmt(maj.ci[1])}] (n={maj.n})"
                                            if maj and maj.n else "–"),
                    "Fleiss κ": _fmt(ss.fleiss, 2),
                    "flips between samples % [95% CI]": _ci_cell(rep.flip_rate, rep.ci, rep_flips, rep_n),
                    "self-audit FP / FN (original → rejudged)": (
                        f"{len(source.metrics.audit.false_positives)} / {len(source.metrics.audit.false_negatives)}"
                        f" → {_fmt(fp)} / {_fmt(fn)}" if audits else ""),
                })
    return Table(
        "judge_robustness", "Judge robustness: the same stored answers re-judged by other judge settings",
        pd.DataFrame(data), display_frame(display),
        note=("No memory or answering call is repeated: each judge setting (prompt set / judge model, sampled N "
              "times with its own cache entry per sample) judges the contexts and answers stored in the run's "
              "records. original % and rejudged % (mean ± SD over samples; no SD for one sample) are over the same "
              "tasks: those with a valid verdict of that judge in the run and in every sample (a failed verdict "
              "leaves that judge's comparison only). flips vs original: tasks whose verdict differs from the run's "
              "own judge (sample 0), Wilson 95% interval, with Cohen's κ and positive / negative specific "
              "agreement (κ collapses at low prevalence; PA / NA do not). majority: each task's majority verdict "
              "over an odd number of samples, Wilson 95% interval (a tie among valid verdicts has none). Fleiss' κ: "
              "agreement across the samples on the tasks all judged validly. flips between samples: sample 1..N-1 "
              "against sample 0 of the same setting (pairs share sample 0, so the interval is approximate). "
              "Self-audit: the target-recall judge's certain false positives (verdict 1, provenance 0) / false "
              "negatives (verdict 0, the fact's text verbatim in the context), original judge → rejudged (mean "
              "over samples); it needs no labels."),
    )
