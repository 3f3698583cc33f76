"""Linux Landlock: an unprivileged process confines its own file-system and network access before exec.

Used by the evaluation sandbox in the child between fork and exec, so iverilog/vvp may write only inside
the sample's directory and read only the tool installation. Returns False (and changes nothing) where the
kernel lacks Landlock; callers record that, the sandbox's other layers still apply.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

# Landlock syscalls share these numbers on every architecture (added after the syscall table unification).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
# Rights by ABI version: v1 has 13 fs rights, v2 adds REFER, v3 TRUNCATE, v5 IOCTL_DEV.
_FS_V1 = (1 << 13) - 1
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
_FILE_ONLY_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@cache
def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable (old kernel, disabled, seccomp)."""
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = _FS_V1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def restrict_self(writable: list[Path], readable: list[Path]) -> bool:
    """Confine the calling process (and what it execs) to read+write `writable`, read+execute `readable`.

    Network: with ABI >= 4 all TCP bind/connect is denied; with ABI >= 6 signals and abstract unix sockets
    outside the domain too. Paths that do not exist are skipped. Returns whether the confinement applied.
    """
    abi = abi_version()
    if abi < 1:
        return False
    libc = _libc()
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = ctypes.sizeof(ctypes.c_uint64)
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return False
    try:
        read_rights = _EXECUTE | _READ_FILE | _READ_DIR
        for paths, rights in ((writable, handled), (readable, read_rights)):
            for path in paths:
                _add_path_rule(libc, ruleset, path, rights)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) == 0
    finally:
        os.close(ruleset)


def _add_path_rule(libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY_RIGHTS  # the kernel refuses directory rights on a file
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
