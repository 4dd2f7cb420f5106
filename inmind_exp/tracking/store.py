"""Open an MLflow tracking store safely when several processes may create it at once.

MLflow creates a new SQLite database's tables (and runs its migrations) inside the first call that touches the store;
two processes doing that at once fail with ``sqlite3.OperationalError: duplicate column name`` or an alembic
``CommandError``. Here the first touch of the store, and the get-or-create of an experiment, are serialised by an
``fcntl.flock`` on ``<db>.lock`` next to the database, with bounded retries for a writer that does not take the lock
(``mlflow ui``, an older driver).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Errors of a racing store creation (tables or columns created twice, a migration seeing another's rows, a lock).
RACE_MARKERS = ("duplicate column", "already exists", "database is locked", "online migration", "_alembic_tmp",
                "no such table")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, or None for any other store."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):].split("?", 1)[0]).expanduser()
    return None


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold ``<db>.lock`` (exclusive flock) for a SQLite store; a no-op for any other store."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _is_race(e: BaseException) -> bool:
    text = f"{type(e).__name__}: {e}".lower()
    return any(m in text for m in RACE_MARKERS)


def with_retries(fn: Callable[[], T], attempts: int = 5, delay_s: float = 0.2) -> T:
    """``fn()``, retried with a growing delay while it fails the way a concurrent store creation does."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - SQLAlchemy, alembic and MLflow each wrap the sqlite error differently
            if i == attempts - 1 or not _is_race(e):
                raise
            log.warning("MLflow store busy (%s); retrying", str(e).splitlines()[0][:160])
            time.sleep(delay_s * (2 ** i))
    raise AssertionError("unreachable")


#: new SQLite stores made ahead of time (``prepare_store``), by the path they are for
_PREPARED: dict[Path, Path] = {}


def prepare_store(uri: str) -> None:
    """Create and migrate a new SQLite store under a hidden name beside the one ``uri`` names, so that once every
    check of a launch has passed the real store is a rename away (a new store's migrations take seconds); until
    then no ``mlflow.db`` exists. Nothing for an existing store, another kind of store, or a missing directory."""
    db = sqlite_path(uri)
    if db is None or db.exists() or not db.parent.is_dir() or db in _PREPARED:
        return
    tmp = db.with_name(f".{db.name}.prepared-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp}")
    client.search_experiments(max_results=1)  # the tables and migrations
    with contextlib.suppress(Exception):
        client._tracking_client.store.engine.dispose()  # its file handles: the file is renamed or deleted next
    _PREPARED[db] = tmp


def discard_prepared() -> None:
    """Delete the stores made ahead of time and not used (the launch stopped before it logged anything)."""
    for tmp in _PREPARED.values():
        tmp.unlink(missing_ok=True)
    _PREPARED.clear()


def _adopt_prepared(uri: str) -> None:
    """Under the store's lock: a store made ahead of time becomes the store, if there is none yet."""
    db = sqlite_path(uri)
    tmp = _PREPARED.pop(db, None) if db is not None else None
    if tmp is None:
        return
    if db is not None and not db.exists() and tmp.exists():
        os.replace(tmp, db)
    else:
        tmp.unlink(missing_ok=True)


def open_tracking_store(uri: str) -> MlflowClient:
    """An ``MlflowClient`` whose store exists and is migrated, created by at most one process at a time."""
    def touch() -> MlflowClient:
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # creates the tables and runs the migrations of a new database
        return client

    with store_lock(uri):
        _adopt_prepared(uri)
        return with_retries(touch)


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment ``name``, created if missing; safe when several processes ask at once."""
    uri = client.tracking_uri if hasattr(client, "tracking_uri") else client._tracking_client.tracking_uri

    def get_or_create() -> str:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException as e:
            if "RESOURCE_ALREADY_EXISTS" not in str(e.error_code) and "already exists" not in str(e):
                raise
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    with store_lock(uri):
        return with_retries(get_or_create)
