"""Runs first in a verify probe (``python -I -B sandbox.py PATHS PROBE ...``): makes PATHS read-only
for the probe, then becomes it (``execv``).

The probe runs the wheel's code (its extensions, its ``.pth`` files, its smoke calls) with the
cached torch environment's interpreter; without this, that code could write into the
environment (a ``.pth`` that every later verify would run). On Linux an unprivileged process
can make a user and mount namespace of its own, in which the paths are bind-mounted onto
themselves read-only. The probe is then started by ``execv`` under a non-zero user id, which
drops the capabilities the namespace gave: the wheel's code cannot unmount or remount what was
made read-only (a namespace it makes inside gets those mounts locked).

Where the kernel refuses namespaces (some containers), the probe runs as it is, and the runner's
check of the environment against its manifest after the probe is the only guard (it is run in
every case). ``ASSEMBLE_PROBE_SANDBOX`` tells the probe which it was: the read-only paths, or
the reason there are none; ``ASSEMBLE_VERIFY_SANDBOX=0`` turns it off.

Standalone on purpose, like the probe: it runs with the torch environment's interpreter.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_NOATIME, MS_NODIRATIME = 32, 4096, 1024, 2048
MS_REC, MS_PRIVATE, MS_RELATIME = 0x4000, 1 << 18, 1 << 21
# statvfs's f_flag bit -> the mount flag a remount inside a user namespace must keep (the kernel
# refuses to clear a flag the parent namespace set: those are locked).
_KEPT = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
         os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
VARIABLE = "ASSEMBLE_PROBE_SANDBOX"  # what the probe is told: "read-only: PATHS" or "off: WHY"
SWITCH = "ASSEMBLE_VERIFY_SANDBOX"  # "0": no namespace (a machine where one breaks the GPU driver)


class Refused(Exception):
    """The kernel said no: the probe runs without the read-only view."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise Refused(f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def read_only(paths: list[str]) -> list[str]:
    """Enter a user and mount namespace in which each existing directory of ``paths`` is
    read-only; the paths made read-only. Raises Refused when the kernel does not allow it."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    inner_uid, inner_gid = uid or 1, gid or 1  # never 0 inside: execv then drops the namespace's capabilities
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{inner_uid} {uid} 1")
        _write("/proc/self/gid_map", f"{inner_gid} {gid} 1")
    except OSError as error:
        raise Refused(f"user namespace map: {error.strerror or error}") from None
    _call(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    done = []
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):
        if not os.path.isdir(path):
            continue
        raw = os.fsencode(path)
        _call(libc.mount(raw, raw, None, MS_BIND | MS_REC, None), f"bind {path}")
        kept = os.statvfs(path).f_flag
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for bit, flag in _KEPT.items():
            if kept & bit:
                flags |= flag
        _call(libc.mount(None, raw, None, flags, None), f"remount {path} read-only")
        done.append(path)
    return done


def main(argv: list[str]) -> int:
    """``PATHS_JSON PROBE ARGS...``: the read-only view when the kernel allows it, then the probe."""
    paths, probe, rest = json.loads(argv[0]), argv[1], argv[2:]
    # the interpreter's own
    paths += [prefix for prefix in (sys.prefix, sys.base_prefix) if os.path.realpath(prefix) != "/"]
    if os.environ.get(SWITCH) == "0":
        status = f"off: {SWITCH}=0"
    else:
        try:
            status = "read-only: " + ", ".join(read_only(paths))
        except Refused as error:
            status = f"off: {error}"
    os.environ[VARIABLE] = status
    os.execv(sys.executable, [sys.executable, "-I", "-B", probe, *rest])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
