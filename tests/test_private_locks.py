"""Locks are per-user private state (crosstune.fsutil): they live in this user's own folder (mode 0700, refused
when it is a link, another's or open to others), and a lock file is opened without following a link and written only
once held. A shared temp folder of predictable names let another user plant a link where `data prepare`'s lock would
be opened, and the opening truncated the link's target."""

from __future__ import annotations

import os
import stat

import pytest

from crosstune.errors import CrosstuneError
from crosstune.fsutil import LOCKS_ENV, LockedError, exclusive_lock, lock_path, private_locks


@pytest.fixture
def locks(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    monkeypatch.setenv(LOCKS_ENV, str(folder))
    return folder


def test_a_lock_lives_in_this_user_s_private_folder(locks, tmp_path):
    lock = lock_path(tmp_path / "prepared")
    st = locks.stat()
    assert lock.parent == locks and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    with exclusive_lock(lock, "the preparation", "wait"):
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        with pytest.raises(LockedError, match=f"in use by PID {os.getpid()}"):
            with exclusive_lock(lock, "the preparation", "wait"):
                pass


def test_a_link_planted_where_a_lock_opens_is_refused_and_its_target_kept(locks, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    lock = lock_path(tmp_path / "prepared")
    lock.symlink_to(victim)
    with pytest.raises(CrosstuneError, match="is a link; a lock is never opened through one"):
        with exclusive_lock(lock, "the preparation", "wait"):
            pytest.fail("locked through a link")
    assert victim.read_text() == "a user's file\n"
    run_lock = tmp_path / "run" / ".lock"  # a run directory's own lock, beside the user's files
    run_lock.parent.mkdir()
    run_lock.symlink_to(victim)
    with pytest.raises(CrosstuneError, match="is a link"):
        with exclusive_lock(run_lock, "run directory", "wait"):
            pass
    assert victim.read_text() == "a user's file\n"


def test_a_fifo_where_a_lock_opens_is_refused_without_blocking(locks, tmp_path):
    lock = lock_path(tmp_path / "prepared")
    os.mkfifo(lock)
    with pytest.raises(CrosstuneError, match="is not a regular file of this user's"):
        with exclusive_lock(lock, "the preparation", "wait"):
            pass


@pytest.mark.parametrize("kind", ["open to others", "a link", "a file"])
def test_a_lock_folder_that_is_not_this_user_s_alone_is_refused(locks, tmp_path, kind):
    if kind == "open to others":
        locks.mkdir(mode=0o777)
        locks.chmod(0o1777)
    elif kind == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        locks.symlink_to(tmp_path / "elsewhere")
    else:
        locks.write_text("")
    with pytest.raises(CrosstuneError, match="private lock folder is .*, not this user's alone: remove it"):
        private_locks()
