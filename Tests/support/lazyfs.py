#!/usr/bin/env python3
"""lazyfs: a FUSE file system for power-cut tests that forgets what was never synced.

It keeps every file in memory while mounted, and two versions of everything: what a
process sees now (the *current* state), and what would survive a power cut (the *durable*
state). `crash()` throws the current state away, writes the durable one to the backing
directory and unmounts; the next mount starts from that image, in a new mount, so no kernel
page cache can serve dropped data. The idea is Jepsen's LazyFS; this is a small Python
version for SQLite under a daemon.

What it models
--------------
* File data. Each write(2)/truncate(2) that reaches the file system is applied to the
  current content and appended to the file's log of unsynced changes. fsync(2) and
  fdatasync(2) of the file make that log durable (the durable content becomes what was
  written, in order). Nothing else makes data durable: not close(2), not time.
* Names, in the strict POSIX model. Creating, unlinking and renaming (files and
  directories) change the current tree at once and are appended to one ordered log. They
  become durable only when a directory is fsynced: fsync of directory D makes durable every
  namespace change up to and including the last one that touched D (a creation, unlink or
  rename in D, a rename into or out of D, or D's own mkdir/rmdir/rename), as a file system
  journal does; later changes stay volatile. A file created and fsynced in a directory that
  was never fsynced is gone after a crash; a file whose name is durable but whose data was
  never synced comes back empty (or with its last synced content).
* Modes. A file's or directory's mode becomes durable with a full fsync of it (fdatasync
  does not carry it); a new inode's creation mode is durable with its name.
* Crash (`crash()`): every unsynced change is dropped; with `tear=True` each file instead
  keeps a random prefix of its unsynced writes, the last kept write cut at a random byte or
  512-byte-sector boundary (a torn write). Names are never torn: a crash keeps exactly the
  durable namespace. Inodes not reachable from the durable tree are gone.
* Freeze (`freeze()`): every later operation blocks, unapplied, until `crash()` (it then
  fails with EIO and is never applied) or `thaw()` (it then runs). Operations that had
  already started finish first. A process blocked in a FUSE request cannot die of SIGKILL
  until the request is answered, so the pattern is: freeze, kill -9, crash (which answers
  the blocked requests with EIO, so the killed process exits), then mount again.
* A failed sync (`fail_next_sync(suffix)`): the next fsync/fdatasync of a regular file
  whose path ends with `suffix` returns EIO and, as Linux does, the file's unsynced changes
  are then never made durable: they stay readable in this mount (like pages Linux marked
  clean after the error) and are lost at a crash, even if a later fsync succeeds.
* A full disk (`set_capacity(n)`): a write, truncate or fallocate that would grow the sum
  of the current sizes of all live files above `n` bytes fails with ENOSPC (nothing of it
  applied). statfs reports the capacity.
* Clean unmount (`unmount()`): like umount(8) on a real file system, which syncs: the
  whole current state (data, names, modes) is written to the backing directory. Any other
  end of the file-system process (crash(), stdin closed, a signal, fusermount run by
  someone else) keeps the durable state only.

What it does not model
----------------------
* The page cache in between: the file system only sees what the kernel sends it. The mount
  does not enable FUSE's writeback cache, so each write(2) reaches it before write(2)
  returns; stores into a shared writable mmap reach it only when the kernel writes the
  dirty pages back (msync(2), munmap(2), fsync(2), close or the kernel's own writeback),
  and then count as ordinary unsynced writes. mmap is allowed (no direct_io), so SQLite's
  WAL index (-shm) works.
* Reordering inside a file's unsynced writes beyond a prefix (a real disk may persist a
  later block and not an earlier one); metadata such as sizes riding along with data
  (ext4's data=ordered); fsync of a file making its name durable (ext4 and xfs do that in
  practice, POSIX does not promise it); timestamps (kept, but not versioned); hard links,
  symlinks, device nodes, xattrs (not supported: EPERM/ENOSYS); fstat(2) of an open
  file that was unlinked (ESTALE: libfuse's path-based API has no name for it); POSIX and BSD locks are
  left to the kernel (local to this machine, which is all SQLite in one machine needs).
* The backing directory is read at mount and written only at crash/unmount; it must not be
  inside the mount point. Everything lives in memory while mounted.

Use
---
As a program: `python lazyfs.py BACKING_DIR MOUNTPOINT` mounts in the foreground, prints
`{"event": "ready"}` on stdout once the kernel connected, then reads one command per line
on stdin and answers each with one JSON line on stdout. A command is a JSON object
(`{"op": "crash", "tear": true, "seed": 7}`) or words (`crash tear=1 seed=7`). Ops:
freeze, thaw, crash [tear seed], unmount (save everything, refuse further operations),
sync (make everything current durable now), fail_next_sync suffix, capacity bytes|none,
stats. After crash or unmount, run `fusermount3 -u MOUNTPOINT`; the process exits when the
kernel lets go of the mount. From Python, use `LazyFS` below, which does all of that.
"""

