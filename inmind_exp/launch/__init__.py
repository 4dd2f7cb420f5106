"""The Hydra glue of a launch, in one room workers never import (``tests/test_import_graph.py`` checks): the command
(``cli``), the launcher (``launcher``: every launch's jobs handed to one ``run.session.Session``), the callbacks
``conf/config.yaml`` enables (``hold_lock.HoldSweepLock``, ``redact_output.RedactSecrets``) and the command line's
near-miss names (``override_names``). The class Hydra discovers stays in ``hydra_plugins/inmind_launcher``."""
