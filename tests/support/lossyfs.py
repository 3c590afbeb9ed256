"""A lossy FUSE filesystem for OS-crash tests: what was not fsync-ed is gone after a "crash".

An OS crash or a power loss keeps only what reached the disk; ``kill -9`` of a process keeps
everything the kernel already holds. To test the first on this machine (no VM; no
device-mapper in this kernel, so neither dm-flakey nor dm-log-writes) this filesystem passes
every operation through to a backing directory and remembers what a crash would take back:

* file data: each write over bytes that were synced saves the old bytes first (an undo
  record); ``fsync``/``fdatasync`` of the file forgets them and records the synced size. A
  crash applies the undo records newest first and cuts the file to its synced size, so a
  file never synced comes back empty.
* names: a directory's entries (create, mkdir, rename, unlink, rmdir, symlink) are durable
  only as of its last ``fsync`` of the directory. A crash rebuilds the tree from those
  listings, so an unsynced create disappears, an unsynced unlink or rename is undone (a
  removed file that a durable listing still names is parked in ``<state>/orphans`` so it
  can come back).
* ``ext4_names`` (the default): like ext4 and XFS, the first fsync of a new file also makes
  its name (and its new parent directories' names) durable. ``ext4_names=False`` is the
  strict POSIX model in which only a directory fsync does (as Jepsen's LazyFS).

Everything present when the filesystem is mounted counts as synced. A crash is: the test
kills every process using the mount (``SIGKILL``), then :meth:`LossyMount.crash` drops what
was not synced, unmounts and mounts again on the rebuilt backing directory, so the kernel
keeps no cache of the lost state. Concurrency is simple on purpose: one lock around every
operation (the FUSE loop is multi-threaded, the model is not).

Run as a program it is the FUSE daemon: ``python lossyfs.py BACKING MOUNTPOINT STATE
[--strict]``; the control socket ``STATE/ctl.sock`` takes ``crash``, ``sync`` and ``stats``.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import shutil
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["LossyMount", "fuse_available"]

#: Mount options: no kernel caching of names or attributes (entries change under the mount
#: at a crash; the remount also clears them), no hidden files for open unlinked files.
MOUNT_OPTIONS: dict[str, Any] = {
    "entry_timeout": 0,
    "attr_timeout": 0,
    "negative_timeout": 0,
    "hard_remove": True,
    "fsname": "lossyfs",
}


def fuse_available() -> str | None:
    """None when a lossy mount can work here, else why not (for a skip message)."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian package fuse3; scripts/setup installs it)"
    try:
        import mfusepy  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


