"""A small synthetic sweep: per-task records (as ``TaskRecord`` dicts) for a few configurations, written as a sweep
directory or logged to MLflow with the tags, params and artifacts the runner uses."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inmind_exp.records import DOMAINS, Answer, Fault, Message, TaskRecord, Usage, Verdict, write_jsonl

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
    #: record schema: 1 writes records as before provenance and faults existed (those keys absent)
    schema: int = 2
    #: plant this many certain judge false positives (verdict 1, provenance 0) / false negatives (0, verbatim 1)
    plant_fp: int = 0
    plant_fn: int = 0
    #: every k-th task gets a memory fault / a fault while writing the injected exchange (0: none)
    fault_every: int = 0
    fact_fault_every: int = 0


SPECS: tuple[Spec, ...] = (
    Spec("backbone", "minilm", "b" * 16, None, 1.0, 0.84),
    Spec("mem0", "minilm", "1" * 16, 0.90, 0.05, 0.08, plant_fn=2, fault_every=5, fact_fault_every=10),
    Spec("mem0", "emb3", "2" * 16, 0.92, 0.15, 0.18, plant_fp=2),
    Spec("always_in_state", "minilm", "a" * 16, 0.98, 0.70, 0.69),
)
#: A configuration logged before provenance and faults existed (schema 1): those columns must read "–".
OLD_SPEC = Spec("a_mem", "minilm", "0" * 16, 0.80, 0.30, 0.25, schema=1)


def make_records(spec: Spec, n: int = N_TASKS, seed: int = 0, errors: dict[str, str] | None = None) -> list[dict]:
    """``n`` task records drawn with the spec's rates (seeded); ``errors`` maps task id -> errored judge name.

    The judge-free fields come from a second generator (so the verdicts do not depend on them): verbatim recall
    equals the judge's target recall, provenance is an upper bound of it (1 when the judge says 1, sometimes 1
    otherwise), and the spec's planted tasks break the bounds so the judge audit has something certain to find.
    """
    rng = random.Random(f"{spec.config_hash}-{seed}")
    aux = random.Random(f"{spec.config_hash}-{seed}-judge-free")
    ctx = (Message("system", "memory"), Message("user", "query"))
    out = []
    fp_left, fn_left = spec.plant_fp, spec.plant_fn
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
        verbatim, prov = tr, int(tr or aux.random() < 0.2)
        naive_prov = int(aux.random() < 0.9) if spec.naive is not None else None
        if not bad and tr and fp_left:
            prov, verbatim, fp_left = 0, 0, fp_left - 1  # judge said 1, nothing from the fact reached the answerer
        elif not bad and not tr and fn_left:
            verbatim, prov, fn_left = 1, 1, fn_left - 1  # judge said 0, the fact's text was in the context
        faults = ((Fault("malformed_reply", f"{spec.system}.extract", "truncated JSON", phase="ingest"),)
                  if spec.fault_every and i % spec.fault_every == 0 else ())
        fact_fault = bool(spec.fact_fault_every and i % spec.fact_fault_every == 0)
        rec = TaskRecord(
            config_hash=spec.config_hash, task_id=tid, domain=DOMAINS[i % len(DOMAINS)], system=spec.system,
            injection_session=spec.session,
            naive=Answer(f"naive answer {tid}", ctx) if spec.naive is not None else None,
            indirect=Answer(f"indirect answer {tid}", ctx), verdicts=verdicts, target_recall_exact=verbatim,
            usage={"answerer": Usage(calls=2, prompt_tokens=100, completion_tokens=20)}, latency_s=1.0,
            naive_recall_provenance=naive_prov, target_recall_provenance=prov, faults=faults,
            fact_write_fault=fact_fault,
            # origin provenance above, the union and the split by context part (a retrieval system: nothing visible)
            naive_recall_provenance_union=naive_prov, target_recall_provenance_union=prov,
            visible_state_recall_provenance=0, retrieved_recall_provenance=prov,
        )
        d = rec.to_dict()
        if spec.schema < 2:
            for key in ("naive_recall_provenance", "target_recall_provenance", "faults", "fact_write_fault",
                        "naive_recall_provenance_union", "target_recall_provenance_union",
                        "visible_state_recall_provenance", "retrieved_recall_provenance"):
                d.pop(key)
            d["schema_version"] = spec.schema
        out.append(d)
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
