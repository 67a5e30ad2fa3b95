"""The power-cut file system (Tests/support/lazyfs.py) keeps what was synced and drops the
rest: its semantics checked with plain file operations and with SQLite, no tabd.

Each test mounts its own lazyfs in tmp_path; the fixture unmounts (or crashes) it even when
the test fails, and checks that nothing is left mounted.
"""
import errno
import mmap
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from lazyfs import LazyFS, is_mounted  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this machine")


@pytest.fixture
def lfs(tmp_path):
    fs = LazyFS(tmp_path / "backing", tmp_path / "mnt")
    fs.mount()
    try:
        yield fs
    finally:
        fs.close()
        assert not is_mounted(fs.mountpoint)


def mnt(fs, *parts):
    return os.path.join(fs.mountpoint, *parts)


def write_file(path, data, sync=True, mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def durable_file(fs, name, data):
    """A file whose data and name are durable."""
    write_file(mnt(fs, name), data)
    fsync_dir(os.path.dirname(mnt(fs, name)))


def wait_until_used(fs, nbytes, timeout=5):
    """Waits, bounded, until the live files take `nbytes` (an unlinked file's room comes
    back with its last handle's release, which FUSE sends after close(2) returned)."""
    deadline = time.monotonic() + timeout
    while fs.stats()["used_bytes"] != nbytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fs.stats()["used_bytes"] == nbytes


def torn_crash(fs, base, writes, seed):
    """File f durable with `base`, then `writes` (offset, data) unsynced, then a torn crash
    with `seed` and a remount: the crash's report."""
    durable_file(fs, "f", base)
    fd = os.open(mnt(fs, "f"), os.O_WRONLY)
    for off, data in writes:
        os.pwrite(fd, data, off)
    os.close(fd)
    return crash_and_remount(fs, tear=True, seed=seed)


def crash_and_remount(fs, **kw):
    report = fs.crash(**kw)
    assert not is_mounted(fs.mountpoint)
    fs.mount()
    return report


# --- file data -------------------------------------------------------------------------

def test_unsynced_write_is_lost_after_crash(lfs):
    durable_file(lfs, "f", b"synced")
    fd = os.open(mnt(lfs, "f"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b" and not synced")
    os.close(fd)
    assert read(mnt(lfs, "f")) == b"synced and not synced"  # the running mount sees it
    report = crash_and_remount(lfs)
    assert report["files"]["/f"]["unsynced_ops"] == 1
    assert read(mnt(lfs, "f")) == b"synced"


def test_fsynced_write_is_kept(lfs):
    durable_file(lfs, "f", b"one")
    fd = os.open(mnt(lfs, "f"), os.O_WRONLY)
    os.pwrite(fd, b"two", 3)
    os.fsync(fd)
    os.close(fd)
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b"onetwo"


def test_fdatasync_makes_data_durable_and_is_counted(lfs):
    durable_file(lfs, "f", b"")
    fd = os.open(mnt(lfs, "f"), os.O_WRONLY)
    for i in range(3):
        os.write(fd, b"%d" % i)
        os.fdatasync(fd)
    os.close(fd)
    stats = lfs.stats()
    assert stats["fdatasync"]["/f"] == 3
    assert stats["fsync"]["/f"] == 1  # durable_file's
    assert stats["fsyncdir"]["/"] == 1
    assert lfs.syncs("/f") == 4
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b"012"


def test_unsynced_truncation_is_undone(lfs):
    durable_file(lfs, "shrunk", b"x" * 100)
    durable_file(lfs, "grown", b"y" * 10)
    durable_file(lfs, "kept", b"z" * 100)
    os.truncate(mnt(lfs, "shrunk"), 10)
    os.truncate(mnt(lfs, "grown"), 1000)
    fd = os.open(mnt(lfs, "kept"), os.O_WRONLY)
    os.ftruncate(fd, 7)
    os.fsync(fd)
    os.close(fd)
    assert os.path.getsize(mnt(lfs, "shrunk")) == 10
    crash_and_remount(lfs)
    assert read(mnt(lfs, "shrunk")) == b"x" * 100
    assert read(mnt(lfs, "grown")) == b"y" * 10
    assert read(mnt(lfs, "kept")) == b"z" * 7


def test_open_with_o_trunc_unsynced_is_undone(lfs):
    durable_file(lfs, "f", b"before")
    write_file(mnt(lfs, "f"), b"after", sync=False)
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b"before"


# --- names -----------------------------------------------------------------------------

def test_file_fsynced_in_a_directory_not_fsynced_is_gone(lfs):
    write_file(mnt(lfs, "new"), b"data", sync=True)
    report = crash_and_remount(lfs)
    assert report["files"]["/new"]["name_lost"] and report["namespace_ops_dropped"] == 1
    assert not os.path.exists(mnt(lfs, "new"))
    assert os.listdir(lfs.mountpoint) == []


def test_name_without_data_comes_back_empty(lfs):
    write_file(mnt(lfs, "f"), b"data", sync=False)
    fsync_dir(lfs.mountpoint)
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b""


def test_directory_fsync_makes_the_namespace_log_durable_up_to_its_last_change(lfs):
    os.mkdir(mnt(lfs, "d1"))
    os.mkdir(mnt(lfs, "d2"))
    fsync_dir(lfs.mountpoint)
    write_file(mnt(lfs, "d1", "x"), b"x")  # before d2's change: carried by d2's fsync
    write_file(mnt(lfs, "d2", "y"), b"y")
    write_file(mnt(lfs, "d1", "z"), b"z")  # after it: not
    os.mkdir(mnt(lfs, "d3"))               # nor this
    fsync_dir(mnt(lfs, "d2"))
    crash_and_remount(lfs)
    assert sorted(os.listdir(lfs.mountpoint)) == ["d1", "d2"]
    assert os.listdir(mnt(lfs, "d1")) == ["x"]
    assert read(mnt(lfs, "d1", "x")) == b"x"
    assert read(mnt(lfs, "d2", "y")) == b"y"


def test_a_new_directory_and_its_file_need_directory_fsyncs(lfs):
    os.mkdir(mnt(lfs, "d"))
    write_file(mnt(lfs, "d", "f"), b"f")  # the file's data is synced, no name is
    crash_and_remount(lfs)
    assert os.listdir(lfs.mountpoint) == []
    os.mkdir(mnt(lfs, "d"))
    write_file(mnt(lfs, "d", "f"), b"f")
    fsync_dir(lfs.mountpoint)  # d's name is durable; f's came later
    crash_and_remount(lfs)
    assert os.listdir(lfs.mountpoint) == ["d"] and os.listdir(mnt(lfs, "d")) == []
    write_file(mnt(lfs, "d", "f"), b"f")
    fsync_dir(mnt(lfs, "d"))
    crash_and_remount(lfs)
    assert read(mnt(lfs, "d", "f")) == b"f"


def test_unsynced_rename_is_undone(lfs):
    durable_file(lfs, "a", b"A")
    durable_file(lfs, "b", b"B")
    durable_file(lfs, "c", b"C")
    os.rename(mnt(lfs, "a"), mnt(lfs, "b"))  # replaces b
    os.rename(mnt(lfs, "c"), mnt(lfs, "moved"))
    assert sorted(os.listdir(lfs.mountpoint)) == ["b", "moved"]
    crash_and_remount(lfs)
    assert sorted(os.listdir(lfs.mountpoint)) == ["a", "b", "c"]
    assert (read(mnt(lfs, "a")), read(mnt(lfs, "b")), read(mnt(lfs, "c"))) == (b"A", b"B", b"C")
    # The write-temp-then-rename idiom with both fsyncs is durable.
    write_file(mnt(lfs, "b.tmp"), b"B2")
    os.rename(mnt(lfs, "b.tmp"), mnt(lfs, "b"))
    fsync_dir(lfs.mountpoint)
    crash_and_remount(lfs)
    assert sorted(os.listdir(lfs.mountpoint)) == ["a", "b", "c"]
    assert read(mnt(lfs, "b")) == b"B2"


def test_rename_between_directories_is_durable_with_either_directory(lfs):
    os.mkdir(mnt(lfs, "src"))
    os.mkdir(mnt(lfs, "dst"))
    fsync_dir(lfs.mountpoint)
    durable_file(lfs, "src/f", b"f")
    os.rename(mnt(lfs, "src", "f"), mnt(lfs, "dst", "f"))
    fsync_dir(mnt(lfs, "src"))
    crash_and_remount(lfs)
    assert os.listdir(mnt(lfs, "src")) == [] and os.listdir(mnt(lfs, "dst")) == ["f"]


def test_unsynced_unlink_and_rmdir_are_undone(lfs):
    os.mkdir(mnt(lfs, "d"))
    durable_file(lfs, "f", b"data")
    durable_file(lfs, "g", b"gone")
    os.unlink(mnt(lfs, "f"))
    os.rmdir(mnt(lfs, "d"))
    os.unlink(mnt(lfs, "g"))
    assert os.listdir(lfs.mountpoint) == []
    fsync_dir(lfs.mountpoint)  # makes all three durable...
    durable_file(lfs, "h", b"h")
    os.unlink(mnt(lfs, "h"))   # ...but not this one
    crash_and_remount(lfs)
    assert os.listdir(lfs.mountpoint) == ["h"]
    assert read(mnt(lfs, "h")) == b"h"


def test_unlinked_open_file_still_works(lfs):
    durable_file(lfs, "f", b"abc")
    fd = os.open(mnt(lfs, "f"), os.O_RDWR)
    try:
        os.unlink(mnt(lfs, "f"))
        os.pwrite(fd, b"XYZ", 3)
        os.ftruncate(fd, 5)
        assert os.pread(fd, 100, 0) == b"abcXY"
        # (fstat of it fails ESTALE: libfuse's path-based API has no name for it.)
        os.fsync(fd)
    finally:
        os.close(fd)
    wait_until_used(lfs, 0)  # the kernel sends FUSE's release after close(2) returns


def test_modes_are_kept(lfs):
    os.mkdir(mnt(lfs, "private"), 0o700)
    write_file(mnt(lfs, "private", "state"), b"s", mode=0o600)
    fsync_dir(mnt(lfs, "private"))
    fsync_dir(lfs.mountpoint)
    crash_and_remount(lfs)
    assert oct(os.stat(mnt(lfs, "private")).st_mode & 0o7777) == oct(0o700)
    assert oct(os.stat(mnt(lfs, "private", "state")).st_mode & 0o7777) == oct(0o600)
    assert oct(os.stat(os.path.join(lfs.backing_dir, "private", "state")).st_mode & 0o7777) == oct(0o600)
    os.chmod(mnt(lfs, "private", "state"), 0o640)  # not fsynced: undone
    crash_and_remount(lfs)
    assert oct(os.stat(mnt(lfs, "private", "state")).st_mode & 0o7777) == oct(0o600)


# --- crash, remount, clean unmount -----------------------------------------------------

def test_remount_serves_the_durable_image_only(lfs):
    durable_file(lfs, "f", b"durable")
    fd = os.open(mnt(lfs, "f"), os.O_RDWR)
    os.pwrite(fd, b"VOLATILE", 0)
    assert os.pread(fd, 100, 0) == b"VOLATILE"  # now in the kernel's page cache too
    os.close(fd)
    write_file(mnt(lfs, "volatile"), b"v", sync=False)
    lfs.crash()
    # The backing directory holds exactly the durable image...
    assert os.listdir(lfs.backing_dir) == ["f"]
    assert read(os.path.join(lfs.backing_dir, "f")) == b"durable"
    # ...and a new mount serves it, not what a cache kept.
    lfs.mount()
    assert os.listdir(lfs.mountpoint) == ["f"]
    assert read(mnt(lfs, "f")) == b"durable"


def test_clean_unmount_keeps_everything(lfs):
    write_file(mnt(lfs, "f"), b"never synced", sync=False, mode=0o600)
    lfs.unmount()
    assert read(os.path.join(lfs.backing_dir, "f")) == b"never synced"
    lfs.mount()
    assert read(mnt(lfs, "f")) == b"never synced"
    assert os.stat(mnt(lfs, "f")).st_mode & 0o777 == 0o600


def test_sync_makes_everything_durable(lfs):
    write_file(mnt(lfs, "f"), b"data", sync=False)
    lfs.sync()
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b"data"


def _prefix_outcomes(base, writes):
    """Every content a crash with tear may leave: base plus writes[:k], the last one cut."""
    outcomes = set()
    for k in range(len(writes) + 1):
        buf = bytearray(base)
        for off, data in writes[:k - 1] if k else []:
            buf[off:off + len(data)] = data if off <= len(buf) else None
        if k == 0:
            outcomes.add(bytes(buf))
            continue
        off, data = writes[k - 1]
        for cut in range(len(data) + 1):
            b = bytearray(buf)
            if off > len(b):
                b.extend(bytes(off - len(b)))
            b[off:off + cut] = data[:cut]
            outcomes.add(bytes(b))
    return outcomes


def test_torn_crash_keeps_a_prefix_of_the_unsynced_writes(lfs):
    base = b"." * 2000
    writes = [(100, b"A" * 1500), (1800, b"B" * 1500), (3300, b"C" * 1000), (0, b"D" * 700)]
    outcomes = _prefix_outcomes(base, writes)
    full = sorted(outcomes, key=len)[-1]
    seen_torn = seen_kept = 0
    for seed in range(8):
        report = torn_crash(lfs, base, writes, seed)
        got = read(mnt(lfs, "f"))
        assert got in outcomes, f"seed {seed}: not base plus a prefix of the writes"
        kept = report["files"]["/f"]["kept_ops"]
        # writes after the last kept one left no trace
        assert all(got[o:o + len(d)] != d or k < kept or d in base for k, (o, d) in enumerate(writes))
        seen_kept += kept > 0
        seen_torn += got not in (full, base) and kept > 0
    assert seen_kept and seen_torn, "eight seeds kept and tore nothing"
    # The same seed tears the same way.
    torn_crash(lfs, base, writes, 3)
    first = read(mnt(lfs, "f"))
    torn_crash(lfs, base, writes, 3)
    assert read(mnt(lfs, "f")) == first


# --- faults ----------------------------------------------------------------------------

def test_failed_fsync_returns_eio_and_its_data_is_never_durable(lfs):
    durable_file(lfs, "f", b"0123456789")
    durable_file(lfs, "other", b"o")
    lfs.fail_next_sync("/f")
    fd = os.open(mnt(lfs, "f"), os.O_RDWR)
    os.pwrite(fd, b"AAA", 0)
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == errno.EIO
    os.fsync(fd)  # succeeds, as Linux's does after a writeback error, and makes nothing durable
    assert os.pread(fd, 100, 0) == b"AAA3456789"  # still readable in this mount
    os.pwrite(fd, b"BBB", 5)
    os.fdatasync(fd)  # later writes are durable again
    os.close(fd)
    fd = os.open(mnt(lfs, "other"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"k")
    os.fsync(fd)  # the rule was used up by /f
    os.close(fd)
    assert lfs.stats()["sync_errors"] == 1
    crash_and_remount(lfs)
    assert read(mnt(lfs, "f")) == b"01234BBB89"
    assert read(mnt(lfs, "other")) == b"ok"


def test_writes_beyond_capacity_fail_with_enospc(lfs):
    durable_file(lfs, "f", b"x" * 10000)
    assert lfs.stats()["used_bytes"] == 10000
    lfs.set_capacity(20000)
    st = os.statvfs(lfs.mountpoint)
    assert st.f_blocks * st.f_frsize <= 20000 and st.f_bavail * st.f_frsize <= 10000
    fd = os.open(mnt(lfs, "f"), os.O_RDWR)
    try:
        os.pwrite(fd, b"y" * 8000, 10000)
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"z" * 4000, 18000)
        assert e.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as e:
            os.ftruncate(fd, 50000)
        assert e.value.errno == errno.ENOSPC
        os.pwrite(fd, b"w" * 8000, 0)  # overwriting takes no room
        assert os.fstat(fd).st_size == 18000
        os.unlink(mnt(lfs, "f"))  # space comes back when the last name and handle go
    finally:
        os.close(fd)
    wait_until_used(lfs, 0)  # the handle goes with FUSE's release, sent after close(2)
    write_file(mnt(lfs, "g"), b"g" * 19000)
    lfs.set_capacity(None)
    write_file(mnt(lfs, "h"), b"h" * 100000)


# --- freeze ----------------------------------------------------------------------------

def _blocked_writer(path):
    """A thread that writes once to path (opened before the freeze) and records how it ended."""
    fd = os.open(path, os.O_WRONLY)
    result = {}

    def run():
        try:
            os.pwrite(fd, b"late", 0)
            result["ok"] = True
        except OSError as e:
            result["errno"] = e.errno
        finally:
            try:
                os.close(fd)
            except OSError:
                pass

    return threading.Thread(target=run, daemon=True), result


def test_freeze_blocks_a_writer_until_crash_fails_it(lfs):
    durable_file(lfs, "f", b"early")
    t, result = _blocked_writer(mnt(lfs, "f"))
    lfs.freeze()
    t.start()
    t.join(0.5)
    assert t.is_alive() and result == {}, "the write went through a frozen file system"
    lfs.crash()
    t.join(10)
    assert not t.is_alive()
    assert result == {"errno": errno.EIO}
    lfs.mount()
    assert read(mnt(lfs, "f")) == b"early"


def test_thaw_lets_blocked_operations_run(lfs):
    durable_file(lfs, "f", b"early")
    t, result = _blocked_writer(mnt(lfs, "f"))
    lfs.freeze()
    t.start()
    t.join(0.3)
    assert t.is_alive()
    lfs.thaw()
    t.join(10)
    assert result == {"ok": True}
    assert read(mnt(lfs, "f")) == b"latey"


# --- mmap and SQLite -------------------------------------------------------------------

def test_shared_writable_mmap_works(lfs):
    durable_file(lfs, "m", b"\0" * 8192)
    fd = os.open(mnt(lfs, "m"), os.O_RDWR)
    try:
        with mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
            m[4096:4101] = b"hello"
            m.flush()  # msync: the dirty page reaches the file system as a write
            other = os.open(mnt(lfs, "m"), os.O_RDONLY)
            assert os.pread(other, 5, 4096) == b"hello"
            os.close(other)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert lfs.stats()["writes"].get("/m", 0) >= 2
    crash_and_remount(lfs)
    assert read(mnt(lfs, "m"))[4096:4101] == b"hello"


SQLITE_CHILD = r"""
import sqlite3, sys
path, sync, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = sqlite3.connect(path, isolation_level=None)
assert db.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
db.execute("pragma synchronous=" + sync)
db.execute("create table if not exists t(id integer primary key, v blob)")
print("ready", flush=True)
i = 0
while limit == 0 or i < limit:
    i += 1
    db.execute("begin")
    db.execute("insert into t(v) values (randomblob(300))")
    db.execute("commit")
    print("ack", db.execute("select max(id) from t").fetchone()[0], flush=True)
print("done", flush=True)
sys.stdin.read()  # stays open, like a daemon, until killed
"""


def _sqlite_child(path, sync, limit=0):
    return subprocess.Popen([sys.executable, "-c", SQLITE_CHILD, path, sync, str(limit)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _read_until(proc, predicate, timeout=30):
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if predicate(line):
            return line
        assert time.monotonic() < deadline, "the SQLite child is too slow"
    raise AssertionError(f"the SQLite child ended: {proc.wait()}")


def _power_cut(fs, proc, **crash_kw):
    """freeze, kill -9, crash: the pattern of the power-cut tests. Returns the acked ids
    the child printed (the last ones may be read only after it died) and the report."""
    fs.freeze()
    proc.send_signal(signal.SIGKILL)
    report = fs.crash(**crash_kw)
    rest = proc.stdout.read()  # EOF once the killed child is released and gone
    proc.wait(10)
    acked = [int(line.split()[1]) for line in rest.splitlines() if line.startswith("ack ")]
    return acked, report


def _check_db(path):
    db = sqlite3.connect(path)
    try:
        assert db.execute("pragma integrity_check").fetchall() == [("ok",)]
        ids = [r[0] for r in db.execute("select id from t order by id")]
        assert ids == list(range(1, len(ids) + 1))
        return len(ids)
    finally:
        db.close()


@pytest.mark.parametrize("tear", [False, True])
def test_sqlite_wal_full_keeps_every_acknowledged_commit(lfs, tear):
    db = mnt(lfs, "state.db")
    for seed in range(2):
        proc = _sqlite_child(db, "full")
        try:
            _read_until(proc, lambda l: l.startswith("ready"))
            last = 0
            while last < 150:
                last = int(_read_until(proc, lambda l: l.startswith("ack")).split()[1])
        finally:
            acked, report = _power_cut(lfs, proc, tear=tear, seed=seed)
        last = max([last, *acked])
        assert lfs.stats if True else None
        lfs.mount()
        rows = _check_db(db)
        assert rows >= last, f"acknowledged {last} commits, {rows} survived"
        assert rows <= last + 1  # at most the commit in flight, synced but not yet acked


def test_sqlite_synchronous_off_loses_commits(lfs):
    db = mnt(lfs, "state.db")
    proc = _sqlite_child(db, "full", limit=1)
    _read_until(proc, lambda l: l.startswith("done"))
    proc.kill()
    proc.wait()
    lfs.unmount()  # a clean start: one row, durable
    lfs.mount()
    proc = _sqlite_child(db, "off", limit=100)
    try:
        _read_until(proc, lambda l: l.startswith("done"))
    finally:
        acked, report = _power_cut(lfs, proc)
    assert report["files"]["/state.db-wal"]["unsynced_ops"] > 0 or report["files"]
    lfs.mount()
    rows = _check_db(db)
    assert rows < 101, "synchronous=OFF lost nothing: the file system kept unsynced writes"
    assert rows >= 1


def test_sqlite_speed_on_the_mount(lfs):
    """Not a benchmark; a floor so a slow change shows (a few thousand a second here)."""
    db = sqlite3.connect(mnt(lfs, "speed.db"), isolation_level=None)
    try:
        db.execute("pragma journal_mode=wal")
        db.execute("pragma synchronous=full")
        db.execute("create table t(v)")
        n = 300
        start = time.monotonic()
        for i in range(n):
            db.execute("begin")
            db.execute("insert into t values (?)", (i,))
            db.execute("commit")
        rate = n / (time.monotonic() - start)
    finally:
        db.close()
    assert lfs.syncs("/speed.db-wal") >= n
    assert rate > 100, f"{rate:.0f} commits/s"
