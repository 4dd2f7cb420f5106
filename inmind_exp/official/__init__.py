"""What the official release defines beside our own metrics: the release's setting and a run's (``setting``), protocol
fidelity judged from what ran (``fidelity``), the release's own aggregate (``aggregate``), its outputs in a job
directory (``outputs``) and its submission format (``submission``)."""
