"""Where rejudged verdicts are kept and read back: one MLflow run per (source run, judge setting), nested under the
source's sweep, each sample's records and metrics at its step and the setting's summary over samples
(``write_mlflow``); ``rejudge/`` in a sweep directory without MLflow (``write_sweep``); and the rejudged runs of a
run set as ``Run``s beside their sources (``load_rejudged``)."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path
from typing import Mapping, Sequence


from inmind_exp import tags as T
from inmind_exp.protocol.metrics import compute
from inmind_exp.records import TaskRecord, write_jsonl

from analysis.agreement import _mean_sd, across_samples, agreement
from analysis.load import Run, RunSet, read_records
from analysis.rejudge import (_SAMPLE_RECORDS, KIND, META_FILE, P_MODEL, P_SAMPLE, P_SETTING, P_SOURCE, PANEL_JUDGES,
                              RECORDS_FILE, REJUDGE_OF, Rejudged)

def _metrics(r: Rejudged) -> dict[str, float]:
    flat = compute([dataclasses.replace(x, usage={}) for x in r.records]).flat()  # the source's calls are not ours
    flat.update({"rejudge_calls": float(r.calls), "rejudge_cached_calls": float(r.cached_calls),
                 "rejudge_http_requests": float(r.http_requests)})
    return flat


def sample_file(name: str, sample: int) -> str:
    """A sample's artifact in a setting's MLflow run: ``records.jsonl`` → ``records.sample2.jsonl``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}.sample{sample}{dot}{ext}"


def _setting_metrics(group: Sequence[Rejudged]) -> dict[str, float]:
    """A setting's summary over its samples: each panel judge's rate as mean and SD (none for one sample), and,
    against the source's own verdicts (sample 0), the flip rate with its Wilson interval and Cohen's κ; the
    majority-vote rate (odd N) with its interval and Fleiss' κ across samples; the number of samples."""
    out: dict[str, float] = {"rejudge_samples": float(len(group))}
    first = group[0]
    runs = [_as_run(r.source, r.meta, list(r.records), "", None) for r in group]
    for jname in PANEL_JUDGES:
        rates = [x.metrics.rates[jname] for x in runs]
        if not any(x.n for x in rates):
            continue
        mean, sd = _mean_sd([x.pct if x.n else math.nan for x in rates])
        ag = agreement(first.source, runs[0], jname)
        ss = across_samples(runs, jname)
        out.update({f"{jname}_mean": mean, f"{jname}_sd": sd, f"{jname}_flip_rate": ag.flip_rate,
                    f"{jname}_flip_rate_ci_low": ag.ci[0], f"{jname}_flip_rate_ci_high": ag.ci[1],
                    f"{jname}_kappa": ag.kappa, f"{jname}_fleiss_kappa": ss.fleiss})
        if ss.majority is not None and ss.majority.n:
            out.update({f"{jname}_majority": ss.majority.pct, f"{jname}_majority_ci_low": ss.majority.ci[0],
                        f"{jname}_majority_ci_high": ss.majority.ci[1], f"{jname}_majority_n": ss.majority.n})
    return {k: v for k, v in out.items() if not math.isnan(v)}


def write_mlflow(results: Sequence[Rejudged], tracking_uri: str, experiment: str, work: Path) -> list[str]:
    """One MLflow run per (source, judge setting), tagged with its source run (``inmind.rejudge_of``) and nested
    under the source's sweep: each sample's records and metadata as ``records.sample<s>.jsonl`` and
    ``rejudge.sample<s>.json``, its metrics at step ``s``, and the setting's mean ± SD, flip rate and κ over the
    samples. A rerun of the same setting reopens the same run (found by its key), more samples adding steps.
    Returns the run ids."""
    from inmind_exp.tracking import writer as tracking
    from inmind_exp.config.identity import identity_hash

    tracker = tracking.Tracker(tracking_uri, experiment)
    groups: dict[tuple[str, str, str], list[Rejudged]] = {}
    for r in results:
        groups.setdefault((r.meta[P_SOURCE], r.setting.name, r.meta["rejudge.base_url"]), []).append(r)
    ids = []
    for (source_ref, setting, base_url), group in groups.items():
        group = sorted(group, key=lambda r: r.sample)
        first = group[0]
        key = identity_hash({"rejudge": source_ref, "setting": setting, "base_url": base_url})
        name = f"{first.source.label} ⟂ judge {setting}"
        tags = {T.KIND: KIND, REJUDGE_OF: source_ref, T.CONFIG_HASH: first.source.config.config_hash,
                T.SYSTEM: first.source.config.system, "inmind.judge_model": first.setting.endpoint.model,
                "inmind.judge_set": first.setting.judges}
        rid, _ = tracker.get_or_create_run(key, name, tags, parent_id=first.source.parent_run_id)
        tracker.log_params(rid, {**{k: v for k, v in first.source.params.items()
                                    if not k.startswith("llm.roles.judge.model")},
                                 "llm.roles.judge.model": first.setting.endpoint.model,
                                 **{k: v for k, v in first.meta.items() if k != P_SAMPLE}})
        d = work / rid
        files = []
        for r in group:
            files += [d / sample_file("records.jsonl", r.sample), d / sample_file(META_FILE, r.sample)]
            write_jsonl(files[-2], (x.to_dict() for x in r.records))
            files[-1].write_text(json.dumps(r.meta, indent=2, sort_keys=True) + "\n")
            tracker.log_metrics(rid, _metrics(r), step=r.sample)
        tracker.log_metrics(rid, _setting_metrics(group))
        tracker.log_artifacts(rid, files)
        tracker.finish(rid)
        ids.append(rid)
    return ids


