"""Read what sweeps logged, without rerunning anything: each configuration run becomes a labelled ``Run`` holding its
per-task ``TaskRecord``s and its configuration (system, embedding, injection, llm, answerer and judge models).

Two sources: an MLflow experiment (config runs tagged ``inmind.kind = config``, their flattened-config params and
the ``records.jsonl`` artifact; reached through ``inmind_exp.tracking``, the one module that imports mlflow), or a
sweep directory (per-job ``records.jsonl`` + ``config.yaml``, and ``ledger/<config hash>.jsonl`` for configurations
that never wrote a job directory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

from inmind_exp import tags as T
from inmind_exp.official.fidelity import FILE_NAME as FIDELITY_FILE
from inmind_exp.protocol.metrics import RunMetrics, compute
from inmind_exp.records import TaskRecord
from inmind_exp.plan import ledger
from inmind_exp.labels import injection_label, run_label
from inmind_exp.memory.traits import LEGACY, Traits, logged

EMBEDDING_ORDER: dict[str, int] = {"minilm": 0, "emb3": 1, "bm25": 2}
#: Systems whose results do not depend on the embedding, for runs logged before the traits were (``traits.LEGACY``);
#: tests/analysis checks it against the registry's class attributes.
EMBEDDING_FREE: frozenset[str] = frozenset(n for n, t in LEGACY.items() if not t.uses_embedding)
#: The task-record schema that added provenance recall, memory faults and the fact-write flag; older records
#: did not measure them (shown as "–", never as 0).
FAULT_SCHEMA = 2


class LoadError(ValueError):
    """The source holds nothing usable, or a run reference is unknown or ambiguous."""


class NoRecordsError(LoadError):
    """The configuration runs exist but none holds a finished task (a sweep stopped before its first task ended)."""


@dataclass(frozen=True)
class RunConfig:
    """The coordinates of one configuration, read from its flattened config (MLflow params or config.yaml)."""

    system: str
    embedding: str
    injection: str
    llm: str
    answerer_model: str
    judge_model: str
    config_hash: str
    answer: str = "shared"
    #: the system's traits as the run logged them (``inmind_exp.memory.traits``); None: by name (``traits.LEGACY``)
    traits: Traits | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str], config_hash: str = "", system: str = "",
                    records: Iterable[TaskRecord] = ()) -> "RunConfig":
        def get(key: str) -> str | None:
            v = params.get(key)
            return None if v in (None, "None", "null", "") else str(v)

        inj = injection_label(get("injection.name") or "?", get("injection.user_turn"), get("injection.fraction"))
        model = get("llm.model") or "?"
        name = get("system.name") or system or "?"
        return cls(
            system=name,
            embedding=get("embedding.name") or "?",
            injection=inj,
            llm=get("llm.name") or "?",
            answerer_model=get("llm.roles.answerer.model") or model,
            judge_model=get("llm.roles.judge.model") or model,
            config_hash=get(T.CONFIG_HASH) or config_hash,
            answer=get("answer.mode") or "shared",
            traits=logged(name, params, records),
        )

    @property
    def name(self) -> str:
        return run_label(self.system, self.embedding, self.injection, self.llm, self.answer)

    @property
    def system_traits(self) -> Traits:
        """As logged; a run logged before the traits were: the built-in controls' by name, else a memory system's."""
        return self.traits if self.traits is not None else LEGACY.get(self.system, Traits())

    @property
    def control(self) -> str:
        """Which control the system is (``inmind_exp.memory.traits.CONTROLS``); "" for a memory system."""
        return self.system_traits.control

    @property
    def is_retrieval(self) -> bool:
        """From the system's ``retrieval`` class attribute, as the run logged it."""
        return self.system_traits.retrieval

    @property
    def block(self) -> str:
        """The table block (``Traits.block``): ``control``, ``routing`` or ``retrieval``."""
        return self.system_traits.block

    @property
    def uses_embedding(self) -> bool:
        """False for systems whose results cannot depend on the embedding (``MemorySystem.uses_embedding``)."""
        return self.system_traits.uses_embedding

    def sort_key(self) -> tuple[Any, ...]:
        return (self.system_traits.order, self.system, EMBEDDING_ORDER.get(self.embedding, 9), self.embedding,
                self.injection, self.llm, self.judge_model)


