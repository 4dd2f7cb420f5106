"""Re-judge cached answers: a finished run's stored contexts and answers judged again by another judge model, another
judge prompt set, or N repeated samples, without re-running memory or answering (issue #22, item 2).

The only calls are judge calls, through the same model wrapper as a run (cache → limit → retry → meter), so given
the run's own judge (same endpoint, model, generation settings and prompt set) every call is a cache hit and the
verdicts are the original ones. Sample ``s`` of a setting is keyed with ``sample=s`` in the call cache, so sample 0
is the original call and samples 1..N-1 are new ones (never the cached sample returned N times).

Each (source run, judge setting, sample) becomes one rejudged run: the source's records with the new verdicts (same
answers, contexts and judge-free bounds). In an MLflow experiment each (source run, judge setting) is one MLflow run
of kind ``rejudge`` tagged with the source run's id (``inmind.rejudge_of``) and nested under its sweep, holding its
samples (``records.sample<s>.jsonl``, metrics at step ``s``) and their mean ± SD, flip rate, κ, Fleiss' κ and the
majority-vote rate; from a sweep
directory each sample is ``<sweep>/rejudge/<setting>/<config hash>/sample<s>/rejudged.jsonl`` with
``rejudge.json`` beside it. ``panel`` (and ``judge_panel``) turn them into the report's judge-robustness tables:
flip rate (Wilson interval), Cohen's κ and specific agreement against the original verdicts and between settings,
mean ± SD over samples beside the original rate on the same tasks, the majority-vote verdict of an odd number of
samples, Fleiss' κ across samples, and each judge's label-free self-audit.

A rejudged run carries no controls: its judge did not score them (the control metrics would be logged under the new
judge's name), so they are dropped from its records. ``--temperature`` on a reasoning endpoint, which sends none,
is refused rather than put in the setting's name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from inmind_exp import tags as T
from inmind_exp.protocol import judges as judges_mod
from inmind_exp.protocol.judges import JUDGE_SETS, JUDGES, Judge, judge
from inmind_exp.llm import CallCache, Endpoint, LLMClient, LocalLimiter, cache_key
from inmind_exp.protocol.metrics import Rate, compute, wilson_interval
from inmind_exp.records import Task, TaskRecord, Verdict, msgs, write_jsonl

from analysis.compare import verdict_outcome
from analysis.load import Run, RunSet, read_records
from analysis.stats import cohen_kappa, fleiss_kappa, specific_agreement
from analysis.tables import METRIC_TITLES, Table, display_frame

#: MLflow run kind of a rejudged run (``inmind.kind``) and the tag naming its source run.
KIND = "rejudge"
REJUDGE_OF = "inmind.rejudge_of"
#: Params (MLflow) / ``rejudge.json`` keys describing a rejudged run.
P_SOURCE, P_SET, P_MODEL, P_SAMPLE, P_SETTING = ("rejudge.source", "rejudge.judges", "rejudge.judge_model",
                                                 "rejudge.sample", "rejudge.setting")
RECORDS_FILE = "rejudged.jsonl"
#: A sample's records in a setting's MLflow run (``sample_file``).
_SAMPLE_RECORDS = re.compile(r"records\.sample(\d+)\.jsonl")
META_FILE = "rejudge.json"
#: The conf default of ``run.cache_dir`` (conf/config.yaml) when the source does not say.
DEFAULT_CACHE_DIR = os.environ.get("INMIND_CACHE_DIR", ".inmind_cache")
#: Judge verdicts the panel compares, in table order.
PANEL_JUDGES: tuple[str, ...] = ("target_recall", "application", "answer_only", "naive")


class RejudgeError(ValueError):
    """Bad rejudge input (an unknown prompt set, a missing task, an endpoint that cannot be built), raised before
    any judge call."""


def judge_set(name: str) -> dict[str, Judge]:
    """The judges of a registered prompt set (``inmind_exp.protocol.judges.JUDGE_SETS``); only names that exist. ``paper``
    reads the release's prompts (``$INMIND_RELEASE`` or the fetched copy), hash-checked."""
    if name not in JUDGE_SETS:
        raise RejudgeError(f"--judges {name!r}: no such judge prompt set; registered: {', '.join(sorted(JUDGE_SETS))}")
    if name == "strict":
        return JUDGES
    from inmind_exp.data.release import ReleaseError, find_release

    try:
        return judges_mod.judge_set(name, find_release(where=f"--judges {name}"))
    except ReleaseError as e:
        raise RejudgeError(str(e)) from None


@dataclass(frozen=True)
class Setting:
    """One judge setting: a prompt set and an endpoint (model, server, generation settings), sampled N times."""

    judges: str
    endpoint: Endpoint
    samples: int = 1

    @property
    def name(self) -> str:
        t = None if self.endpoint.reasoning else self.endpoint.temperature  # a reasoning endpoint sends none
        return f"{self.judges}/{self.endpoint.model}" + ("" if t in (None, 0, 0.0) else f"/t{t:g}")

    @property
    def slug(self) -> str:
        return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in self.name.replace("/", "__"))


