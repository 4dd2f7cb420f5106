"""Analysis of logged sweeps: which system is better, and is the difference real? Reads per-task records from an
MLflow experiment or a sweep directory (never reruns anything, never imports ``systems/``) and produces the paper's
tables, paired tests, breakdowns, plots, a judge audit and one HTML report (``python -m analysis report``).

Names are imported on first use (PEP 562): Hydra instantiates the end-of-sweep callback (``sweep_report``) at every
launch, which must not pay for scipy and pandas before the sweep starts. ``analysis.compare`` is the submodule
(its ``compare`` function is ``analysis.compare.compare``).
"""

from __future__ import annotations

from inmind_exp.lazy import lazy_names

#: each public name and the submodule it comes from
_LAZY = {
    **dict.fromkeys(["Comparison", "outcome", "verdict_outcome"], "analysis.compare"),
    **dict.fromkeys(["LoadError", "Run", "RunConfig", "RunSet", "check_store", "find_run", "load_experiment",
                     "load_sweep_dir"], "analysis.load"),
    **dict.fromkeys(["benjamini_hochberg", "bonett_price_ci", "cohen_kappa", "cr2_bm_ci", "holm", "mcnemar_exact",
                     "mcnemar_midp", "min_detectable_diff", "paired_bootstrap_ci", "stratified_bonett_price_ci",
                     "wilson_interval"], "analysis.stats"),
}
__getattr__ = lazy_names(globals(), _LAZY)

__all__ = list(_LAZY)
