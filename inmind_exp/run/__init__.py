"""Running configurations: ``driver`` runs what is missing of one plan on an executor and hands the records to its
``recorders`` (job directory and ledger, the release's outputs, MLflow), ``sweep`` runs a launch's plans as one
schedule, ``session`` is one launch's steps (check, plan, run, report) and bookkeeping, ``resources`` what a process
keeps for the length of a launch."""