import errno
import functools
import json
import os
import random
import select
import shutil
import stat
import subprocess
import sys
import threading
import time

SECTOR = 512
BLOCK = 4096


# ---------------------------------------------------------------------------------------
# The controller: what tests use.
# ---------------------------------------------------------------------------------------

def is_mounted(path):
    """True when `path` is a mount point now (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4].encode().decode("unicode_escape") == path:
                    return True
    except OSError:
        pass
    return False


def _fusermount(*args):
    return subprocess.run(["fusermount3", *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)


class LazyFSError(RuntimeError):
    pass


class LazyFS:
    """Drives one lazyfs mount of `backing_dir` (a plain directory: the durable image) at
    `mountpoint`, in a child process. Both directories are made if missing.

    mount()                      start the file system on the image in backing_dir; returns
                                 once the mount serves requests.
    freeze()                     every later operation blocks, unapplied.
    thaw()                       lets blocked operations run (not needed for crash()).
    crash(tear=False, seed=None) drop every unsynced change (with tear: keep a random prefix
                                 of each file's unsynced writes, the last kept one torn),
                                 fail blocked operations with EIO, save the durable image to
                                 backing_dir and unmount. Returns a report (see _crash).
    unmount()                    clean unmount: the current state, synced or not, is saved
                                 (as umount(8) syncs). Operations after it fail with EIO.
    sync()                       make the whole current state durable now, as sync(2).
    fail_next_sync(path_suffix)  the next fsync/fdatasync of a file whose path (from the
                                 mount's root, e.g. "/state.db-wal") ends with path_suffix
                                 fails with EIO, and that file's unsynced changes are never
                                 made durable.
    set_capacity(nbytes)         writes that would grow the live files' total size above
                                 nbytes fail with ENOSPC; None lifts the limit.
    stats()                      {"fsync": {path: n}, "fdatasync": {path: n}, "fsyncdir":
                                 {path: n}, "writes": {path: n}, "sync_errors": n,
                                 "used_bytes": n, "capacity": n|None, "frozen": bool,
                                 "unsynced_ops": {path: n}, "namespace_unsynced": n}
    syncs(path_suffix)           fsync + fdatasync count of the files whose path ends with it.
    close()                      whatever state it is in, leave nothing mounted: crash() if
                                 frozen, else unmount(); safe to call twice.
    A `with LazyFS(...) as fs:` block mounts and closes.
    """

    def __init__(self, backing_dir, mountpoint, python=None, timeout=15.0):
        self.backing_dir = os.path.abspath(str(backing_dir))
        self.mountpoint = os.path.abspath(str(mountpoint))
        self.python = python or sys.executable
        self.timeout = timeout
        self.proc = None
        self.frozen = False
        self._buf = b""

    # lifecycle ------------------------------------------------------------------------

    def mount(self):
        if self.proc is not None:
            raise LazyFSError("already mounted")
        os.makedirs(self.backing_dir, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        if is_mounted(self.mountpoint):
            raise LazyFSError(f"{self.mountpoint} is already a mount point")
        self._buf = b""
        self.frozen = False
        self.proc = subprocess.Popen([self.python, os.path.abspath(__file__), self.backing_dir, self.mountpoint],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        try:
            msg = self._read(self.timeout)
            if msg.get("event") != "ready":
                raise LazyFSError(f"lazyfs did not start: {msg}")
        except BaseException:
            self._stop_process()
            raise
        return self

    def freeze(self):
        self._call({"op": "freeze"})
        self.frozen = True

    def thaw(self):
        self._call({"op": "thaw"})
        self.frozen = False

    def crash(self, tear=False, seed=None):
        report = self._call({"op": "crash", "tear": bool(tear), "seed": seed})
        self.frozen = False
        self._stop_process()
        return report

    def unmount(self):
        self._call({"op": "unmount"})
        self.frozen = False
        self._stop_process()

    def sync(self):
        self._call({"op": "sync"})

    def fail_next_sync(self, path_suffix):
        self._call({"op": "fail_next_sync", "suffix": path_suffix})

    def set_capacity(self, nbytes):
        self._call({"op": "capacity", "bytes": nbytes})

    def stats(self):
        return self._call({"op": "stats"})

    def syncs(self, path_suffix):
        s = self.stats()
        return sum(n for kind in ("fsync", "fdatasync") for p, n in s[kind].items() if p.endswith(path_suffix))

    @property
    def mounted(self):
        return self.proc is not None

    def close(self):
        if self.proc is None:
            if is_mounted(self.mountpoint):
                _fusermount("-u", "-z", self.mountpoint)
            return
        try:
            if self.frozen:
                self.crash()
            else:
                self.unmount()
        except Exception:
            self._stop_process()
            raise

    def __enter__(self):
        if self.proc is None:
            self.mount()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # plumbing -------------------------------------------------------------------------

    def _call(self, cmd):
        if self.proc is None:
            raise LazyFSError("not mounted")
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise LazyFSError(f"lazyfs exited ({self.proc.poll()})") from None
        msg = self._read(self.timeout)
        if "error" in msg:
            raise LazyFSError(msg["error"])
        return msg

    def _read(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                raise LazyFSError(f"lazyfs did not answer within {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait(timeout=5)
                raise LazyFSError(f"lazyfs exited with {code}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _stop_process(self, busy_timeout=5.0):
        """Unmounts (waiting up to busy_timeout for processes that still hold files on the
        mount, then detaching lazily) and waits for the file-system process to end."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        deadline = time.monotonic() + busy_timeout
        while is_mounted(self.mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                _fusermount("-u", "-z", self.mountpoint)
                break
            if _fusermount("-u", self.mountpoint).returncode == 0:
                break
            time.sleep(0.02)
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=busy_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if is_mounted(self.mountpoint):
            _fusermount("-u", "-z", self.mountpoint)


# ---------------------------------------------------------------------------------------
# The file system: runs in the child process.
# ---------------------------------------------------------------------------------------

class Inode:
    __slots__ = ("ino", "isdir", "mode", "dmode", "uid", "gid", "atime", "mtime", "ctime",
                 "data", "ddata", "log", "entries", "dentries", "nlink", "opens")

    def __init__(self, ino, mode, uid=0, gid=0, now=None):
        self.ino = ino
        self.isdir = stat.S_ISDIR(mode)
        self.mode = mode
        self.dmode = mode
        self.uid, self.gid = uid, gid
        now = time.time_ns() if now is None else now
        self.atime = self.mtime = self.ctime = now
        self.nlink = 0  # names in the current tree (0 or 1: no hard links)
        self.opens = 0
        if self.isdir:
            self.entries, self.dentries = {}, {}
            self.data = self.ddata = self.log = None
        else:
            self.data, self.ddata, self.log = bytearray(), bytearray(), []
            self.entries = self.dentries = None


def _apply(buf, op):
    """Applies one logged change to a bytearray: ("w", offset, bytes) or ("t", length)."""
    if op[0] == "w":
        _, off, data = op
        if off > len(buf):
            buf.extend(bytes(off - len(buf)))
        buf[off:off + len(data)] = data
    else:
        n = op[1]
        if n < len(buf):
            del buf[n:]
        else:
            buf.extend(bytes(n - len(buf)))


def _serve(backing, mountpoint, out):
    import mfusepy as fuse
    from mfusepy import FuseOSError

    def blocking(fn):
        """Every operation waits while frozen and fails with EIO after crash/unmount."""
        @functools.wraps(fn)
        def wrapper(self, *args):
            with self.cond:
                while self.frozen and not self.done:
                    self.cond.wait()
                if self.done:
                    raise FuseOSError(errno.EIO)
                return fn(self, *args)
        return wrapper

    class LazyOps(fuse.Operations):
        use_ns = True

        def __init__(self):
            self.cond = threading.Condition(threading.Lock())
            self.frozen = False
            self.done = False  # crashed or cleanly unmounted: the image is saved
            self.next_ino = 2
            self.inodes = {}
            self.root = None
            self.nslog = []  # (touched inodes, op) in order, not yet durable
            self.fhs = {}
            self.next_fh = 1
            self.capacity = None
            self.used = 0
            self.fail_rules = []
            self.counts = {"fsync": {}, "fdatasync": {}, "fsyncdir": {}, "writes": {}}
            self.sync_errors = 0
            self._load()

        # image --------------------------------------------------------------------

        def _new_inode(self, mode, uid=0, gid=0, now=None):
            ino = Inode(self.next_ino, mode, uid, gid, now)
            self.next_ino += 1
            self.inodes[ino.ino] = ino
            return ino

        def _load(self):
            st = os.stat(backing)
            self.root = Inode(1, stat.S_IFDIR | stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns)
            self.root.nlink = 1
            self.inodes[1] = self.root

            def walk(path, node):
                with os.scandir(path) as it:
                    for e in it:
                        st = e.stat(follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            child = self._new_inode(stat.S_IFDIR | stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                                                    st.st_mtime_ns)
                            walk(e.path, child)
                        elif stat.S_ISREG(st.st_mode):
                            child = self._new_inode(stat.S_IFREG | stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                                                    st.st_mtime_ns)
                            with open(e.path, "rb") as f:
                                child.data = bytearray(f.read())
                            child.ddata = bytearray(child.data)
                            self.used += len(child.data)
                        else:
                            continue  # symlinks, fifos...: not modelled
                        child.nlink = 1
                        node.entries[e.name] = child
                        node.dentries[e.name] = child
            walk(backing, self.root)

        def _paths(self, durable):
            """{inode: path} over the current or durable tree."""
            out = {self.root: "/"}
            stack = [(self.root, "")]
            while stack:
                node, prefix = stack.pop()
                for name, child in (node.dentries if durable else node.entries).items():
                    out[child] = prefix + "/" + name
                    if child.isdir:
                        stack.append((child, prefix + "/" + name))
            return out

        def _save(self, durable, tear=False, seed=None):
            """Writes the durable (or current) tree to the backing directory, replacing it."""
            rng = random.Random(seed)
            report = {"files": {}, "namespace_ops_dropped": len(self.nslog) if durable else 0}
            tmp = backing.rstrip("/") + ".lazyfs-new"
            old = backing.rstrip("/") + ".lazyfs-old"
            for p in (tmp, old):
                if os.path.lexists(p):
                    shutil.rmtree(p)
            os.mkdir(tmp)
            names = self._paths(durable=False)
            dirs = []

            def walk(node, path, rel):
                for name, child in sorted((node.dentries if durable else node.entries).items()):
                    p = os.path.join(path, name)
                    r = rel + "/" + name
                    mode = child.dmode if durable else child.mode
                    if child.isdir:
                        os.mkdir(p, 0o700)
                        walk(child, p, r)
                        dirs.append((p, child, mode))
                        continue
                    if durable:
                        content, kept = self._torn(child, rng) if tear else (child.ddata, 0)
                        if child.log:
                            report["files"][r] = {"unsynced_ops": len(child.log), "kept_ops": kept,
                                                  "now_at": names.get(child, "(unlinked)")}
                    else:
                        content = child.data
                    with open(p, "wb") as f:
                        f.write(content)
                    os.chmod(p, stat.S_IMODE(mode))
                    self._owner(p, child)

            walk(self.root, tmp, "")
            # Files with unsynced data that are not in the durable tree at all.
            if durable:
                reachable = self._paths(durable=True)
                for node, path in names.items():
                    if not node.isdir and node not in reachable and (node.log or node.data):
                        report["files"].setdefault(path, {"unsynced_ops": len(node.log), "kept_ops": 0,
                                                          "now_at": path, "name_lost": True})
            for p, node, mode in dirs:  # deepest first: a 0500 dir was filled before
                os.chmod(p, stat.S_IMODE(mode))
                self._owner(p, node)
            os.chmod(tmp, stat.S_IMODE(self.root.dmode if durable else self.root.mode))
            os.rename(backing, old)
            os.rename(tmp, backing)
            shutil.rmtree(old)
            return report

        @staticmethod
        def _owner(path, node):
            if os.geteuid() == 0:
                os.chown(path, node.uid, node.gid)
            os.utime(path, ns=(node.atime, node.mtime))

        @staticmethod
        def _torn(node, rng):
            """The durable content plus a random prefix of the unsynced log, the last kept
            write cut at a random byte or sector boundary; and how many ops were kept."""
            buf = bytearray(node.ddata)
            k = rng.randint(0, len(node.log))
            for i, op in enumerate(node.log[:k]):
                if i == k - 1 and op[0] == "w":
                    _, off, data = op
                    n = len(data)
                    if rng.random() < 0.5:
                        cut = rng.randint(0, n)
                    else:
                        cuts = [0, n] + list(range((-off) % SECTOR, n, SECTOR))
                        cut = rng.choice(cuts)
                    op = ("w", off, data[:cut])
                _apply(buf, op)
            return buf, k

        # control (called from the control thread) ---------------------------------------

        def control(self, cmd):
            op = cmd.get("op")
            with self.cond:
                if op == "freeze":
                    self.frozen = True
                    return {"ok": True}
                if op == "thaw":
                    self.frozen = False
                    self.cond.notify_all()
                    return {"ok": True}
                if op == "stats":
                    return self._stats()
                if op == "fail_next_sync":
                    self.fail_rules.append(str(cmd["suffix"]))
                    return {"ok": True}
                if op == "capacity":
                    b = cmd.get("bytes")
                    self.capacity = None if b in (None, "none", "None") else int(b)
                    return {"ok": True, "used_bytes": self.used}
                if self.done:
                    return {"error": "the file system was already crashed or unmounted"}
                if op == "sync":
                    self._sync_all()
                    return {"ok": True}
                if op == "crash":
                    tear = cmd.get("tear") in (True, 1, "1", "true", "yes")
                    seed = cmd.get("seed")
                    seed = None if seed in (None, "none") else int(seed)
                    self.done = True
                    self.cond.notify_all()  # blocked operations wake up and fail with EIO
                    return dict(self._save(durable=True, tear=tear, seed=seed), ok=True)
                if op == "unmount":
                    self.done = True
                    self.cond.notify_all()
                    self._save(durable=False)
                    return {"ok": True}
            return {"error": f"unknown command {cmd!r}"}

        def end_without_command(self):
            """The FUSE loop ended (or stdin closed) without crash/unmount: keep what is
            durable, as after a power cut."""
            with self.cond:
                if not self.done:
                    self.done = True
                    self.cond.notify_all()
                    self._save(durable=True)

        def _sync_all(self):
            for node in self.inodes.values():
                node.dmode = node.mode
                if node.isdir:
                    node.dentries = dict(node.entries)
                else:
                    node.ddata = bytearray(node.data)
                    node.log = []
            self.nslog = []

        def _stats(self):
            names = self._paths(durable=False)
            unsynced = {names.get(n, "(unlinked)"): len(n.log) for n in self.inodes.values()
                        if not n.isdir and n.log}
            return {"fsync": dict(self.counts["fsync"]), "fdatasync": dict(self.counts["fdatasync"]),
                    "fsyncdir": dict(self.counts["fsyncdir"]), "writes": dict(self.counts["writes"]),
                    "sync_errors": self.sync_errors, "used_bytes": self.used, "capacity": self.capacity,
                    "frozen": self.frozen, "unsynced_ops": unsynced, "namespace_unsynced": len(self.nslog)}

        # helpers ------------------------------------------------------------------

        def _lookup(self, path):
            node = self.root
            for part in path.split("/"):
                if not part:
                    continue
                if not node.isdir:
                    raise FuseOSError(errno.ENOTDIR)
                node = node.entries.get(part)
                if node is None:
                    raise FuseOSError(errno.ENOENT)
            return node

        def _node(self, path, fh):
            if fh is not None and fh in self.fhs:
                return self.fhs[fh]
            if path is None:
                raise FuseOSError(errno.EBADF)
            return self._lookup(path)

        def _parent(self, path):
            head, _, name = path.rstrip("/").rpartition("/")
            if not name or name in (".", ".."):
                raise FuseOSError(errno.EINVAL)
            if len(name.encode()) > 255:
                raise FuseOSError(errno.ENAMETOOLONG)
            parent = self._lookup(head or "/")
            if not parent.isdir:
                raise FuseOSError(errno.ENOTDIR)
            return parent, name

        def _count(self, kind, path, node=None):
            if path is None:
                path = self._paths(durable=False).get(node, "(unlinked)")
            c = self.counts[kind]
            c[path] = c.get(path, 0) + 1
            return path

        def _grow(self, node, new_size):
            delta = new_size - len(node.data)
            if delta > 0 and self.capacity is not None and self.used + delta > self.capacity:
                raise FuseOSError(errno.ENOSPC)

        def _resized(self, node, old_size):
            if self._live(node):
                self.used += len(node.data) - old_size

        @staticmethod
        def _live(node):
            return node.nlink > 0 or node.opens > 0

        def _unlinked(self, node):
            """node lost its current name."""
            node.nlink = 0
            node.ctime = time.time_ns()
            if not node.isdir and node.opens == 0:
                self.used -= len(node.data)

        def _link(self, parent, name, node, touched):
            parent.entries[name] = node
            node.nlink = 1
            self.nslog.append((touched, ("link", parent, name, node)))
            parent.mtime = parent.ctime = time.time_ns()

        def _touch(self, node):
            node.mtime = node.ctime = time.time_ns()

        def _truncate(self, node, length):
            if node.isdir:
                raise FuseOSError(errno.EISDIR)
            if length < 0:
                raise FuseOSError(errno.EINVAL)
            self._grow(node, length)
            old = len(node.data)
            op = ("t", length)
            _apply(node.data, op)
            node.log.append(op)
            self._resized(node, old)
            self._touch(node)

        # file-system operations -----------------------------------------------------------

        def init(self, path):
            out({"event": "ready"})

        @blocking
        def getattr(self, path, fh=None):
            node = self._node(path, fh)
            size = BLOCK if node.isdir else len(node.data)
            if node.isdir:
                nlink = 2 + sum(1 for c in node.entries.values() if c.isdir)
            else:
                nlink = 1 if node.nlink else 0
            return {"st_mode": node.mode, "st_ino": node.ino, "st_nlink": nlink, "st_uid": node.uid,
                    "st_gid": node.gid, "st_size": size, "st_blocks": (size + 511) // 512, "st_blksize": BLOCK,
                    "st_atime": node.atime, "st_mtime": node.mtime, "st_ctime": node.ctime}

        @blocking
        def access(self, path, amode):
            self._lookup(path)
            return 0

        @blocking
        def statfs(self, path):
            cap = self.capacity if self.capacity is not None else 1 << 40
            free = max(0, cap - self.used)
            return {"f_bsize": BLOCK, "f_frsize": BLOCK, "f_blocks": cap // BLOCK, "f_bfree": free // BLOCK,
                    "f_bavail": free // BLOCK, "f_files": 1 << 20, "f_ffree": (1 << 20) - len(self.inodes),
                    "f_favail": (1 << 20) - len(self.inodes), "f_namemax": 255}

        @blocking
        def readdir(self, path, fh):
            node = self._node(path, fh)
            if not node.isdir:
                raise FuseOSError(errno.ENOTDIR)
            # With a stat of each (mode and inode number): a bare name goes to the kernel
            # with inode 0 under use_ino, and readdir(3) skips such entries.
            parent = self._lookup(os.path.dirname(path.rstrip("/")) or "/") if path != "/" else node
            return [(".", {"st_mode": node.mode, "st_ino": node.ino}, 0),
                    ("..", {"st_mode": parent.mode, "st_ino": parent.ino}, 0)] + \
                   [(name, {"st_mode": child.mode, "st_ino": child.ino}, 0) for name, child in node.entries.items()]

        @blocking
        def opendir(self, path):
            node = self._lookup(path)
            if not node.isdir:
                raise FuseOSError(errno.ENOTDIR)
            fh = self.next_fh
            self.next_fh += 1
            self.fhs[fh] = node
            node.opens += 1
            return fh

        @blocking
        def releasedir(self, path, fh):
            node = self.fhs.pop(fh, None)
            if node is not None:
                node.opens -= 1
            return 0

        @blocking
        def mkdir(self, path, mode):
            parent, name = self._parent(path)
            if name in parent.entries:
                raise FuseOSError(errno.EEXIST)
            uid, gid, _ = fuse.fuse_get_context()
            node = self._new_inode(stat.S_IFDIR | stat.S_IMODE(mode), uid, gid)
            self._link(parent, name, node, (parent, node))
            return 0

        @blocking
        def rmdir(self, path):
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            if not node.isdir:
                raise FuseOSError(errno.ENOTDIR)
            if node.entries:
                raise FuseOSError(errno.ENOTEMPTY)
            del parent.entries[name]
            self._unlinked(node)
            self.nslog.append(((parent, node), ("unlink", parent, name)))
            self._touch(parent)
            return 0

        def _create(self, path, mode):
            parent, name = self._parent(path)
            if name in parent.entries:
                raise FuseOSError(errno.EEXIST)
            uid, gid, _ = fuse.fuse_get_context()
            node = self._new_inode(stat.S_IFREG | stat.S_IMODE(mode), uid, gid)
            self._link(parent, name, node, (parent,))
            return node

        @blocking
        def mknod(self, path, mode, dev):
            if not stat.S_ISREG(mode):
                raise FuseOSError(errno.EPERM)
            self._create(path, mode)
            return 0

        def _open_fh(self, node):
            fh = self.next_fh
            self.next_fh += 1
            self.fhs[fh] = node
            node.opens += 1
            return fh

        @blocking
        def create(self, path, mode, flags):
            try:
                node = self._lookup(path)
            except FuseOSError as e:
                if e.errno != errno.ENOENT:
                    raise
                node = self._create(path, mode)
            else:
                if flags & os.O_EXCL:
                    raise FuseOSError(errno.EEXIST)
                if node.isdir:
                    raise FuseOSError(errno.EISDIR)
                if flags & os.O_TRUNC and node.data:
                    self._truncate(node, 0)
            return self._open_fh(node)

        @blocking
        def open(self, path, flags):
            node = self._lookup(path)
            if node.isdir and flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EISDIR)
            if flags & os.O_TRUNC and not node.isdir and node.data and flags & (os.O_WRONLY | os.O_RDWR):
                self._truncate(node, 0)
            return self._open_fh(node)

        @blocking
        def release(self, path, fh):
            node = self.fhs.pop(fh, None)
            if node is not None:
                node.opens -= 1
                if not node.isdir and node.opens == 0 and node.nlink == 0:
                    self.used -= len(node.data)
            return 0

        @blocking
        def flush(self, path, fh):
            return 0

        @blocking
        def read(self, path, size, offset, fh):
            node = self._node(path, fh)
            if node.isdir:
                raise FuseOSError(errno.EISDIR)
            node.atime = time.time_ns()
            return bytes(node.data[offset:offset + size])

        @blocking
        def write(self, path, data, offset, fh):
            node = self._node(path, fh)
            if node.isdir:
                raise FuseOSError(errno.EISDIR)
            end = offset + len(data)
            self._grow(node, end)
            old = len(node.data)
            op = ("w", offset, data)
            _apply(node.data, op)
            node.log.append(op)
            self._resized(node, old)
            self._touch(node)
            self._count("writes", path, node)
            return len(data)

        @blocking
        def truncate(self, path, length, fh=None):
            self._truncate(self._node(path, fh), length)
            return 0

        @blocking
        def fallocate(self, path, mode, offset, size, fh):
            if mode != 0:
                raise FuseOSError(errno.EOPNOTSUPP)
            node = self._node(path, fh)
            if offset + size > len(node.data):
                self._truncate(node, offset + size)
            return 0

        @blocking
        def fsync(self, path, datasync, fh):
            node = self._node(path, fh)
            path = self._count("fdatasync" if datasync else "fsync", path, node)
            for i, suffix in enumerate(self.fail_rules):
                if path.endswith(suffix):
                    del self.fail_rules[i]
                    self.sync_errors += 1
                    if not node.isdir:
                        node.log = []  # never made durable, as Linux after a writeback error
                    raise FuseOSError(errno.EIO)
            if node.isdir:
                return self._fsyncdir(node)
            for op in node.log:
                _apply(node.ddata, op)
            node.log = []
            if not datasync:
                node.dmode = node.mode
            return 0

        @blocking
        def fsyncdir(self, path, datasync, fh):
            node = self._node(path, fh)
            self._count("fsyncdir", path, node)
            return self._fsyncdir(node)

        def _fsyncdir(self, node):
            last = None
            for i in range(len(self.nslog) - 1, -1, -1):
                if node in self.nslog[i][0]:
                    last = i
                    break
            if last is not None:
                for _, op in self.nslog[:last + 1]:
                    if op[0] == "link":
                        _, parent, name, child = op
                        parent.dentries[name] = child
                    elif op[0] == "unlink":
                        _, parent, name = op
                        parent.dentries.pop(name, None)
                    else:
                        _, sp, sn, dp, dn, child = op
                        sp.dentries.pop(sn, None)
                        dp.dentries[dn] = child
                del self.nslog[:last + 1]
            node.dmode = node.mode
            return 0

        @blocking
        def unlink(self, path):
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            if node.isdir:
                raise FuseOSError(errno.EISDIR)
            del parent.entries[name]
            self._unlinked(node)
            self.nslog.append(((parent,), ("unlink", parent, name)))
            self._touch(parent)
            return 0

        @blocking
        def rename(self, old, new, flags=0):
            RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
            if flags & RENAME_EXCHANGE or flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE):
                raise FuseOSError(errno.EINVAL)
            sp, sn = self._parent(old)
            dp, dn = self._parent(new)
            node = sp.entries.get(sn)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            if sp is dp and sn == dn:
                return 0
            if node.isdir:  # not into itself
                p = new.rstrip("/")
                o = old.rstrip("/")
                if p.startswith(o + "/"):
                    raise FuseOSError(errno.EINVAL)
            victim = dp.entries.get(dn)
            if victim is not None:
                if flags & RENAME_NOREPLACE:
                    raise FuseOSError(errno.EEXIST)
                if victim.isdir and not node.isdir:
                    raise FuseOSError(errno.EISDIR)
                if node.isdir and not victim.isdir:
                    raise FuseOSError(errno.ENOTDIR)
                if victim.isdir and victim.entries:
                    raise FuseOSError(errno.ENOTEMPTY)
            del sp.entries[sn]
            dp.entries[dn] = node
            if victim is not None:
                self._unlinked(victim)
            touched = (sp, dp, node) if node.isdir else (sp, dp)
            self.nslog.append((touched, ("rename", sp, sn, dp, dn, node)))
            self._touch(sp)
            self._touch(dp)
            node.ctime = time.time_ns()
            return 0

        @blocking
        def chmod(self, path, mode, fh=None):
            node = self._node(path, fh)
            node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(mode)
            node.ctime = time.time_ns()
            return 0

        @blocking
        def chown(self, path, uid, gid):
            node = self._lookup(path)
            if uid != -1 and uid != 0xFFFFFFFF:
                node.uid = uid
            if gid != -1 and gid != 0xFFFFFFFF:
                node.gid = gid
            node.ctime = time.time_ns()
            return 0

        @blocking
        def utimens(self, path, times=None):
            if path is None:
                return 0
            node = self._lookup(path)
            now = time.time_ns()
            node.atime, node.mtime = times if times else (now, now)
            node.ctime = now
            return 0

    class LazyFUSE(fuse.FUSE):
        """mfusepy's FUSE, passing the file handle on to truncate/chmod (ftruncate and
        fchmod of an unlinked file have no path) and rename's flags."""

        def truncate_fuse_3(self, path, length, fip):
            fh = fip.contents.fh if fip else None
            return self.operations.truncate(None if path is None else path.decode(self.encoding, self.errors),
                                            length, fh)

        def chmod_fuse_3(self, path, mode, fip):
            fh = fip.contents.fh if fip else None
            return self.operations.chmod(None if path is None else path.decode(self.encoding, self.errors),
                                         mode, fh)

        def rename_fuse_3(self, old, new, flags):
            return self.operations.rename(old.decode(self.encoding, self.errors),
                                          new.decode(self.encoding, self.errors), flags)

    ops = LazyOps()

    def control_loop():
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                if line.startswith("{"):
                    cmd = json.loads(line)
                else:
                    words = line.split()
                    cmd = {"op": words[0]}
                    for w in words[1:]:
                        k, _, v = w.partition("=")
                        cmd[k if v else ("suffix" if cmd["op"] == "fail_next_sync" else "bytes")] = v or k
                reply = ops.control(cmd)
            except Exception as e:  # a bad command must not take the mount down
                reply = {"error": f"{type(e).__name__}: {e}"}
            out(reply)
        # The controller went away: keep the durable state and let go of the mount.
        ops.end_without_command()
        _fusermount("-u", "-z", mountpoint)

    threading.Thread(target=control_loop, daemon=True).start()
    LazyFUSE(ops, mountpoint, foreground=True, nothreads=False, fsname="lazyfs", subtype="lazyfs",
             default_permissions=True, use_ino=True, hard_remove=True,
             attr_timeout=0, entry_timeout=0, negative_timeout=0)
    ops.end_without_command()


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} BACKING_DIR MOUNTPOINT", file=sys.stderr)
        return 2
    backing = os.path.abspath(argv[1])
    mountpoint = os.path.abspath(argv[2])
    # Answers go to the original stdout; anything libfuse or Python prints goes to stderr.
    ctl = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    lock = threading.Lock()

    def out(msg):
        with lock:
            ctl.write(json.dumps(msg) + "\n")
            ctl.flush()

    _serve(backing, mountpoint, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
