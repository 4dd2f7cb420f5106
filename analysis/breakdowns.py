"""Rates broken down by domain, injection point and embedding."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd

from inmind_exp.records import DOMAINS, OFFICIAL_DOMAINS

from analysis.compare import EXCLUSION_NOTE, HEALTH, compare, outcome
from analysis.load import EMBEDDING_ORDER, Run
from analysis.table import (CLUSTER_NOTE, METRIC_TITLES, Table, _comparison_row, flag_note,
                            fmt_count, fmt_delta, fmt_diff_ci, fmt_domain_cells, fmt_p)


def _counts(records: Iterable, metric: str) -> tuple[int, int, int]:
    vals = [outcome(r, metric) for r in records]
    valid = [v for v in vals if v is not None]
    return sum(valid), len(valid), len(vals) - len(valid)


def _long_row(k: int, n: int, errors: int) -> dict[str, float]:
    from analysis.stats import wilson_interval

    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "errors": errors, "pct": 100.0 * k / n if n else math.nan,
            "ci_low": 100.0 * lo, "ci_high": 100.0 * hi}


def by_domain(runs: Sequence[Run], metric: str = "application") -> Table:
    """Per-run, per-domain rate with counts (k/n); the first row counts the tasks in each domain."""
    present = {r.domain for run in runs for r in run.records}
    rank = {d: i for names in (DOMAINS, OFFICIAL_DOMAINS) for i, d in enumerate(names)}  # the release's names too
    domains = sorted(present, key=lambda d: (rank.get(d, len(DOMAINS)), d))
    data = []
    tasks = {d: len({r.task_id for run in runs for r in run.records if r.domain == d}) for d in domains}
    display = [{"Configuration": "tasks", **{d: str(tasks[d]) for d in domains}, "pooled": str(sum(tasks.values())),
                "domain-macro": f"{len(domains)} domains",
                "non-health": str(sum(n for d, n in tasks.items() if d not in HEALTH))}]
    for run in runs:
        disp = {"Configuration": run.label}
        rates = []
        for d in domains:
            k, n, e = _counts([r for r in run.records if r.domain == d], metric)
            row = _long_row(k, n, e)
            data.append({"configuration": run.label, "domain": d, "metric": metric, **row})
            disp[d] = fmt_count(k, n) + (f" [{row['ci_low']:.1f}, {row['ci_high']:.1f}]" if n else "")
            if n:
                rates.append(row["pct"])
        pooled = _counts(run.records, metric)
        other = _counts([r for r in run.records if r.domain not in HEALTH], metric)
        macro = sum(rates) / len(rates) if rates else math.nan
        for name, (k, n, e) in (("pooled", pooled), ("non-health", other)):
            data.append({"configuration": run.label, "domain": name, "metric": metric, **_long_row(k, n, e)})
        data.append({"configuration": run.label, "domain": "domain-macro", "metric": metric, "k": math.nan,
                     "n": len(rates), "errors": math.nan, "pct": macro, "ci_low": math.nan, "ci_high": math.nan})
        disp["pooled"] = fmt_count(pooled[0], pooled[1])
        disp["domain-macro"] = "–" if math.isnan(macro) else f"{macro:.1f}"
        disp["non-health"] = fmt_count(other[0], other[1])
        display.append(disp)
    return Table(f"by_domain_{metric}",
                 f"{METRIC_TITLES[metric]} by domain: % (successes/valid verdicts) [Wilson 95% interval]",
                 pd.DataFrame(data), pd.DataFrame(display),
                 note=("pooled: every task; domain-macro: the mean of the domain rates (each domain weighs the "
                       "same, whatever its size); non-health: the tasks outside the health domain, beside the "
                       "health column (46 of the release's 125 tasks are health tasks). "
                       "Tasks left out (failed, or this metric's verdict failed) are not in n; they are counted in "
                       "the CSV's `errors` column. Domains are the `domain` strings the records carry. A domain's "
                       "interval is wide at the few tasks it holds: read it as where the rate plausibly lies, not "
                       "as a ranking of domains."))


def by_injection(runs: Sequence[Run], metric: str = "application") -> Table:
    """Rate by injection position for each system/embedding/LLM, with counts and the injected session."""
    data, positions = [], {}
    groups: dict[str, dict[str, str]] = {}
    several_judges = len({r.config.judge_model for r in runs}) > 1
    for run in runs:
        c = run.config
        sessions = run.injection_sessions
        pos = c.injection + (f" (session {sessions[0] + 1})" if len(sessions) == 1 else "")
        positions[pos] = min(sessions) if sessions else -1
        k, n, e = _counts(run.records, metric)
        group = f"{c.system}/{c.embedding}/{c.llm}" + (f" [judge {c.judge_model}]" if several_judges else "")
        data.append({"configuration": run.label, "group": group, "injection": c.injection,
                     "session": sessions[0] + 1 if len(sessions) == 1 else math.nan, "metric": metric,
                     **_long_row(k, n, e)})
        cell = fmt_count(k, n)
        prev = groups.setdefault(group, {}).get(pos)
        groups[group][pos] = cell if prev is None else f"{prev}; {cell}"
    cols = sorted(positions, key=lambda p: (positions[p], p))
    display = pd.DataFrame([{"System/embedding/LLM": g, **{p: cells.get(p, "") for p in cols}}
                            for g, cells in groups.items()])
    return Table(f"by_injection_{metric}", f"{METRIC_TITLES[metric]} by injection position: % (successes/valid)",
                 pd.DataFrame(data), display,
                 note="Columns are ordered by the session the fact was injected into (1-based).")


def embedding_groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs that differ only in the embedding, keyed by system/injection/LLM(/judge); groups of two or more, for
    systems that use an embedding only (``RunConfig.uses_embedding``)."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        c = r.config
        if not c.uses_embedding:
            continue
        groups.setdefault(f"{c.system}/{c.injection}/{c.llm}/{c.judge_model}", []).append(r)
    return {k: sorted(v, key=lambda r: (EMBEDDING_ORDER.get(r.config.embedding, 9), r.config.embedding))
            for k, v in groups.items() if len({r.config.embedding for r in v}) > 1}


def embedding_free_repeats(runs: Sequence[Run]) -> list[str]:
    """Systems that use no embedding but were run under several embeddings (the same configuration repeated)."""
    seen: dict[str, set[str]] = {}
    for r in runs:
        if not r.config.uses_embedding:
            seen.setdefault(r.config.system, set()).add(r.config.embedding)
    return sorted(s for s, embs in seen.items() if len(embs) > 1)


def by_embedding(runs: Sequence[Run]) -> Table | None:
    """Section 4.5: per system, target recall and application under each embedding and the paired change from the
    first embedding (MiniLM) to each other one, with its Bonett–Price interval and exact McNemar p."""
    groups = embedding_groups(runs)
    if not groups:
        return None
    repeats = embedding_free_repeats(runs)
    data, display = [], []
    for key, members in groups.items():
        base = members[0]
        for other in members[1:]:
            row = {"System": key.split("/")[0], "Change": f"{base.config.embedding} → {other.config.embedding}",
                   "Setting": "/".join(key.split("/")[1:])}
            for metric in ("target_recall", "application"):
                c = compare(other, base, metric)
                data.append(_comparison_row(c, group=key, change=row["Change"]))
                title = METRIC_TITLES[metric]
                row[title] = f"{c.rate_b:.1f} → {c.rate_a:.1f}" if c.n else "–"
                row[f"Δ {title} [95% CI]"] = fmt_diff_ci(c)
                row[f"Δ {title} within-domain"] = fmt_domain_cells(c)["within-domain 95% CI"]
                row[f"Δ {title} without health"] = fmt_delta(c.health_out)
                row[f"p ({title})"] = fmt_p(c.p_exact)
            display.append(row)
    shown = pd.DataFrame(display)
    return Table("by_embedding", "Embedding comparison per system (Section 4.5): paired change in points",
                 pd.DataFrame(data), shown,
                 note=("Rates over the tasks valid in both runs; exact McNemar p, not adjusted. Only systems that use "
                       "an embedding are compared" + (f" ({', '.join(repeats)} use none: their runs under different "
                                                      "embeddings repeat one configuration)" if repeats else "")
                       + f". {CLUSTER_NOTE} {EXCLUSION_NOTE}{flag_note(shown)}"))
