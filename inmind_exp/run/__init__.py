"""Running configurations: ``plan`` resolves a composed config into a frozen ``Plan``, ``driver`` runs one plan
(ledger, metrics, MLflow, outputs) on an ``executor`` (Ray actors, or in-process), ``estimate`` is the dry run.

    plan = plan_config(cfg, root, job_dir)
    result = run_plan(plan)          # or print_estimate(plan)

Names are imported on first use (PEP 562): a Ray actor that needs one submodule (``progress``' phase board) does
not import the driver and everything under it. ``estimate`` and ``print_estimate`` are bound here at once, since
``estimate`` is also the name of their submodule.
"""

from __future__ import annotations

import importlib
from typing import Any

from inmind_exp.errors import PlanError
from inmind_exp.run.estimate import estimate, print_estimate

#: each public name and the submodule it comes from
_LAZY = {
    "RunResult": "inmind_exp.run.driver", "run_plan": "inmind_exp.run.driver", "Ledger": "inmind_exp.run.ledger",
    "Plan": "inmind_exp.run.plan", "plan_config": "inmind_exp.run.plan", "run_label": "inmind_exp.run.plan",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PlanError", *_LAZY, "estimate", "print_estimate"]
