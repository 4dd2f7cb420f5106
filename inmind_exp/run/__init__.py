"""Running configurations: ``plan`` resolves a composed config into a frozen ``Plan``, ``driver`` runs one plan
(ledger, metrics, MLflow, outputs) on an ``executor`` (Ray actors, or in-process), ``estimate`` is the dry run.

    plan = plan_config(cfg, root, job_dir)
    result = run_plan(plan)          # or print_estimate(plan)

Names are imported on first use (PEP 562): a Ray actor that needs one submodule (``progress``' phase board) does
not import the driver and everything under it. ``estimate`` and ``print_estimate`` are bound here at once, since
``estimate`` is also the name of their submodule.
"""

from __future__ import annotations

from inmind_exp.errors import PlanError
from inmind_exp.lazy import lazy_names
from inmind_exp.run.estimate import estimate, print_estimate

#: each public name and the submodule it comes from
_LAZY = {
    "RunResult": "inmind_exp.run.driver", "run_plan": "inmind_exp.run.driver", "Ledger": "inmind_exp.run.ledger",
    "Plan": "inmind_exp.run.plan", "plan_config": "inmind_exp.run.plan", "run_label": "inmind_exp.run.plan",
}
__getattr__ = lazy_names(globals(), _LAZY)

__all__ = ["PlanError", *_LAZY, "estimate", "print_estimate"]
