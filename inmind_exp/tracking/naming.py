"""What names a sweep's parent run: its overrides (read back from Hydra's ``multirun.yaml``), its display name, and
the key that finds it again on a rerun (one parent per sweep identity)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from inmind_exp.labels import split_override

#: Sweep-level overrides that do not tell configurations apart (paths, limits, tracking, cluster, hydra).
SWEEP_NAME_SKIP = ("hydra.", "tracking.", "cluster", "run.", "dataset.path", "trace.path", "llm.base_url",
                   "embedding.base_url", "llm.model_path", "dry_run")


def sweep_overrides(root: Path) -> list[str]:
    """The command-line overrides of the sweep rooted at ``root`` (Hydra writes them to ``multirun.yaml``)."""
    f = Path(root) / "multirun.yaml"
    if not f.is_file():
        return []
    try:
        import yaml

        doc = yaml.safe_load(f.read_text()) or {}
        return [str(o) for o in (((doc.get("hydra") or {}).get("overrides") or {}).get("task") or [])]
    except Exception:  # noqa: BLE001  (a name is cosmetic: never fail a run over it)
        return []


def sweep_name(root: Path, overrides: Iterable[str]) -> str:
    """``sweep <dir>: system=a,b embedding=x,y`` (path-like and bookkeeping overrides left out)."""
    shown = [o for o in overrides if not split_override(o)[0].startswith(SWEEP_NAME_SKIP)]
    return f"sweep {Path(root).name}" + (f": {' '.join(shown)}" if shown else "")


#: Overrides that do not make another sweep: where and how it runs, not what it computes.
SWEEP_KEY_SKIP = ("hydra.", "tracking.", "cluster", "dry_run", "run.progress_every_s", "run.wait_for_lock",
                  "run.keep_workdirs", "run.cache_dir", "run.cache", "run.retry_errors", "run.progress", "run.max_usd",
                  "run.max_tokens")  # a higher spend cap or another display resumes the same sweep


def sweep_run_key(root: Path, overrides: Iterable[str]) -> str:
    """The ``inmind.key`` of a sweep's parent run: its directory and the overrides that say what it computes, so a
    rerun of one sweep finds its parent again while another sweep in the same directory (other overrides) gets a
    parent of its own instead of renaming this one. A sweep without such overrides keeps ``sweep:<dir>``."""
    import hashlib

    kept = sorted(o for o in overrides if not split_override(o)[0].lstrip("+~").startswith(SWEEP_KEY_SKIP))
    if not kept:
        return f"sweep:{Path(root)}"
    return f"sweep:{Path(root)}:{hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:12]}"
