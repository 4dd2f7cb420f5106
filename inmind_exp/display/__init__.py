"""What a launch shows while it runs: progress and the live display, the headline table, the stop on signals and
the spend cap that stops dispatch (the end screen, which reads MLflow, is ``run.end_screen``)."""