@dataclass(frozen=True)
class Run:
    """One configuration's results: a unique label, its config, its per-task records and where they came from."""

    label: str
    config: RunConfig
    records: tuple[TaskRecord, ...]
    run_id: str | None = None
    parent_run_id: str | None = None
    status: str = ""
    source: str = ""
    params: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: the fidelity record the run stored (``fidelity.json``, ``inmind_exp.official.fidelity.Fidelity.to_dict``); None when
    #: it stored none (a run older than the record, or a ledger without its job directory)
    fidelity: Mapping[str, Any] | None = field(default=None, compare=False)

    @cached_property
    def metrics(self) -> RunMetrics:
        return compute(list(self.records))

    @cached_property
    def fault_metrics(self) -> RunMetrics | None:
        """Metrics over the records that measured memory faults (schema >= ``FAULT_SCHEMA``); None when none did."""
        measured = [r for r in self.records if r.schema_version >= FAULT_SCHEMA]
        if not measured:
            return None
        return self.metrics if len(measured) == len(self.records) else compute(measured)

    @cached_property
    def by_task(self) -> dict[str, TaskRecord]:
        return {r.task_id: r for r in self.records}

    @property
    def injection_sessions(self) -> tuple[int, ...]:
        return tuple(sorted({r.injection_session for r in self.records}))


@dataclass(frozen=True)
class RunSet:
    """All runs of one source, ordered as in the paper's tables, plus what was skipped and why."""

    runs: tuple[Run, ...]
    origin: str
    tracking_uri: str | None = None
    experiment: str | None = None
    parent_run_ids: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    #: runs re-judged from these runs' stored answers (``analysis.rejudge``), for the judge-robustness panel
    rejudged: tuple[Run, ...] = ()
    #: configuration runs that did not finish every planned task: (name, tasks done, tasks planned, why), why being
    #: the run's ``inmind.incomplete`` tag (capped, interrupted, errors); those without records included
    incomplete: tuple[tuple[str, int, int, str], ...] = ()

    def get(self, ref: str) -> Run:
        return find_run(self.runs, ref)


def find_run(runs: Iterable[Run], ref: str) -> Run:
    """A run by label, MLflow run id or config hash, or by a prefix of any of them that only one run has (``always_in``
    for ``always_in_state/minilm/middle/openai``); an ambiguous prefix is refused with its candidates listed."""
    runs = list(runs)
    for attr in ("label", "run_id"):
        hits = [r for r in runs if getattr(r, attr) == ref]
        if len(hits) == 1:
            return hits[0]
    hits = [r for r in runs if r.config.config_hash == ref]
    if len(hits) == 1:
        return hits[0]
    hits = [r for r in runs if ref and (r.label.startswith(ref) or (r.run_id or "").startswith(ref)
                                        or r.config.config_hash.startswith(ref))]
    if len(hits) == 1:
        return hits[0]
    labels = ", ".join(r.label for r in runs)
    if not hits:
        raise LoadError(f"no run matches {ref!r}; known runs: {labels}")
    listed = "\n".join(f"  {r.label}  (config {r.config.config_hash[:8]})" for r in hits)
    raise LoadError(f"{ref!r} is ambiguous: it begins {len(hits)} runs; give more of one:\n{listed}")


