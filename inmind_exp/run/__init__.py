"""Running configurations: ``plan`` resolves a composed config into a frozen ``Plan``, ``driver`` runs one plan
(ledger, metrics, MLflow, outputs) on an ``executor`` (Ray actors, or in-process), ``estimate`` is the dry run.

    plan = plan_config(cfg, root, job_dir)
    result = run_plan(plan)          # or print_estimate(plan)
"""

from inmind_exp.errors import PlanError
from inmind_exp.run.driver import RunResult, run_plan
from inmind_exp.run.estimate import estimate, print_estimate
from inmind_exp.run.ledger import Ledger
from inmind_exp.run.plan import Plan, plan_config, run_label

__all__ = ["PlanError", "Plan", "plan_config", "run_label", "Ledger", "RunResult", "run_plan", "estimate",
           "print_estimate"]
