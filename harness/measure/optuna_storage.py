"""Where ``vk tune`` keeps its studies: one Optuna storage that many worker processes, on one machine
or many, share without losing a trial.

- ``open_storage(url)``: SQLite (default; one machine), PostgreSQL or MySQL (many machines:
  ``postgresql://user:password@host/db``, each host running ``vk tune --storage`` with the same URL),
  or ``journal:///path`` (Optuna's JournalStorage on a shared file). A URL that cannot be opened
  fails at once with one line (``StorageError``), never a traceback or a hang: a database server is
  given ``CONNECT_TIMEOUT_S`` to answer.
- Creating the schema races when several processes open a fresh database together (SQLite: "table
  studies already exists"; PostgreSQL: a duplicate ``alembic_version`` row): a file lock serialises
  it on one machine, and a retry absorbs it across machines.
- ``reap_interrupted(study, storage)``: a trial left RUNNING by a process that no longer runs (killed
  with SIGKILL, a lost machine) is failed, marked ``interrupted`` and its config queued again, so it
  is measured by the next run and never counts against the budget. Trials of this machine are
  reaped at once (their process id is gone); other machines' through Optuna's heartbeat after
  ``GRACE_S``.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from pathlib import Path

from harness.measure.inputs import InputError

HEARTBEAT_S = 30
GRACE_S = 120
CONNECT_TIMEOUT_S = 10
SQLITE_BUSY_TIMEOUT_S = 120  # many workers on one SQLite file on a loaded machine queue for its write lock
CREATE_ATTEMPTS = 5
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql")


class StorageError(InputError):
    """A storage URL that cannot be opened; the message is one line naming the URL."""


def _scheme(url: str) -> str:
    return url.split(":", 1)[0].split("+")[0] if ":" in url else ""


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def describe_url(url: str) -> str:
    """The URL without its password, for messages and records."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"
    return url


def check_url(url: str) -> None:
    """Refuse a URL no storage can open, before anything is started."""
    if url.startswith("journal://"):
        if not url.removeprefix("journal://"):
            raise StorageError(f"storage {url!r}: expected journal:///path/to/file.log")
        return
    if _scheme(url) not in DATABASE_SCHEMES:
        raise StorageError(f"storage {describe_url(url)!r}: expected an Optuna storage URL: sqlite:///file.db, "
                           "postgresql://user:password@host/db, mysql://... or journal:///file.log")
    if _scheme(url) == "sqlite" and not url.startswith("sqlite:///"):
        raise StorageError(f"storage {url!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db")


def _sqlite_path(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def open_storage(url: str, *, must_exist: bool = False):
    """An Optuna storage for ``url`` (see the module docstring); raises StorageError in one line.
    ``must_exist``: a reader's storage (a SQLite or journal file that is not there is refused, not
    created)."""
    import optuna

    check_url(url)
    local = _sqlite_path(url) or (Path(url.removeprefix("journal://")) if url.startswith("journal://") else None)
    if must_exist and local is not None and not local.is_file():
        raise StorageError(f"storage {url!r}: no such file: {local}")
    if url.startswith("journal://"):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix("journal://"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        except OSError as error:
            raise StorageError(f"storage {url!r}: {_one_line(error)}") from None
    engine_kwargs = {}
    if _scheme(url) in ("postgresql", "mysql"):
        engine_kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}, "pool_pre_ping": True}
    elif _scheme(url) == "sqlite":  # a writer waits for another's lock instead of failing after sqlite3's 5 s
        engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    sqlite = _sqlite_path(url)
    lock = None
    if sqlite is not None:
        from filelock import FileLock

        try:
            sqlite.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StorageError(f"storage {url!r}: cannot create {sqlite.parent}: {_one_line(error)}") from None
        lock = FileLock(str(sqlite) + ".lock")
    for attempt in range(CREATE_ATTEMPTS):
        try:
            if lock is not None:
                with lock:
                    return _rdb_storage(url, engine_kwargs)
            return _rdb_storage(url, engine_kwargs)
        except ImportError as error:
            raise StorageError(f"storage {describe_url(url)!r}: no database driver for it ({_one_line(error)}): "
                               "pip install 'verify-kernels[postgres]' (PostgreSQL) or PyMySQL (MySQL)") from None
        except Exception as error:  # sqlalchemy's errors: a bad URL, a refused connection, a schema race
            if _is_creation_race(error) and attempt + 1 < CREATE_ATTEMPTS:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise StorageError(f"storage {describe_url(url)!r}: cannot open it: {_one_line(error)}") from None
    raise AssertionError("unreachable")


def _rdb_storage(url: str, engine_kwargs: dict):
    """Optuna's RDBStorage with a heartbeat whose stale trials are retried once (Optuna 4.9 renamed
    the callback and its argument; both spellings are taken)."""
    import inspect

    import optuna

    retry = (getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
             or optuna.storages.RetryFailedTrialCallback)
    argument = ("heartbeat_stale_trial_callback"
                if "heartbeat_stale_trial_callback" in inspect.signature(optuna.storages.RDBStorage).parameters
                else "failed_trial_callback")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs or None, heartbeat_interval=HEARTBEAT_S,
                                          grace_period=GRACE_S, **{argument: retry(max_retry=1)})


def _is_creation_race(error: Exception) -> bool:
    text = str(error).lower()
    return any(sign in text for sign in ("already exists", "unique constraint", "duplicate key", "database is locked"))


def worker_identity() -> dict:
    """Who measures a trial: recorded on it so that a later run can tell a dead worker's trial."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def requeue(study, params: dict) -> None:
    """Queue ``params`` to be measured again unless a queued trial already holds them."""
    import optuna

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    if any(t.system_attrs.get("fixed_params", t.params) == params for t in waiting):
        return
    study.enqueue_trial(params)


def reap_interrupted(study, storage) -> list[int]:
    """Fail and re-queue the RUNNING trials whose worker process on this machine is gone; other
    machines' are left to the heartbeat. Returns the trial numbers reaped."""
    import optuna

    host, reaped = socket.gethostname(), []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker") or {}
        pid = worker.get("pid")
        if worker.get("host") != host or not isinstance(pid, int) or pid <= 0 or _process_alive(pid):
            continue
        try:
            storage.set_trial_user_attr(trial._trial_id, "interrupted", "worker process gone")
            storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
            continue  # another process reaped (or finished) it first
        if trial.params:
            requeue(study, dict(trial.params))
        reaped.append(trial.number)
    if isinstance(storage, optuna.storages.RDBStorage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # other machines' trials, past the heartbeat's grace
    return reaped


def load_study(url: str, name: str, flag: str = "--study"):
    """The study ``name`` in the storage at ``url``; a missing one is refused naming those there are."""
    import optuna

    storage = open_storage(url, must_exist=True)
    names = optuna.get_all_study_names(storage)
    if name not in names:
        shown = ", ".join(repr(n) for n in sorted(names)[:6]) + (" ..." if len(names) > 6 else "")
        raise InputError(f"{flag}: no study {name!r} in {describe_url(url)}; it holds {shown or 'no study'}")
    return optuna.load_study(study_name=name, storage=storage)