def _param(params: Mapping[str, str], key: str) -> str | None:
    v = params.get(key)
    return None if v in (None, "None", "null", "") else str(v)


def source_judge_endpoint(params: Mapping[str, str]) -> Endpoint:
    """The judge endpoint a run used, rebuilt from its flattened config (``llm.roles.judge.*`` over ``llm.*``, as
    ``inmind_exp.config.settings.role_endpoints``): the same cache identity, so an unchanged judge hits the run's cache."""
    def pick(key: str) -> str | None:
        return _param(params, f"llm.roles.judge.{key}") or _param(params, f"llm.{key}")

    def num(key: str, cast: Callable[[str], Any]) -> Any:
        v = pick(key)
        return None if v is None else cast(v)

    model, base_url = pick("model"), pick("base_url")
    if not model:
        raise RejudgeError("the source run names no judge model (llm.model / llm.roles.judge.model); give "
                           "--judge-model")
    return Endpoint(
        role="judge", base_url=base_url or "", model=model, api_key_env=pick("api_key_env"),
        temperature=num("temperature", float), top_p=num("top_p", float), max_tokens=num("max_tokens", int),
        max_tokens_param=_param(params, "llm.max_tokens_param") or "max_tokens",
        reasoning=(pick("reasoning") or "False").lower() == "true", seed=num("seed", int),
        max_attempts=int(_param(params, "llm.max_attempts") or 6),
    )


def setting_for(run: Run, judges: str, samples: int, *, model: str | None = None, base_url: str | None = None,
                api_key_env: str | None = None, temperature: float | None = None, workers: int = 4) -> Setting:
    """The judge setting for ``run``: its own judge endpoint with the given overrides (None keeps the run's)."""
    judge_set(judges)
    if samples < 1:
        raise RejudgeError(f"--samples {samples}: must be at least 1")
    ep = source_judge_endpoint(run.params)
    changes: dict[str, Any] = {"max_concurrency": max(1, workers)}
    if model:
        changes["model"] = model
    if base_url:
        changes.update(base_url=base_url, cache_id=None)
    if api_key_env:
        changes["api_key_env"] = api_key_env
    if temperature is not None:
        if ep.reasoning:
            raise RejudgeError(f"--temperature {temperature:g}: {run.label}'s judge endpoint is a reasoning endpoint, "
                               "which sends no temperature; sample it with --samples instead")
        changes["temperature"] = temperature
    ep = dataclasses.replace(ep, **changes)
    if not ep.base_url:
        raise RejudgeError(f"{run.label}: its judge ran on the embedded server (no base_url); give --base-url")
    ep.api_key()  # a missing key variable fails here, before any call
    return Setting(judges, ep, samples)


def tasks_for(run: Run, tasks: Mapping[str, Task]) -> dict[str, Task]:
    """The tasks of ``run``'s records that have answers to judge; every one must be in ``tasks`` with its domain."""
    out = {}
    for r in run.records:
        if r.indirect is None:
            continue
        t = tasks.get(r.task_id)
        if t is None:
            raise RejudgeError(f"{run.label} ({run.source}): task {r.task_id!r} is not in the task file; give the "
                               "task file the run read with --tasks")
        if t.domain != r.domain:
            raise RejudgeError(f"{run.label}: task {r.task_id!r} is domain {t.domain!r} in the task file but "
                               f"{r.domain!r} in the record: not the task file the run read")
        out[r.task_id] = t
    return out


def task_path(run: Run) -> str | None:
    """Which tasks the run read: ``official`` (the release's) or its ``dataset.path`` (None: the bundled set)."""
    return "official" if _param(run.params, "dataset.name") == "official" else _param(run.params, "dataset.path")


def _judges_for(record: TaskRecord, judges: Mapping[str, Judge]) -> list[tuple[Judge, Any]]:
    answers = {"naive": record.naive, "indirect": record.indirect}
    return [(j, a) for j in judges.values() if (a := answers[j.reads]) is not None]


def rejudge_record(client: LLMClient, record: TaskRecord, task: Task | None, judges: Mapping[str, Judge],
                   sample: int, attempts: int = 3) -> TaskRecord:
    """``record`` with its verdicts replaced by ``judges``' verdicts on its stored answers (sample ``sample``) and
    without its controls (scored by the run's judge, not this one). A task that failed before judging has nothing to
    judge and is returned as it is otherwise (it stays left out)."""
    if record.indirect is None or task is None or record.error:
        return dataclasses.replace(record, controls={}) if record.controls else record
    verdicts = {j.name: judge(client, j, j.fields(task, answer), attempts, sample=sample)
                for j, answer in _judges_for(record, judges)}
    return dataclasses.replace(record, verdicts=verdicts, usage={}, controls={})


