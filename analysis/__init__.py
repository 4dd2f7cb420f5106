"""Analysis of logged sweeps: which system is better, and is the difference real? Reads per-task records from an
MLflow experiment or a sweep directory (never reruns anything, never imports ``systems/``) and produces the paper's
tables, paired tests, breakdowns, plots, a judge audit and one HTML report (``python -m analysis report``, or the
``inmind-analysis`` command). Import what you need from its module (``analysis.load``, ``analysis.compare``,
``analysis.stats``, ...): this package imports nothing, so the launcher's end-of-sweep report (``sweep_report``)
pays for scipy and pandas only once the tasks are under way.
"""