def write_sweep(results: Sequence[Rejudged], root: Path) -> list[Path]:
    """``<root>/rejudge/<setting>/<config hash>/sample<s>/rejudged.jsonl`` with ``rejudge.json`` beside it."""
    paths = []
    for r in results:
        d = Path(root) / "rejudge" / r.setting.slug / r.source.config.config_hash / f"sample{r.sample}"
        write_jsonl(d / RECORDS_FILE, (x.to_dict() for x in r.records))
        meta = {**r.meta, **{k: str(v) for k, v in _metrics(r).items() if k.startswith("rejudge_")}}
        (d / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        paths.append(d / RECORDS_FILE)
    return paths


def _as_run(source: Run, meta: Mapping[str, str], records: list[TaskRecord], where: str, run_id: str | None) -> Run:
    cfg = dataclasses.replace(source.config, judge_model=meta.get(P_MODEL, source.config.judge_model))
    return Run(label=f"{source.label} ⟂ {meta.get(P_SETTING, '?')} #{meta.get(P_SAMPLE, '0')}", config=cfg,
               records=tuple(records), run_id=run_id, parent_run_id=source.parent_run_id, status=KIND, source=where,
               params={**source.params, **meta})


def _source_of(runs: Sequence[Run], meta: Mapping[str, str]) -> Run | None:
    ref = meta.get(P_SOURCE, "")
    return next((r for r in runs if ref and ref in (r.run_id, r.config.config_hash)), None)


def load_rejudged(runset: RunSet) -> tuple[Run, ...]:
    """The rejudged runs of ``runset``'s sources (MLflow runs of kind ``rejudge``, or the sweep's ``rejudge/``),
    each a ``Run`` whose params carry ``rejudge.*``; those whose source is not in the run set are left out."""
    runs = list(runset.runs)
    out: list[Run] = []
    if runset.tracking_uri and runset.experiment:
        from inmind_exp.tracking import writer as tracking

        client = tracking.MlflowClient(tracking_uri=runset.tracking_uri)
        exp = client.get_experiment_by_name(runset.experiment)
        found = client.search_runs([exp.experiment_id], filter_string=T.kind_filter(KIND), max_results=5000,
                                   order_by=["start_time ASC"]) if exp else []
        with tempfile.TemporaryDirectory(prefix="inmind-rejudge-") as tmp:
            for mr in found:
                params = dict(mr.data.params)
                source = _source_of(runs, params)
                if source is None:
                    continue
                rid = mr.info.run_id
                try:
                    names = [f.path for f in client.list_artifacts(rid)]
                except Exception:  # noqa: BLE001  (a store without the run's artifacts)
                    continue
                samples = sorted(int(m.group(1)) for n in names if (m := _SAMPLE_RECORDS.fullmatch(n)))
                legacy = not samples and "records.jsonl" in names  # an earlier layout: one MLflow run per sample
                if legacy:
                    samples = [int(params.get(P_SAMPLE, "0"))]
                for s in samples:
                    art = "records.jsonl" if legacy else sample_file("records.jsonl", s)
                    try:
                        local = client.download_artifacts(rid, art, str(Path(tmp) / rid))
                    except Exception:  # noqa: BLE001  (a rejudge interrupted before it wrote its records)
                        continue
                    out.append(_as_run(source, {**params, P_SAMPLE: str(s)}, read_records(Path(local)),
                                       f"mlflow run {rid} sample {s}", rid))
    root = _sweep_root(runset)
    if root is not None:
        for path in sorted((root / "rejudge").rglob(RECORDS_FILE)) if (root / "rejudge").is_dir() else []:
            meta = json.loads((path.parent / META_FILE).read_text())
            source = _source_of(runs, meta)
            if source is not None:
                out.append(_as_run(source, meta, read_records(path), str(path.relative_to(root)), None))
    return tuple(sorted(out, key=lambda r: (r.params.get(P_SETTING, ""), r.label)))


def _sweep_root(runset: RunSet) -> Path | None:
    prefix = "sweep directory "
    return Path(runset.origin[len(prefix):]) if runset.origin.startswith(prefix) else None