def make_runs(items: Iterable[dict[str, Any]]) -> tuple[Run, ...]:
    """Build ``Run``s (sorted, with unique labels) from dicts of Run fields minus the label; ``name`` is preferred."""
    drafts = []
    for it in items:
        it = dict(it)
        name = it.pop("name", None) or it["config"].name
        drafts.append((name, it))
    drafts.sort(key=lambda d: (d[1]["config"].sort_key(), d[0], d[1].get("run_id") or ""))
    labels = [name for name, _ in drafts]
    for name in set(labels):
        idx = [i for i, x in enumerate(labels) if x == name]
        if len(idx) < 2:
            continue
        judges = {drafts[i][1]["config"].judge_model for i in idx}
        for i in idx:
            cfg = drafts[i][1]["config"]
            suffix = f" [judge {cfg.judge_model}]" if len(judges) > 1 else ""
            labels[i] = name + suffix
        for lab in set(labels[i] for i in idx):
            same = [i for i in idx if labels[i] == lab]
            if len(same) > 1:
                for i in same:
                    d = drafts[i][1]
                    labels[i] = f"{lab} [{(d.get('run_id') or d['config'].config_hash)[:8]}]"
    return tuple(Run(label=lab, **d) for lab, (_, d) in zip(labels, drafts))


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """A nested config as ``a.b.c -> str``, the way ``inmind_exp.config.settings.flatten_params`` logs MLflow params."""
    out: dict[str, str] = {}
    if isinstance(node, dict):
        for k, v in sorted(node.items()):
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = json.dumps(node) if isinstance(node, list) else str(node)
    return out


def read_records(path: Path) -> list[TaskRecord]:
    """Task records of one JSONL file; for a ledger (appended on retries) the last record of a task wins."""
    return list(ledger.read_records(path).values())


def read_fidelity(path: Path) -> dict[str, Any] | None:
    """A run's stored fidelity record (``fidelity.json``), None when it has none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _hash_of(records: list[TaskRecord], where: Path) -> str:
    hashes = {r.config_hash for r in records}
    if len(hashes) > 1:
        raise LoadError(f"{where}: records of several configurations ({', '.join(sorted(hashes))}) in one file")
    return hashes.pop() if hashes else ""


def load_sweep_dir(path: Path | str) -> RunSet:
    """Every job directory (``records.jsonl`` beside ``config.yaml``) under ``path``, plus ledger-only configs.

    A job's ``records.jsonl`` is written even when the job is interrupted and holds exactly its planned tasks, so it
    wins over the ledger (which may also hold tasks of an earlier run with a larger ``dataset.limit``).
    """
    import yaml

    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise LoadError(f"sweep directory {root} does not exist")
    items: list[dict[str, Any]] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for rec_path in sorted(root.rglob("records.jsonl")):
        records = read_records(rec_path)
        if not records:
            skipped.append(f"{rec_path}: no records")
            continue
        h = _hash_of(records, rec_path)
        cfg_path = rec_path.parent / "config.yaml"
        params = flatten(yaml.safe_load(cfg_path.read_text()) or {}) if cfg_path.is_file() else {}
        seen.add(h)
        items.append(dict(config=RunConfig.from_params(params, h, records[0].system, records), records=tuple(records),
                          source=str(rec_path.parent.relative_to(root)) or ".", params=params,
                          fidelity=read_fidelity(rec_path.parent / FIDELITY_FILE)))
    ledger_dir = root / "ledger"
    for led in sorted(ledger_dir.glob("*.jsonl")) if ledger_dir.is_dir() else []:
        if led.stem in seen:
            continue
        records = read_records(led)
        if not records:
            continue
        cfg = RunConfig.from_params({}, led.stem, records[0].system, records)
        items.append(dict(name=f"{cfg.system}/{led.stem[:8]}", config=cfg, records=tuple(records),
                          source=str(led.relative_to(root)), status="LEDGER_ONLY"))
    if not items:
        raise LoadError(f"no records.jsonl or ledger/*.jsonl under {root}")
    return RunSet(runs=make_runs(items), origin=f"sweep directory {root}", skipped=tuple(skipped))


