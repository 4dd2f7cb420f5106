"""Hydra callback taking the sweep lock (``inmind_exp.safety.sweep_lock``) on the sweep (or run) directory before Hydra
writes anything there or starts a job, and holding it until the process exits. It is released on every way out: the
end of the run, and through ``atexit`` any exit Hydra's end callbacks never see (a bad config's exit 2, the spend
cap's 4, Ctrl-C's 130, SIGTERM's 143 and SIGHUP's 129, which ``run.stop`` turns into an interrupt); only a killed or
crashed driver leaves its record behind.

A Hydra callback's exception is only a warning, so a held lock ends the launch with ``Exit.RETRY_LATER``.
``run.wait_for_lock`` (wait instead) and ``run.lock_timeout_s`` are read when present in the config.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from inmind_exp.console import fail
from inmind_exp.errors import Exit
from inmind_exp.safety.sweep_lock import SweepLock, SweepLockedError


class HoldSweepLock(Callback):
    """Acquire the directory's lock in ``on_multirun_start`` / ``on_run_start``; the kernel releases it at exit."""

    def __init__(self, poll_s: float = 2.0) -> None:
        self.poll_s = poll_s
        self.lock: SweepLock | None = None

    def _take(self, config: DictConfig, key: str) -> None:
        directory = Path(str(OmegaConf.select(config, key))).resolve()
        wait = bool(OmegaConf.select(config, "run.wait_for_lock", default=False))
        timeout = OmegaConf.select(config, "run.lock_timeout_s", default=None)
        try:
            self.lock = SweepLock(directory).acquire(wait=wait, timeout_s=timeout, poll_s=self.poll_s)
        except SweepLockedError as e:
            fail(Exit.RETRY_LATER, str(e))  # the holder's command, as it wrote it
        atexit.register(self.lock.release)  # (release is idempotent: the end callbacks may have run it)
        if self.lock.stale is not None:  # every exit releases it: only a killed or crashed driver leaves a record
            print(f"[inmind] the last driver of this sweep ({self.lock.stale.short()}) was killed or crashed; taking "
                  f"over its lock", file=sys.stderr, flush=True)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._take(config, "hydra.sweep.dir")

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._take(config, "hydra.run.dir")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.lock is not None:
            self.lock.release()

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.lock is not None:
            self.lock.release()