class _Model:
    """What a crash keeps: synced sizes and undo records of files, durable listings of
    directories. Files and directories are identified by a fid bound to the backing inode."""

    def __init__(self, backing: Path, state: Path, *, ext4_names: bool) -> None:
        self.backing = backing
        self.orphans = state / "orphans"
        self.rebuild_dir = state / "rebuild"
        self.ext4_names = ext4_names
        self.fid_of: dict[int, int] = {}
        self.kind: dict[int, str] = {}
        self.synced_size: dict[int, int] = {}
        self.undo: dict[int, list[tuple[int, bytes]]] = collections.defaultdict(list)
        self.listing: dict[int, dict[str, int]] = {}
        self.refs: collections.Counter[int] = collections.Counter()
        self.next_fid = 1
        self.stats: collections.Counter[str] = collections.Counter()
        self.seed()

    # -- identities -------------------------------------------------------------------------

    def seed(self) -> None:
        """Everything under the backing directory now is durable."""
        self.fid_of.clear()
        self.kind.clear()
        self.synced_size.clear()
        self.undo.clear()
        self.listing.clear()
        self.refs.clear()
        self.orphans.mkdir(parents=True, exist_ok=True)
        self.root = self.fid(os.lstat(self.backing))
        for top, dirs, files in os.walk(self.backing):
            here = self.fid(os.lstat(top))
            entries = {}
            for name in [*dirs, *files]:
                st = os.lstat(os.path.join(top, name))
                child = self.fid(st)
                entries[name] = child
                if not stat.S_ISDIR(st.st_mode):
                    self.synced_size[child] = st.st_size
            self._set_listing(here, entries)

    def fid(self, st: os.stat_result) -> int:
        fid = self.fid_of.get(st.st_ino)
        if fid is None:
            fid = self.next_fid
            self.next_fid += 1
            self.fid_of[st.st_ino] = fid
            self.kind[fid] = (
                "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
            )
        return fid

    def _set_listing(self, dir_fid: int, entries: dict[str, int]) -> None:
        for child in self.listing.get(dir_fid, {}).values():
            self.refs[child] -= 1
        self.listing[dir_fid] = entries
        for child in entries.values():
            self.refs[child] += 1

    def path(self, rel: str) -> str:
        return str(self.backing) + rel if rel != "/" else str(self.backing)

    # -- data -------------------------------------------------------------------------------

    def before_write(self, fd: int, offset: int, length: int) -> None:
        fid = self.fid(os.fstat(fd))
        synced = self.synced_size.get(fid, 0)
        if offset < synced:
            end = min(offset + length, synced)
            old = os.pread(fd, end - offset, offset)
            if old:
                self.undo[fid].append((offset, old))
        self.stats["writes"] += 1

    def before_truncate(self, fd: int, length: int) -> None:
        st = os.fstat(fd)
        fid = self.fid(st)
        end = min(st.st_size, self.synced_size.get(fid, 0))
        if length < end:
            self.undo[fid].append((length, os.pread(fd, end - length, length)))

    def synced(self, fd: int, rel: str | None) -> None:
        st = os.fstat(fd)
        fid = self.fid(st)
        new = fid not in self.synced_size
        self.synced_size[fid] = st.st_size
        self.undo.pop(fid, None)
        self.stats["fsync"] += 1
        if new and self.ext4_names and rel is not None:
            self._sync_new_name(rel, fid)

    def _sync_new_name(self, rel: str, fid: int) -> None:
        """ext4_sync_parent(): a new inode's entry, and its new parents' entries, go with it."""
        while rel not in ("", "/"):
            parent_rel, name = rel.rsplit("/", 1)
            parent_rel = parent_rel or "/"
            try:
                parent = self.fid(os.lstat(self.path(parent_rel)))
            except FileNotFoundError:
                return
            entries = dict(self.listing.get(parent, {}))
            fresh = parent not in self.listing
            entries[name] = fid
            self._set_listing(parent, entries)
            if not fresh or self.refs[parent] > 0:
                return
            rel, fid = parent_rel, parent

    def synced_dir(self, rel: str) -> None:
        here = self.path(rel)
        entries = {name: self.fid(os.lstat(os.path.join(here, name))) for name in os.listdir(here)}
        self._set_listing(self.fid(os.lstat(here)), entries)
        self.stats["fsyncdir"] += 1

    # -- names ------------------------------------------------------------------------------

    def remove(self, rel: str) -> None:
        """unlink/rmdir: a durable name's inode is parked so a crash can bring it back."""
        p = self.path(rel)
        st = os.lstat(p)
        fid = self.fid(st)
        is_dir = stat.S_ISDIR(st.st_mode)
        if is_dir and os.listdir(p):
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), p)
        if self.refs[fid] > 0 and (is_dir or st.st_nlink == 1):
            os.rename(p, self.orphans / str(fid))
        else:
            if is_dir:
                os.rmdir(p)
            else:
                os.unlink(p)
            if is_dir or st.st_nlink == 1:  # the inode number may be reused by a new file
                del self.fid_of[st.st_ino]

    def rename(self, old: str, new: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.path(new))
            if stat.S_ISDIR(st.st_mode) != stat.S_ISDIR(os.lstat(self.path(old)).st_mode):
                raise OSError(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.ENOTDIR, new)
            self.remove(new)
        os.rename(self.path(old), self.path(new))

    # -- the crash --------------------------------------------------------------------------

    def crash(self) -> dict[str, int]:
        """Drop everything not synced: rebuild the backing tree from the durable listings."""
        where: dict[int, str] = {}
        for base in (self.backing, self.orphans):
            for top, dirs, files in os.walk(base):
                for name in [*dirs, *files]:
                    p = os.path.join(top, name)
                    ino = os.lstat(p).st_ino
                    if ino in self.fid_of:
                        where.setdefault(self.fid_of[ino], p)
        dropped_bytes = 0
        for fid, p in where.items():
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                continue
            size = st.st_size
            with open(p, "r+b") as f:
                for offset, old in reversed(self.undo.get(fid, [])):
                    f.seek(offset)
                    f.write(old)
                keep = self.synced_size.get(fid, 0)
                dropped_bytes += max(0, size - keep)
                f.truncate(keep)
        if self.rebuild_dir.exists():
            shutil.rmtree(self.rebuild_dir)
        self.rebuild_dir.mkdir(parents=True)
        placed: dict[int, str] = {}
        kept = 0

        def build(dir_fid: int, into: str) -> None:
            nonlocal kept
            for name, child in self.listing.get(dir_fid, {}).items():
                target = os.path.join(into, name)
                if self.kind.get(child) == "d":
                    if child in placed:
                        continue
                    os.mkdir(target)
                    placed[child] = target
                    build(child, target)
                elif child in placed:
                    os.link(placed[child], target)
                elif child in where:
                    os.rename(where[child], target)
                    placed[child] = target
                    kept += 1
                else:  # a name whose file is gone for good: an empty file, like a torn one
                    Path(target).touch()
                    placed[child] = target

        build(self.root, str(self.rebuild_dir))
        lost = sum(1 for fid in where if self.kind[fid] != "d" and fid not in placed)
        for child in list(self.backing.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        for child in list(self.rebuild_dir.iterdir()):
            os.rename(child, self.backing / child.name)
        shutil.rmtree(self.orphans)
        result = {
            "files_kept": kept,
            "files_dropped": lost,
            "bytes_dropped": dropped_bytes,
            **self.stats,
        }
        self.stats.clear()
        self.seed()
        return result


def _operations(model: _Model) -> Any:
    import mfusepy

    lock = threading.RLock()
    dead = threading.Event()

    def op(fn: Any) -> Any:
        def wrapped(self: Any, *args: Any) -> Any:
            if dead.is_set():
                raise mfusepy.FuseOSError(errno.EIO)
            with lock:
                return fn(self, *args)

        wrapped.__name__ = fn.__name__
        return wrapped

    class LossyOps(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self) -> None:
            # Not ``lock``: that name is a FUSE operation (POSIX locks; left to the kernel).
            self.model_lock = lock
            self.dead = dead
            self.appending: set[int] = set()

        @op
        def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
            st = (
                os.fstat(fh) if fh is not None and path is None else os.lstat(model.path(str(path)))
            )
            keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
            out = {k: getattr(st, k) for k in keys}
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return out

        @op
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(model.path(path))]

        @op
        def readlink(self, path: str) -> str:
            return os.readlink(model.path(path))

        @op
        def access(self, path: str, amode: int) -> int:
            if not os.access(model.path(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        @op
        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(model.backing)
            keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files")
            return {k: getattr(sv, k) for k in (*keys, "f_ffree", "f_favail", "f_namemax")}

        @op
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(model.path(path), mode)
            model.fid(os.lstat(model.path(path)))
            return 0

        @op
        def rmdir(self, path: str) -> int:
            model.remove(path)
            return 0

        @op
        def unlink(self, path: str) -> int:
            model.remove(path)
            return 0

        @op
        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, model.path(target))
            st = os.lstat(model.path(target))
            model.synced_size[model.fid(st)] = st.st_size
            return 0

        @op
        def link(self, target: str, source: str) -> int:
            os.link(model.path(source), model.path(target))
            return 0

        @op
        def rename(self, old: str, new: str) -> int:
            model.rename(old, new)
            return 0

        @op
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(model.path(path), mode)
            return 0

        @op
        def chown(self, path: str, uid: int, gid: int) -> int:
            os.lchown(model.path(path), uid, gid)
            return 0

        @op
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(model.path(path))
            else:
                os.utime(model.path(path), ns=times, follow_symlinks=False)
            return 0

        @op
        def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
            if fh is None:
                fd = os.open(model.path(str(path)), os.O_RDWR)
                try:
                    model.before_truncate(fd, length)
                    os.ftruncate(fd, length)
                finally:
                    os.close(fd)
            else:
                model.before_truncate(fh, length)
                os.ftruncate(fh, length)
            return 0

        def _open(self, p: str, flags: int, mode: int = 0o644) -> int:
            # Always read-write (undo records read the bytes a write replaces); O_TRUNC comes
            # as a truncate, O_APPEND is kept so an append lands at the real end.
            keep = flags & (os.O_APPEND | os.O_CREAT | os.O_EXCL)
            fd = os.open(p, os.O_RDWR | keep, mode)
            model.fid(os.fstat(fd))
            if flags & os.O_APPEND:
                self.appending.add(fd)
            return fd

        @op
        def open(self, path: str, flags: int) -> int:
            return self._open(model.path(path), flags & ~(os.O_CREAT | os.O_EXCL))

        @op
        def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
            return self._open(model.path(path), flags | os.O_CREAT, mode)

        @op
        def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @op
        def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
            if fh in self.appending:
                offset = os.fstat(fh).st_size
            model.before_write(fh, offset, len(data))
            if fh in self.appending:
                return os.write(fh, data)
            return os.pwrite(fh, data, offset)

        @op
        def flush(self, path: str | None, fh: int) -> int:
            return 0

        @op
        def release(self, path: str | None, fh: int) -> int:
            self.appending.discard(fh)
            os.close(fh)
            return 0

        @op
        def fsync(self, path: str | None, datasync: int, fh: int) -> int:
            model.synced(fh, path)
            return 0

        @op
        def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
            if path is not None:
                model.synced_dir(path)
            return 0

    return LossyOps()


class _Control(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        ops = self.server.ops  # type: ignore[attr-defined]
        model: _Model = self.server.model  # type: ignore[attr-defined]
        command = self.rfile.readline().decode().strip()
        with ops.model_lock:
            if command == "crash":
                ops.dead.set()
                reply: dict[str, Any] = model.crash()
            elif command == "sync":  # sync(1): everything there now is durable
                model.seed()
                reply = {}
            else:
                reply = {"pending_files": len(model.undo), **model.stats}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


def _serve(backing: Path, mountpoint: Path, state: Path, *, ext4_names: bool) -> None:
    import mfusepy

    model = _Model(backing, state, ext4_names=ext4_names)
    ops = _operations(model)
    sock = state / "ctl.sock"
    sock.unlink(missing_ok=True)
    server = socketserver.ThreadingUnixStreamServer(str(sock), _Control)
    server.ops = ops  # type: ignore[attr-defined]
    server.model = model  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mfusepy.FUSE(ops, str(mountpoint), foreground=True, **MOUNT_OPTIONS)
    server.shutdown()


def _mounted(path: Path) -> bool:
    # Not os.path.ismount: it stats the mount point, which fails on a dead or crashed mount.
    target = os.path.realpath(path).encode()
    with open("/proc/self/mounts", "rb") as f:
        return any(line.split()[1] == target for line in f if len(line.split()) > 1)


class LossyMount:
    """The lossy filesystem mounted at ``mountpoint`` over ``backing`` (a context manager).

    ``crash()`` drops whatever was not synced and mounts again; kill every process that uses
    the mount first (a live writer would keep writing into the rebuilt tree).
    """

    def __init__(self, root: Path, *, ext4_names: bool = True) -> None:
        self.backing = root / "backing"
        self.mountpoint = root / "mnt"
        self.state = root / "lossyfs-state"
        self.ext4_names = ext4_names
        self.log_path = root / "lossyfs.log"
        self._proc: subprocess.Popen[bytes] | None = None
        for d in (self.backing, self.mountpoint, self.state):
            d.mkdir(parents=True, exist_ok=True)

    def mount(self) -> LossyMount:
        argv = [sys.executable, __file__, str(self.backing), str(self.mountpoint), str(self.state)]
        if not self.ext4_names:
            argv.append("--strict")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not _mounted(self.mountpoint):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lossyfs did not mount: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        while not (self.state / "ctl.sock").exists():
            time.sleep(0.02)
        return self

    def _ask(self, command: str) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.state / "ctl.sock"))
            s.sendall(command.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        reply: dict[str, Any] = json.loads(data)
        return reply

    def stats(self) -> dict[str, Any]:
        """Counts since the last mount: writes, fsync, fsyncdir, files with unsynced data."""
        return self._ask("stats")

    def sync_all(self) -> None:
        """Like ``sync(1)``: everything written so far is durable (a test's setup)."""
        self._ask("sync")

    def crash(self) -> dict[str, Any]:
        """Drop everything not synced, unmount, mount again; returns what was dropped."""
        dropped = self._ask("crash")
        self.unmount()
        self.mount()
        return dropped

    def unmount(self) -> None:
        if self._proc is None:
            return
        if _mounted(self.mountpoint):
            done = subprocess.run(
                ["fusermount3", "-u", str(self.mountpoint)], capture_output=True, check=False
            )
            if done.returncode != 0:  # a descriptor still open somewhere: detach lazily
                subprocess.run(["fusermount3", "-uz", str(self.mountpoint)], check=False)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if _mounted(self.mountpoint):  # the daemon died: drop its dead mount
            subprocess.run(["fusermount3", "-uz", str(self.mountpoint)], check=False)
        self._proc = None

    def __enter__(self) -> LossyMount:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    _serve(Path(args[0]), Path(args[1]), Path(args[2]), ext4_names="--strict" not in sys.argv)
