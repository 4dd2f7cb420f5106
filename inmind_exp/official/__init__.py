"""What the official release defines beside our own metrics: protocol fidelity judged from what ran (``fidelity``),
the release's own aggregate (``aggregate``) and its submission format (``submission``)."""
