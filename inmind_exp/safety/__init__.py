"""What guards a run against leaking or clobbering: redaction of secrets (``redact``), paths built from ids and
kept inside their parent (``paths``), worker temp directories that never pile up (``workdirs``) and one driver per
sweep directory (``sweep_lock``). No Hydra, Ray or MLflow import here: workers load these."""
