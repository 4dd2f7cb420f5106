"""A small synthetic sweep: per-task records (as ``TaskRecord`` dicts) for a few configurations, written as a sweep
directory or logged to MLflow with the tags, params and artifacts the runner uses."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inmind_exp.records import DOMAINS, Answer, Message, TaskRecord, Usage, Verdict, write_jsonl

from analysis.load import flatten

N_TASKS = 40


@dataclass(frozen=True)
class Spec:
    system: str
    embedding: str
    config_hash: str
    naive: float | None  # None: not evaluated (the backbone)
    recall: float
    application: float
    injection: str = "middle"
    session: int = 20
    judge_model: str | None = None


SPECS: tuple[Spec, ...] = (
    Spec("backbone", "minilm", "b" * 16, None, 1.0, 0.84),
    Spec("mem0", "minilm", "1" * 16, 0.90, 0.05, 0.08),
    Spec("mem0", "emb3", "2" * 16, 0.92, 0.15, 0.18),
    Spec("always_in_state", "minilm", "a" * 16, 0.98, 0.70, 0.69),
)


def make_records(spec: Spec, n: int = N_TASKS, seed: int = 0, errors: dict[str, str] | None = None) -> list[dict]:
    """``n`` task records drawn with the spec's rates (seeded); ``errors`` maps task id -> errored judge name."""
    rng = random.Random(f"{spec.config_hash}-{seed}")
    ctx = (Message("system", "memory"), Message("user", "query"))
    out = []
    for i in range(n):
        tid = f"t{i:03d}"
        verdicts: dict[str, Verdict] = {}
        if spec.naive is not None:
            verdicts["naive"] = Verdict("naive", int(rng.random() < spec.naive))
        tr = int(rng.random() < spec.recall)
        app = int(rng.random() < (spec.application if tr else spec.application / 3))
        verdicts["target_recall"] = Verdict("target_recall", tr)
        verdicts["application"] = Verdict("application", app)
        verdicts["answer_only"] = Verdict("answer_only", max(app, int(rng.random() < 0.1)))
        bad = (errors or {}).get(tid)
        if bad:
            verdicts[bad] = Verdict(bad, None, error="could not parse the judge reply")
        rec = TaskRecord(
            config_hash=spec.config_hash, task_id=tid, domain=DOMAINS[i % len(DOMAINS)], system=spec.system,
            injection_session=spec.session,
            naive=Answer(f"naive answer {tid}", ctx) if spec.naive is not None else None,
            indirect=Answer(f"indirect answer {tid}", ctx), verdicts=verdicts, target_recall_exact=tr,
            usage={"answerer": Usage(calls=2, prompt_tokens=100, completion_tokens=20)}, latency_s=1.0,
        )
        out.append(rec.to_dict())
    return out


def config_dict(spec: Spec) -> dict[str, Any]:
    """The resolved-config shape the runner writes to config.yaml (the keys the analysis reads, and a few more)."""
    return {
        "system": {"name": spec.system, "params": {}},
        "embedding": {"name": spec.embedding, "kind": "local", "model": None, "dim": None},
        "injection": {"name": spec.injection, "user_turn": 40 if spec.injection == "middle" else None,
                      "fraction": None if spec.injection == "middle" else 0.9},
        "llm": {"name": "openai", "provider": "openai", "model": "gpt-5-mini", "api_key_env": "OPENAI_API_KEY",
                "roles": {"answerer": {"model": None}, "judge": {"model": spec.judge_model},
                          "memory": {"model": None}}},
        "dataset": {"path": None, "limit": None},
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "fixture"},
    }


FIXTURE_ERRORS = {"1" * 16: {"t003": "application", "t007": "target_recall"}}


def fixture_records(specs: tuple[Spec, ...] = SPECS) -> dict[Spec, list[dict]]:
    return {s: make_records(s, errors=FIXTURE_ERRORS.get(s.config_hash)) for s in specs}


def write_sweep(root: Path, specs: tuple[Spec, ...] = SPECS) -> Path:
    """A sweep directory as ``launch.py -m`` leaves it: per-job records.jsonl + config.yaml, and the ledger."""
    for spec, records in fixture_records(specs).items():
        job = root / f"system={spec.system},embedding={spec.embedding}"
        write_jsonl(job / "records.jsonl", records)
        (job / "config.yaml").write_text(yaml.safe_dump(config_dict(spec)))
        write_jsonl(root / "ledger" / f"{spec.config_hash}.jsonl", records)
    return root


def log_to_mlflow(uri: str, experiment: str, artifact_root: Path, work: Path, specs: tuple[Spec, ...] = SPECS) -> str:
    """Log the fixture like ``runner.run_config`` in a sweep: one parent (``inmind.kind=sweep``) and one child run
    per configuration with its tags, flattened-config params and records.jsonl/config.yaml artifacts.
    Returns the parent run id."""
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(experiment, artifact_location=artifact_root.as_uri())
    parent = client.create_run(exp_id, run_name="sweep fixture",
                               tags={"inmind.key": "sweep:/tmp/fixture", "inmind.kind": "sweep"}).info.run_id
    for spec, records in fixture_records(specs).items():
        cfg = config_dict(spec)
        name = f"{spec.system}/{spec.embedding}/{spec.injection}/openai"
        rid = client.create_run(exp_id, run_name=name, tags={
            "inmind.key": f"key-{spec.config_hash}", "inmind.kind": "config", "inmind.config_hash": spec.config_hash,
            "inmind.system": spec.system, "mlflow.parentRunId": parent}).info.run_id
        params = {**flatten(cfg), "inmind.config_hash": spec.config_hash}
        client.log_batch(rid, params=[Param(k, v) for k, v in sorted(params.items())])
        job = work / spec.config_hash
        write_jsonl(job / "records.jsonl", records)
        (job / "config.yaml").write_text(yaml.safe_dump(cfg))
        client.log_artifact(rid, str(job / "records.jsonl"))
        client.log_artifact(rid, str(job / "config.yaml"))
        client.set_terminated(rid, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    return parent
