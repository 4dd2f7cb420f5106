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
import shutil
import sqlite3
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


def template_path() -> Path:
    """Where the empty store of this MLflow version is kept (``$INMIND_CACHE_HOME``, else
    ``$XDG_CACHE_HOME/inmind-exp``, else ``~/.cache/inmind-exp``): copying it is ~0.05 s where creating a store
    (tables and every migration) is 2-5 s."""
    import mlflow

    root = os.environ.get("INMIND_CACHE_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "inmind-exp")
    return Path(root) / f"mlflow-{mlflow.__version__}-empty-store.db"


def new_store(db: Path) -> None:
    """Create a migrated SQLite store at ``db`` (which must not exist): a copy of the cached empty store of this
    MLflow version, or made by MLflow (then cached). The cached copy holds the schema and no experiment, so MLflow
    creates the Default experiment on first open exactly as in a store it made itself (its artifact location is
    the opener's ``./mlruns``). A missing, unwritable or damaged template only costs the seconds it saves."""
    template = template_path()
    if template.is_file():
        part = db.with_name(f".{db.name}.template-{os.getpid()}")
        try:
            shutil.copyfile(template, part)
            with contextlib.closing(sqlite3.connect(part)) as con:  # a store's tables, and no experiment
                con.execute("SELECT version_num FROM alembic_version").fetchone()
                if con.execute("SELECT count(*) FROM experiments").fetchone()[0]:
                    raise sqlite3.DatabaseError("the template holds experiments")
            os.replace(part, db)
            _touch(db)
            return
        except (OSError, sqlite3.Error) as e:  # a damaged template: make the store the slow way
            log.debug("MLflow store template %s unusable (%s: %s); creating the store", template, type(e).__name__, e)
        finally:
            part.unlink(missing_ok=True)
    # made aside, then renamed: never a store without tables; a fresh name each time (MLflow caches a store by URI)
    part = db.with_name(f".{db.name}.new-{os.getpid()}-{time.monotonic_ns()}")
    try:
        _touch(part)
        os.replace(part, db)
    finally:
        for leftover in (part, part.with_name(part.name + "-journal")):
            leftover.unlink(missing_ok=True)
    with contextlib.suppress(OSError, sqlite3.Error):
        _save_template(db, template)


def _touch(db: Path) -> None:
    """Open the store at ``db`` once (creating tables, migrations and the Default experiment as needed) and let go of
    its file handles."""
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    client.search_experiments(max_results=1)
    with contextlib.suppress(Exception):
        client._tracking_client.store.engine.dispose()  # the file may be renamed or copied next


def _save_template(db: Path, template: Path) -> None:
    """Keep a copy of the new, empty store ``db`` without its experiments as this MLflow version's template."""
    template.parent.mkdir(parents=True, exist_ok=True)
    part = template.with_name(f".{template.name}.{os.getpid()}")
    try:
        shutil.copyfile(db, part)
        with contextlib.closing(sqlite3.connect(part)) as con:
            con.execute("DELETE FROM experiments")
            con.commit()
        os.replace(part, template)
    finally:
        part.unlink(missing_ok=True)


def open_tracking_store(uri: str) -> MlflowClient:
    """An ``MlflowClient`` whose store exists and is migrated, created by at most one process at a time."""
    def touch() -> MlflowClient:
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # creates the tables and runs the migrations of a new database
        return client

    with store_lock(uri):
        db = sqlite_path(uri)
        if db is not None and not db.exists() and db.parent.is_dir():
            new_store(db)  # a failure (a full disk) leaves no store behind: MLflow would leave one without tables
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
