"""Running configurations: ``driver`` runs one plan (ledger, metrics, MLflow, outputs) on an executor, ``sweep``
runs a whole sweep as one schedule, ``session`` keeps one launch's bookkeeping and ``resources`` what a process
keeps for the length of a sweep."""
