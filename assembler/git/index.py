"""Whether a checkout's tracked files may have changed, read from git's index without starting
git: the no-op `assemble checkout` says ``M file`` as `git checkout` does, yet must start no
process when nothing changed (tests/test_startup.py).

The index (``.git/index``, versions 2 and 3) stores each tracked file's size and mtime as git
last saw them; a file whose stat differs may be modified, and only then is `git status` asked,
which decides. Unlike git, a file whose stat equals the index's is taken as unchanged even in
the "racy" case (rewritten with the same size within the tick the index was written, that is
within milliseconds of a checkout), so that a checkout just made is a no-op without a process."""

from __future__ import annotations

import os
import struct
from pathlib import Path

_HEADER = struct.Struct(">4sII")
_ENTRY = struct.Struct(">IIIIIIIIII20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, sha-1, flags
_GITLINK = 0o160000
_ASSUME_VALID = 0x8000
_EXTENDED = 0x4000
_STAGE = 0x3000


def may_be_modified(checkout: Path) -> bool:
    """True when some tracked file of ``checkout`` may differ from the index (or the index
    cannot be read here: a version-4 or SHA-256 index, a damaged one): ask git then."""
    index = checkout / ".git" / "index"
    try:
        data = index.read_bytes()
    except OSError:
        return True
    try:
        return _differs(checkout, data)
    except (struct.error, ValueError, UnicodeDecodeError):
        return True


def _differs(checkout: Path, data: bytes) -> bool:
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != b"DIRC" or version not in (2, 3):
        return True
    offset = _HEADER.size
    for _ in range(count):
        fields = _ENTRY.unpack_from(data, offset)
        mtime_s, mtime_ns, mode, size, flags = fields[2], fields[3], fields[6], fields[9], fields[11]
        start = offset + _ENTRY.size + (2 if version == 3 and flags & _EXTENDED else 0)
        end = data.index(b"\0", start)
        name = data[start:end].decode("utf-8")
        offset += (end - offset + 8) // 8 * 8  # entries are NUL-padded to a multiple of 8 bytes
        if flags & _STAGE:
            return True  # a conflict entry: the checkout is mid-merge
        if mode == _GITLINK or flags & _ASSUME_VALID:
            continue  # a submodule (its own index), or a file git was told not to look at
        try:
            stat = os.lstat(checkout / name)
        except OSError:
            return True  # deleted
        if stat.st_size & 0xFFFFFFFF != size or stat.st_mtime_ns != mtime_s * 1_000_000_000 + mtime_ns:
            return True
    return False


def modified_files(checkout: Path) -> tuple[str, ...]:
    """The tracked files of ``checkout`` with uncommitted edits, as `git checkout` lists them
    (``M file``, ``D file``): from the index alone when nothing changed, else from `git status`."""
    if not may_be_modified(checkout):
        return ()
    from assembler.git.process import WorkTree

    output = WorkTree(checkout).run("status", "--porcelain=v1", "-z", "--untracked-files=no").stdout
    return tuple(f"{entry[:2].strip()} {entry[3:]}" for entry in output.split("\0") if len(entry) > 3)
