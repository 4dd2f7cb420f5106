"""Execution: the only package that imports Ray. Executors (``executor``: Ray actors or in-process) run plans'
remaining tasks on one shared schedule (``schedule``) of task workers (``worker``), with the cluster services
(limiter, call cache, phase board: ``services``, ``cluster_services``), code shipping and prefix snapshots."""
