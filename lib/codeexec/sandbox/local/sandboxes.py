"""The `local` backend: a sandbox is a btrfs subvolume on this host (storage.py), code
runs under bubblewrap (bwrap.py).

    SANDBOX_ROOT/<session_id>/       a subvolume, limited to the session's disk limit
        lease.json   owner, shared, read-only, leased at, TTL (written once, private to the service)
        lock         flock: calls hold it shared, ending takes it exclusive
        run.lock     flock: the session's exclusive hold (every change to the session takes it)
        records/     the service's own records (programmatic workflows: port.Keep)
        ids/         its files' ids, each a link to its path (fileids.py)
        staging-*/   an upload's files until all of them are in
        data/        the artifact directory, bound at /mnt/data inside the sandbox
    SANDBOX_ROOT/.runs/<run key>     a run in progress, in any process
    SANDBOX_ROOT/.cancel/<run key>   a cancel for a run, seen by the run in any process

The program sees only data/, so it can neither read nor change its own lease, nor the
service's records and ids. "Last touched" is the mtime of lock, which every call that addresses
the session updates when it begins and again when it ends (a run longer than the idle
limit is not idle).

A cancel for a run in progress is always taken. One for a run that has not started (a
cancel may overtake its call while that waits for its session) is kept a few minutes,
and only so many at once, for each caller and host-wide: cancels of runs that never come
cannot pile up, and one caller's cannot crowd out another's.

Ending a session is a rename to a tombstone name, then the subvolume's destruction: the
rename is atomic, so a session is either whole and addressable or gone, never half there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ... import ids, notes
from ...errors import BackendUnavailable, BadRequest, Conflict, RateLimited, SessionNotFound, TooLarge
from ...languages import LANGUAGES
from ..port import FileInfo, HostLoad, HostReport, Lease, OwnerTag, Program, Quota, RunResult
from . import btrfs, bwrap, cgroups, files, owners
from .engine import ComposedSandboxes
from .fileids import FileIds
from .launcher import Launcher
from .limits import Confinement, Limits
from .storage import Storage, over_limit
from .toolchains import TOOLCHAINS
from .usage import UsageIndex

log = logging.getLogger("codeexec.local")

# What a quota leaves a session beyond its files (metadata counts in its quota group).
_BOOKKEEPING_BYTES = 1 << 20
_TOMBSTONE = ".ended-"
_STAGING = "staging-"
# A session subvolume without a whole lease (none, one torn, or no lock) this long after
# it last changed is what a crash left while it was being made: nothing opens it, nothing
# would reap it. One being made now is never that old.
_HALF_MADE_SECONDS = 60
_RUNS = ".runs"
_CANCELS = ".cancel"
# A cancel for no run in progress waits this long for its run, longer than a call waits
# for its session; a run's own entry outlives no run. Both are swept after it.
_CANCEL_KEPT_SECONDS = 300
# Cancels waiting for a run at most: a caller's (its run keys share their first
# characters), so that one caller's flood refuses no one else's; and host-wide.
_PENDING_CANCELS_PER_CALLER = 32
_PENDING_CANCELS = 4096


@dataclass(frozen=True)
class LocalConfig:
    root: Path  # one directory per session under it
    lease_ttl_seconds: int
    limits: Limits
    # The host uid/gid programs run as: one no other process of the host uses.
    sandbox_uid: int = 61000
    sandbox_gid: int = 61000
    use_cgroups: bool = True  # where the host offers them; else rlimits alone hold
    image_bytes: int = 0  # the btrfs image made where SANDBOX_ROOT has none (0: from free space)
    warm_python: int = 0  # runs made ahead from the interpreter with the libraries (warm/)
    warm_sandboxes: int = 0  # runs made ahead from a bare interpreter, for any language
    warm_scientific: int = 0  # runs made ahead from the scientific interpreter (warm.KINDS)
    # How long a call waits for a session another holds: beyond the longest run.
    hold_wait_seconds: float = 75.0
    # This host's index in a fleet of runners (RUNNER_INDEX): the mark its new sessions'
    # ids carry (ids.runner_mark). None: a lone host, whose ids mark nothing.
    runner_index: int | None = None


class LocalSandbox:
    def __init__(self, path: Path, lease: Lease, backend: LocalSandboxes) -> None:
        self.id = lease.session_id
        self.lease = lease
        self._path = path
        self._data = str(path / "data")
        self._backend = backend
        self._ids = FileIds(path)
        self._holding = False  # this call holds the session's exclusive hold
        self._quota: tuple[str, int, int] | None = None  # the quota bound to: scope, held, limit

    def bound(self, quota: Quota) -> None:
        """Hold this session's writes, from now on, to what its owner may still add to all
        it holds (its other sessions here as the last usage pass saw them, and what the
        caller counted on other hosts): TooLarge when nothing is left. A host whose storage
        counts no quota groups (no CAP_SYS_ADMIN: docs/kubernetes.md) holds none."""
        if not self._backend.storage.limited:
            return
        user, org = self._backend.usage.now.of(self.lease.owner)
        left = [(scope, limit, held + elsewhere) for scope, limit, held, elsewhere in (
            ("user", quota.user_bytes, user.bytes, quota.user_elsewhere),
            ("tenant", quota.org_bytes, org.bytes, quota.org_elsewhere),
        ) if limit]  # fmt: skip
        if not left:
            return
        scope, limit, held = min(left, key=lambda each: each[1] - each[2])
        if held >= limit:
            raise TooLarge(notes.over_quota(scope, held, limit), reason=scope)
        here = self._backend.usage.session_bytes(self.id) or 0
        # Room beyond the files for the session's own bookkeeping (its lock's time, a
        # record): a session held to the byte could not be touched again.
        cap = min(self._backend.limits.max_session_bytes, here + limit - held + _BOOKKEEPING_BYTES)
        fd = os.open(self._path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            btrfs.limit(fd, cap)
        finally:
            os.close(fd)
        if cap < self._backend.limits.max_session_bytes:
            self._quota = scope, held, limit

    def _over(self, exc: OSError) -> Exception:
        """A write's failure as the caller hears it: the quota that held it, else the session's."""
        if exc.errno == errno.EDQUOT and self._quota is not None:
            scope, held, limit = self._quota
            return TooLarge(notes.over_quota(scope, held, limit), reason=scope)
        return over_limit(exc, self._backend.limits.max_session_bytes)

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        # The session's disk limit (the kernel's quota) holds for what comes in from
        # outside as for what runs write.
        try:
            with self._ids.writing() as record:
                files.write_beneath(self._data, path, data, limit, self._backend.sandbox_user)
                record([path])
        except OSError as exc:
            raise self._over(exc) from exc

    def write_files(self, pairs: Iterable[tuple[str, BinaryIO]], limit: int) -> None:
        # Staged beside data/, in the session's own subvolume (its quota holds), then moved in.
        # Named by this process (owners.py): a start after a crash removes it, a live one never.
        staging = tempfile.mkdtemp(prefix=f"{_STAGING}{owners.tag()}-", dir=self._path)
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            moves: list[tuple[str, int, str]] = []
            for path, data in pairs:
                files.stage(fd, str(len(moves)), data, limit, self._backend.sandbox_user)
                moves.append((path, fd, str(len(moves))))
            with self._ids.writing() as record:
                files.move_beneath(self._data, moves, self._backend.sandbox_user)
                record(path for path, _, _ in moves)
        except OSError as exc:
            raise self._over(exc) from exc
        finally:
            os.close(fd)
            shutil.rmtree(staging, ignore_errors=True)

    def read_record(self, key: str) -> bytes | None:
        try:
            return (self._path / "records" / _record_name(key)).read_bytes()
        except FileNotFoundError:
            return None

    def write_record(self, key: str, record: bytes) -> None:
        records = self._path / "records"
        records.mkdir(mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=records, delete=False) as staged:
            staged.write(record)
        os.replace(staged.name, records / _record_name(key))

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        return files.open_beneath(self._data, path, self._backend.storage.snapshot)

    def stat(self, path: str) -> FileInfo:
        return files.stat_beneath(self._data, path)

    def list_files(self) -> list[FileInfo]:
        if self._ids.whole():
            return files.list_beneath(self._data)
        with self._unchanging() as settled:
            started = time.time_ns()
            walked = files.walk_beneath(self._data)
            self._ids.learn(((info.path, ctime) for info, ctime in walked), started, settled)
        return [info for info, _ in walked]

    def find(self, file_id: str) -> str | None:
        return self._ids.find(file_id)

    @contextlib.contextmanager
    def _unchanging(self) -> Iterator[bool]:
        """Whether no change to the session is under way while the block runs: this call
        holds the session, or shares its hold now that no one else has it."""
        if self._holding:
            yield True
            return
        fd = os.open(self._path / "run.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def remove_file(self, path: str) -> None:
        files.remove_beneath(self._data, path)

    def run(self, program: Program) -> RunResult:
        source = LANGUAGES[program.lang].source_name(program.code)
        launch = TOOLCHAINS[program.lang].launch(program.lang, source, program.code, program.args, program.timeout)
        self._restore_data_dir()
        self._ids.stale()  # the listing after the run records what it made
        with self._backend.running(program.run_key) as cancelled:
            return self._backend.launcher.run(self._data, launch, cancelled)

    def _restore_data_dir(self) -> None:
        """The artifact directory as the sandbox needs it: a run may have chmod-ed it 000
        or 0777, and the next run, or another host user, would find it so."""
        os.chown(self._data, *self._backend.sandbox_user, follow_symlinks=False)
        os.chmod(self._data, 0o700, follow_symlinks=False)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        # A lock of its own: `lock` is held shared by every call, for the reaper.
        fd = os.open(self._path / "run.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _lock_within(fd, self._backend.hold_wait_seconds)
            self._holding = True
            yield
        finally:
            self._holding = False
            os.close(fd)


def _record_name(key: str) -> str:
    if not ids.is_file_id(key.removesuffix(".before")):
        raise BadRequest("not a record's key")
    return key


def _check_enterable(root: Path, user: tuple[int, int]) -> None:
    """bwrap runs as the sandbox user and binds a session's directory beneath the root: a
    directory on the way that user may not pass makes every run fail, each with an opaque
    error. Refused at the start instead, with what to change."""
    uid, gid = user
    as_user = [bwrap.SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    probe = [*as_user, "/usr/bin/test", "-x", str(root)]
    if os.geteuid() == 0 and subprocess.run(probe, check=False).returncode != 0:  # noqa: S603
        raise RuntimeError(
            f"SANDBOX_ROOT {root} cannot be entered by the sandbox user (uid {uid}, gid {gid}), so no run could"
            " start: let every directory above it be searched by others (chmod o+x), or choose a root elsewhere"
        )


def _sweep_staging(session: Path) -> None:
    """The staging directories of uploads whose process is gone."""
    with contextlib.suppress(OSError), os.scandir(session) as entries:
        for entry in entries:
            maker = entry.name.removeprefix(_STAGING).rpartition("-")[0]
            if entry.name.startswith(_STAGING) and owners.gone(maker):
                log.info("removing an upload's staging directory left in %s", session.name)
                shutil.rmtree(entry.path, ignore_errors=True)


def _half_made(session: Path) -> bool:
    """Whether a crash cut the session short while it was made: no lease, a torn one, or
    no lock, and nothing changed in it for _HALF_MADE_SECONDS. A lease that cannot be read
    for another reason (out of descriptors) is not taken for torn."""
    try:
        if time.time() - session.stat().st_mtime < _HALF_MADE_SECONDS:
            return False
        _read_lease(session.name, session)
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return True
    except OSError:
        return False
    return False


def _lock_within(fd: int, seconds: float) -> None:
    """flock, but never waiting longer than `seconds`: a caller waiting for a session
    holds a thread, and a session busy for longer is better answered "try again"."""
    deadline = time.monotonic() + seconds
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() + pause > deadline:
                raise BackendUnavailable("the session is busy with another call; try again", retry_after=2) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)


class LocalSandboxes(ComposedSandboxes):
    def __init__(self, config: LocalConfig) -> None:
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            raise RuntimeError(
                "SANDBOX_BACKEND=local refuses to run inside AWS Lambda: user code would run "
                "next to the function's credentials. Use SANDBOX_BACKEND=agentcore."
            )
        if shutil.which("bwrap") is None:
            raise RuntimeError("SANDBOX_BACKEND=local needs bubblewrap: apt-get install bubblewrap")
        bwrap.reset_libc_signals()
        super().__init__()
        self.root = config.root
        self.lease_ttl_seconds = config.lease_ttl_seconds
        self.limits = config.limits
        self.sandbox_user = (config.sandbox_uid, config.sandbox_gid)
        self.hold_wait_seconds = config.hold_wait_seconds
        self.runner_index = config.runner_index
        self._runs_now = 0  # runs under way in this process
        self._runs_lock = threading.Lock()
        self.storage = Storage.prepare(
            config.root, config.limits.max_session_bytes, config.sandbox_gid, config.image_bytes
        )
        _check_enterable(config.root, self.sandbox_user)
        for private in (_RUNS, _CANCELS):
            (self.root / private).mkdir(mode=0o700, exist_ok=True)
        self.languages = frozenset(lang for lang, chain in TOOLCHAINS.items() if chain.available())
        self.cgroup_parents = cgroups.detect() if config.use_cgroups else {}
        self._sweep_leftovers()
        self.usage = UsageIndex(config.root, self._mine)  # what each owner holds here, for quotas and the console
        self.usage.start()
        warm_sizes = {"py": config.warm_python, "scientific": config.warm_scientific, "bare": config.warm_sandboxes}
        self.launcher = Launcher(Confinement(self.limits, self.sandbox_user, self.cgroup_parents), warm_sizes)
        # The warm servers die with this process (bwrap --die-with-parent); the runs made
        # ahead, and their cgroups, are ended by the launcher when the backend's owner
        # closes it (api/service.py, runner/app.py), or swept at the next start.

    named_sessions = True

    def _sweep_leftovers(self) -> None:
        """What a crash (or a stop before the teardown) left: run cgroups, uploads' staging
        directories, sessions half made, endings not finished; only of processes that are
        gone (owners.py). Before serving, and at every reaper pass (`leases`): a maker not
        yet reaped at the start, or a run's processes still dying then, leaves nothing
        for longer than one pass."""
        for _ in self.leases():
            pass

    def close(self) -> None:
        self.usage.close()
        self.launcher.close()

    @contextlib.contextmanager
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> Iterator[LocalSandbox]:
        if session_id is not None and not ids.is_session_id(session_id):
            raise ValueError("not a session id")
        session_id = session_id or ids.new_session_id(self.runner_index)
        try:
            path = self.storage.create_session(session_id)
        except FileExistsError:
            raise Conflict("that session exists already") from None
        data = path / "data"
        data.mkdir(mode=0o700)
        os.chown(data, *self.sandbox_user)
        FileIds(path).make()
        lease = {
            "owner": {"org": owner.org, "user": owner.user},
            "shared": shared,
            "read_only": read_only,
            "leased_at": time.time(),
            "ttl_seconds": self.lease_ttl_seconds,
        }
        # Whole or not there: a crash mid-write leaves no torn lease, only a session half made.
        with tempfile.NamedTemporaryFile("w", dir=path, prefix=".lease-", delete=False) as staged:
            staged.write(json.dumps(lease))
        os.replace(staged.name, path / "lease.json")
        (path / "lock").touch(mode=0o600)
        with self.open(session_id, lambda lease: True) as sandbox:
            yield sandbox

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[LocalSandbox]:
        if not ids.is_session_id(session_id):
            raise SessionNotFound()
        path = self.root / session_id
        try:
            lock = os.open(path / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SessionNotFound() from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)
            # Re-check under the lock: an ending renamed the directory away while we waited.
            lease = self._lease_of(session_id, path)
            if lease is None or not admit(lease):
                raise SessionNotFound()
            os.utime(lock)  # touch: the idle clock starts again, when the call begins...
            try:
                yield LocalSandbox(path, lease, self)
            finally:
                os.utime(lock)  # ...and when it ends
        finally:
            os.close(lock)

    def lease(self, session_id: str) -> Lease:
        lease = self._lease_of(session_id, self.root / session_id) if ids.is_session_id(session_id) else None
        if lease is None:
            raise SessionNotFound()
        return lease

    def end(self, session_id: str) -> None:
        self._end(session_id, fcntl.LOCK_EX, lambda lease: True)

    def cancel(self, run_key: str) -> None:
        # The run, in whichever process, sees the marker at its next look (every 20 ms).
        marker = self._run_file(_CANCELS, run_key)
        if not self._run_file(_RUNS, run_key).exists() and self._too_many_cancels(run_key):
            self._sweep_cancels()
            if self._too_many_cancels(run_key):
                said = "too many cancels wait for runs that have not started; try again later"
                raise RateLimited(said, reason="cancels")
        marker.touch()

    @contextlib.contextmanager
    def running(self, run_key: str | None) -> Iterator[Callable[[], bool] | None]:
        """A run in progress (counted), under `run_key` for cancels to find; yields whether one came."""
        with self._counted():
            if run_key is None:
                yield None
                return
            entry, marker = self._run_file(_RUNS, run_key), self._run_file(_CANCELS, run_key)
            entry.touch()
            try:
                yield marker.exists
            finally:
                entry.unlink(missing_ok=True)
                marker.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        with self._runs_lock:
            self._runs_now += 1
        try:
            yield
        finally:
            with self._runs_lock:
                self._runs_now -= 1

    def _run_file(self, kind: str, run_key: str) -> Path:
        if not ids.is_file_id(run_key):
            raise ValueError("not a run key")
        return self.root / kind / run_key

    def _too_many_cancels(self, run_key: str) -> bool:
        """Whether the markers on disk are at the caller's cap or the host's (those of runs
        in progress count too: there are few)."""
        caller = run_key[: ids.RUN_KEY_CALLER_CHARS]
        kept = callers = 0
        with os.scandir(self.root / _CANCELS) as markers:
            for marker in markers:
                kept += 1
                callers += marker.name.startswith(caller)
        return callers >= _PENDING_CANCELS_PER_CALLER or kept >= _PENDING_CANCELS

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        # Never waits: a session some call holds is busy, and the next pass tries again.
        return self._end(session_id, fcntl.LOCK_EX | fcntl.LOCK_NB, still_due)

    def _end(self, session_id: str, lock_mode: int, still_due: Callable[[Lease], bool]) -> bool:
        """The ending protocol. Calls hold the session's lock shared for their whole
        length; ending takes it exclusive, re-reads the lease (a call may have touched it
        since the reaper looked), and renames the directory to a tombstone before letting
        go. A call that was waiting for the lock then finds the directory gone and
        answers 404, so nothing writes into or resurrects an ending session. The removal
        itself happens after the lock, on the tombstone; a removal that failed halfway is
        finished by the next `leases()` pass."""
        if not ids.is_session_id(session_id):
            return False
        path = self.root / session_id
        try:
            lock = os.open(path / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        tomb = f"{_TOMBSTONE}{session_id}"
        try:
            try:
                fcntl.flock(lock, lock_mode)
            except BlockingIOError:
                return False
            lease = self._lease_of(session_id, path)
            if lease is None or not still_due(lease):
                return False
            path.rename(self.root / tomb)
        finally:
            os.close(lock)
        self.storage.destroy_session(tomb)
        return True

    def session_count(self) -> int:
        """How many sessions this host holds (a fleet places new ones by it)."""
        return sum(1 for entry in os.scandir(self.root) if self._mine(entry.name))

    def _mine(self, name: str) -> bool:
        """Whether a name under the root is a session this host made (runners of a fleet
        may share one root, as the tests' do: each keeps to its own)."""
        index = self.runner_index
        return ids.is_session_id(name) and (index is None or ids.runner_of(name) == index)

    def hosts(self) -> list[HostLoad]:
        disk = shutil.disk_usage(self.root)  # the sessions' filesystem: statfs, no walk
        name = "local" if self.runner_index is None else str(self.runner_index)
        pools = self.launcher.warm_stats()
        return [HostLoad(name, "up", self._runs_now, self.session_count(), disk.used, disk.total, pools)]

    def reports(self) -> list[HostReport]:
        return [HostReport(load, self.usage.now.top()) for load in self.hosts()]

    def leases(self) -> Iterator[Lease]:
        """Every session's lease, as the root holds them; on the way, what a crash left is
        removed (`_sweep_leftovers`)."""
        self._sweep_cancels()
        cgroups.sweep(self.cgroup_parents)
        return self._sessions()

    def _sessions(self) -> Iterator[Lease]:
        for entry in os.scandir(self.root):
            path = Path(entry.path)
            if entry.name.startswith(_TOMBSTONE):
                self._finish_ending(entry.name)
            elif not ids.is_session_id(entry.name):
                continue
            elif (lease := self._lease_of(entry.name, path)) is not None:
                _sweep_staging(path)
                yield lease
            else:
                self._remove_if_half_made(path)

    def _remove_if_half_made(self, path: Path) -> None:
        if not _half_made(path):
            return
        tomb = f"{_TOMBSTONE}{path.name}"
        try:
            path.rename(self.root / tomb)
        except OSError:
            return
        log.info("removing the session %s, half made (no whole lease)", path.name)
        self._finish_ending(tomb)

    def _finish_ending(self, tomb: str) -> None:
        """An ending that did not finish; one that fails again is logged, and the pass goes on."""
        try:
            self.storage.destroy_session(tomb)
        except OSError:
            log.exception("could not remove the ended session %s", tomb)

    def _sweep_cancels(self) -> None:
        old = time.time() - _CANCEL_KEPT_SECONDS
        for kind in (_CANCELS, _RUNS):
            for entry in os.scandir(self.root / kind):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < old:
                        os.unlink(entry.path)

    @staticmethod
    def _lease_of(session_id: str, path: Path) -> Lease | None:
        try:
            return _read_lease(session_id, path)
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _read_lease(session_id: str, path: Path) -> Lease:
    meta = json.loads((path / "lease.json").read_text())
    touched = (path / "lock").stat().st_mtime
    owner = OwnerTag(meta["owner"]["org"], meta["owner"]["user"])
    shared, read_only = bool(meta["shared"]), bool(meta["read_only"])
    return Lease(session_id, owner, shared, read_only, meta["leased_at"], meta["ttl_seconds"], touched)