def planned_calls(run: Run, tasks: Mapping[str, Task], setting: Setting, cache: CallCache | None) -> tuple[int, int]:
    """(judge calls, of which already cached) a rejudge of ``run`` would make: the dry run. Counts first attempts
    (a reply that is not valid JSON is asked again, which is one more call)."""
    client = LLMClient(setting.endpoint)
    judges = judge_set(setting.judges)
    total = hit = 0
    for r in run.records:
        t = tasks.get(r.task_id)
        if r.indirect is None or t is None or r.error:
            continue
        for j, answer in _judges_for(r, judges):
            params = client.provider.chat_params(**({"response_format": {"type": "json_object"}} if j.json_mode else {}))
            prompt = j.template.format(**j.fields(t, answer))
            wire = [m.to_openai() for m in msgs(("system", j.system), ("user", prompt))]
            for s in range(setting.samples):
                total += 1
                if cache is not None and cache.get("chat", cache_key(client.provider.chat_key(wire, params, s))):
                    hit += 1
    return total, hit


@dataclass(frozen=True)
class Rejudged:
    """One sample of one judge setting over one source run: the rejudged records and what the calls cost."""

    source: Run
    setting: Setting
    sample: int
    records: tuple[TaskRecord, ...]
    calls: int
    cached_calls: int
    http_requests: int

    @property
    def meta(self) -> dict[str, str]:
        ep = self.setting.endpoint
        return {P_SOURCE: self.source.run_id or self.source.config.config_hash,
                "rejudge.source_label": self.source.label,
                P_SET: self.setting.judges, P_MODEL: ep.model, P_SAMPLE: str(self.sample), P_SETTING: self.setting.name,
                "rejudge.base_url": ep.base_url, "rejudge.temperature": str(ep.temperature)}


def rejudge(run: Run, tasks: Mapping[str, Task], setting: Setting, cache: CallCache | None,
            attempts: int = 3) -> list[Rejudged]:
    """Every sample of ``setting`` over ``run``'s records, calls ``setting.endpoint.max_concurrency`` at a time."""
    judges = judge_set(setting.judges)
    wanted = tasks_for(run, tasks)
    out = []
    for s in range(setting.samples):
        client = LLMClient(setting.endpoint, cache=cache, limiter=LocalLimiter())
        with ThreadPoolExecutor(max_workers=setting.endpoint.max_concurrency) as pool:
            records = list(pool.map(lambda r: rejudge_record(client, r, wanted.get(r.task_id), judges, s, attempts),
                                    run.records))
        usage = client.meter.snapshot().get("judge")
        out.append(Rejudged(run, setting, s, tuple(records), usage.calls if usage else 0,
                            usage.cached_calls if usage else 0, client.http_calls))
    return out


# -- where rejudged runs are written and read back -----------------------------------------------------------------

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


# -- the judge-robustness panel ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Agreement:
    """Rejudged verdicts of one judge against the source's original verdicts over the tasks both judged validly."""

    n: int
    flips: int
    kappa: float
    #: positive / negative specific agreement (beside κ, which collapses at low prevalence)
    positive: float = math.nan
    negative: float = math.nan

    @property
    def flip_rate(self) -> float:
        return 100.0 * self.flips / self.n if self.n else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        """The flip rate's Wilson 95% interval, in percent."""
        return Rate(self.flips, self.n, 0).ci


def agreement(original: Run, rejudged: Run, judge_name: str) -> Agreement:
    """Flip count, Cohen's κ and specific agreement of ``rejudged`` against ``original`` on one judge (valid
    verdicts only: a task whose verdict of this judge failed leaves this comparison, not the others)."""
    xs, ys = [], []
    for tid, a in original.by_task.items():
        b = rejudged.by_task.get(tid)
        if b is None:
            continue
        x, y = verdict_outcome(a, judge_name), verdict_outcome(b, judge_name)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return Agreement(len(xs), sum(1 for x, y in zip(xs, ys) if x != y), cohen_kappa(xs, ys) if xs else math.nan,
                     *specific_agreement(xs, ys))


@dataclass(frozen=True)
class AcrossSamples:
    """One judge's verdicts across a setting's samples: the majority-vote rate (None unless the number of samples
    is odd; a task whose valid verdicts tie has no majority and is counted in ``errors``) and Fleiss' κ over the
    tasks every sample judged validly (NaN with one sample)."""

    majority: Rate | None
    fleiss: float
    fleiss_n: int


def across_samples(samples: Sequence[Run], judge_name: str) -> AcrossSamples:
    votes: dict[str, list[int]] = {}
    for m in samples:
        for tid, r in m.by_task.items():
            if (v := verdict_outcome(r, judge_name)) is not None:
                votes.setdefault(tid, []).append(v)
    k = len(samples)
    majority = None
    if k % 2 == 1 and votes:
        decided = [2 * sum(v) > len(v) for v in votes.values() if 2 * sum(v) != len(v)]
        judged = {tid for m in samples for tid, r in m.by_task.items()
                  if r.indirect is not None and not r.error and judge_name in r.verdicts}
        majority = Rate(sum(decided), len(decided), len(judged) - len(decided))
    full = [[len(v) - sum(v), sum(v)] for v in votes.values() if len(v) == k]
    return AcrossSamples(majority, fleiss_kappa(full) if k > 1 and full else math.nan, len(full) if k > 1 else 0)


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


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and SD of the values that are not NaN; the SD is NaN ("–") for one value."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan


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
