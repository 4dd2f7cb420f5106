"""What a configuration run shows besides its metrics: the params that change a result, the tags that place it
(coordinates, models, fidelity), and the provenance of the code that ran."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Mapping

from inmind_exp import tags as T
from inmind_exp.labels import injection_label

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Flattened-config keys logged as params: what changes a result (see ``inmind_exp.config.identity.result_identity``) plus
#: the coordinates ``analysis.load.RunConfig`` reads. Everything else (server threads, timeouts, cluster, tracking,
#: prices, paths of caches) stays in the ``config.yaml`` artifact.
RESULT_PARAM_PREFIXES = ("system.", "answer.mode", "run.judge_attempts", "judges.", "controls.",
                         "inmind.traits.")  # traits.PARAM_PREFIX
RESULT_PARAM_KEYS = (
    "embedding.name", "embedding.kind", "embedding.model", "embedding.dim",
    "injection.name", "injection.user_turn", "injection.fraction",
    "llm.name", "llm.provider", "llm.base_url", "llm.model", "llm.temperature", "llm.top_p", "llm.max_tokens", "llm.seed",
    "llm.reasoning", "dataset.path", "dataset.limit", "dataset.sample", "dataset.sample_seed", "trace.path", "trace.index",
    "dataset.name", "trace.name",
)
RESULT_ROLE_FIELDS = ("model", "base_url", "temperature", "top_p", "max_tokens", "seed")

def provenance_tags() -> dict[str, str]:
    """Git commit and dirty flag of the code that ran, and the package version."""
    from importlib.metadata import PackageNotFoundError, version

    tags: dict[str, str] = {}
    try:
        tags[T.VERSION] = version("inmind-exp")
    except PackageNotFoundError:
        tags[T.VERSION] = "unknown"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            tags[T.GIT_COMMIT] = commit.stdout.strip()
            tags[T.GIT_DIRTY] = str(bool(dirty.stdout.strip())).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def result_params(flat_cfg: Mapping[str, str], config_hash: str) -> dict[str, str]:
    """The params worth comparing across runs: result-changing keys only, nulls dropped."""
    def wanted(k: str) -> bool:
        if k in RESULT_PARAM_KEYS or k.startswith(RESULT_PARAM_PREFIXES):
            return True
        parts = k.split(".")
        return len(parts) == 4 and parts[:2] == ["llm", "roles"] and parts[3] in RESULT_ROLE_FIELDS

    out = {k: v for k, v in flat_cfg.items() if wanted(k) and v not in ("None", "null", "")}
    out["inmind.config_hash"] = config_hash
    return out


def config_tags(plan: Any, flat_cfg: Mapping[str, str]) -> dict[str, str]:
    """Tags for filtering and grouping in the runs table: the configuration's coordinates and models.

    ``plan`` is the run's plan (duck-typed: name, config_hash, system_name, answer_mode, endpoints, session_index,
    trace); ``flat_cfg`` its flattened config.
    """
    def get(k: str) -> str | None:
        v = flat_cfg.get(k)
        return None if v in (None, "None", "null", "") else str(v)

    turn, fraction = get("injection.user_turn"), get("injection.fraction")
    point = f"turn{turn}" if turn is not None else f"{float(fraction or 0):.0%} of user turns"
    tags = {
        T.KIND: T.CONFIG,
        T.CONFIG_HASH: plan.config_hash,
        "inmind.label": plan.name,
        T.SYSTEM: plan.system_name,
        "inmind.embedding": get("embedding.name") or "?",
        "inmind.injection": injection_label(get("injection.name") or "?", turn, fraction),
        "inmind.injection_point": f"{point} (session {plan.session_index + 1}/{len(plan.trace.sessions)})",
        "inmind.llm": get("llm.name") or "?",
        "inmind.answer_mode": str(plan.answer_mode),
    }
    for role, ep in sorted(plan.endpoints.items()):
        tags[f"inmind.{role}_model"] = str(ep.model)
    from inmind_exp.official.fidelity import fidelity
    from inmind_exp.official.setting import setting_of_params

    # a Plan (its endpoints and data hashes), else what the flattened config says
    fid = fidelity(plan) if hasattr(plan, "params") else fidelity(
        setting_of_params(flat_cfg, n_tasks=len(getattr(plan, "tasks", ())) or None))
    tags[T.FIDELITY], tags[T.TASK_SET] = fid.tag, fid.task_set
    return tags
