"""The Hydra-only glue of a launch, in one room workers never import (``tests/test_import_graph.py`` checks): the
callbacks ``conf/config.yaml`` enables (``hold_lock.HoldSweepLock``, ``check_sweep.CheckSweep``,
``redact_output.RedactSecrets``) and the command line's near-miss names (``override_names``). The launcher Hydra
discovers stays in ``hydra_plugins/inmind_launcher``. Nothing is imported here, so naming this package loads no Hydra."""
