"""Running configurations: ``driver`` runs what is missing of one plan on an executor and hands the records to its
``recorders`` (job directory and ledger, the release's outputs, MLflow), ``sweep`` runs a whole sweep as one
schedule, ``session`` keeps one launch's bookkeeping and ``resources`` what a process keeps for a sweep's length."""
