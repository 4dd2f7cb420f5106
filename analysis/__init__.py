"""Analysis of logged sweeps: which system is better, and is the difference real? Reads per-task records from an
MLflow experiment or a sweep directory (never reruns anything, never imports ``systems/``) and produces the paper's
tables, paired tests, breakdowns, plots, a judge audit and one HTML report (``python -m analysis report``).
"""

from analysis.compare import Comparison, compare, outcome, verdict_outcome
from analysis.load import LoadError, Run, RunConfig, RunSet, check_store, find_run, load_experiment, load_sweep_dir
from analysis.stats import benjamini_hochberg, cohen_kappa, holm, mcnemar_exact, paired_bootstrap_ci, wilson_interval

__all__ = [
    "Comparison", "compare", "outcome", "verdict_outcome", "LoadError", "Run", "RunConfig", "RunSet", "check_store",
    "find_run", "load_experiment",
    "load_sweep_dir", "benjamini_hochberg", "cohen_kappa", "holm", "mcnemar_exact", "paired_bootstrap_ci",
    "wilson_interval",
]
