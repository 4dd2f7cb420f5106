"""The result identity of a configuration: everything that changes a task's result (system, embedding, injection,
endpoints, answer and judge prompts, data, code, settings) and nothing else, and its short hash, the config hash that
keys ledgers, prefix snapshots and MLflow runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from inmind_exp.config.schema import Config
from inmind_exp.llm.endpoint import Endpoint


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def result_identity(config: Config, endpoints: dict[str, Endpoint], dataset_digest: str, trace_digest: str,
                    uses_embedding: bool = True, judges: Any = None, answer_prompt: Any = None,
                    system_cls: type | None = None) -> dict[str, Any]:
    """Everything that changes a task's result, and nothing else (not the limit, tracking, cluster or paths; not the
    embedding of a system that uses none, ``MemorySystem.uses_embedding``, so its runs share one hash).
    ``judges`` is the run's judge set (``JUDGES`` if None); ``answer_prompt`` the release's answer prompt of
    ``answer=paper`` (its version and SHA-256 stand for the mode). ``code`` is what the code contributes: every
    prompt the configuration uses and its system's version (``inmind_exp.config.code``); ``settings`` the run settings
    that change a result."""
    from inmind_exp.config.code import code_identity
    from inmind_exp.protocol.judges import JUDGES
    from inmind_exp.memory import SYSTEMS
    from inmind_exp.safety.redact import without_userinfo

    judges = JUDGES if judges is None else judges

    def ep(e: Endpoint) -> dict[str, Any]:
        return {"endpoint": e.cache_id or without_userinfo(e.base_url), "model": e.model, "temperature": e.temperature,
                "top_p": e.top_p, "max_tokens": e.max_tokens, "max_tokens_param": e.max_tokens_param, "seed": e.seed,
                **({"reasoning": True} if e.reasoning else {})}

    emb = config.embedding
    return {
        "system": dataclasses.asdict(config.system),
        "embedding": {k: getattr(emb, k) for k in ("name", "kind", "model", "dim")} if uses_embedding else "unused",
        "injection": {"user_turn": config.injection.user_turn, "fraction": config.injection.fraction},
        "roles": {r: ep(e) for r, e in sorted(endpoints.items())},
        "answer": answer_prompt.identity() if answer_prompt is not None else config.answer.mode,
        "judges": {k: v.version for k, v in sorted(judges.items())},
        "dataset": dataset_digest,
        "trace": {"digest": trace_digest, "index": config.trace.index},
        "code": code_identity(system_cls or SYSTEMS.get(config.system.name)),
        # run settings that change a task's result: the judges' JSON re-asks (a verdict that parses on the third
        # try is an error with one)
        # and whether each task samples its own memory replies (``run.cache_scope=task``; the default adds nothing)
        "settings": {"judge_attempts": config.run.judge_attempts,
                     **({"cache_scope": config.run.cache_scope} if config.run.cache_scope != "shared" else {})},
    }


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
