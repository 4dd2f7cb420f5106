"""Running configurations: ``driver`` runs one plan (ledger, metrics, MLflow, outputs) on an executor, ``sweep``
runs a launch's plans as one schedule, ``session`` is one launch's steps (check, plan, run, report) and bookkeeping,
``resources`` what a process keeps for the length of a launch."""
