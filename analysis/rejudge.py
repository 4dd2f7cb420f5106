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
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping


from inmind_exp.protocol import judges as judges_mod
from inmind_exp.protocol.judges import JUDGE_SETS, JUDGES, Judge, judge
from inmind_exp.llm import CallCache, Endpoint, LLMClient, LocalLimiter, cache_key
from inmind_exp.records import Task, TaskRecord, msgs

from analysis.load import Run

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


# -- the judge-robustness panel ------------------------------------------------------------------------------------


