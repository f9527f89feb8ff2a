"""Hostile wheels and ELF files (issue 10): every one ends in exit 2 with one line naming the wheel,
the member and the problem, never a traceback or a hang, and memory stays bounded however large
the input claims to be.  Each case was reproduced against the audit before the fix."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.audit.limits import MAX_STRING_TABLE, MAX_WHEEL_METADATA
from tests.hostile_wheels import (
    DT_STRSZ,
    WHEEL_NAME,
    Archive,
    Entry,
    MiB,
    audit_with_peak,
    compile_seed,
    deflate,
    dynamic_value_offsets,
    member,
    wheel_entries,
    zeros,
)

PEAK_BOUND_MIB = 200  # what a hostile input may make one `assemble audit` process use, at most
BOMB = 400 * MiB  # the cases: 400 MB behind a few hundred KB


@pytest.fixture(scope="session")
def seed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return compile_seed(tmp_path_factory.mktemp("seed")).read_bytes()


def audit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assembler", "audit", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"},
    )


def assert_one_line_exit_2(rc: int, stderr: str, *needles: str) -> str:
    """Exit 2, no traceback, a single ``error:`` line (plus at most a hint) holding every needle."""
    assert rc == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert lines and lines[0].startswith("error: "), stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def with_strsz(elf: bytes, value: int) -> bytes:
    out = bytearray(elf)
    struct.pack_into("<Q", out, dynamic_value_offsets(elf)[DT_STRSZ], value)
    return bytes(out)


def test_seed_is_audited(seed: bytes, tmp_path: Path) -> None:
    """The seed the hostile cases start from is a sound extension: the refusals below are the mutations'."""
    wheel = Archive(wheel_entries({"pkg/_C.abi3.so": seed})).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel), "--json")
    assert done.returncode == 0, done.stderr
    assert '"STABLE"' in done.stdout


def test_wheel_file_bomb(seed: bytes, tmp_path: Path) -> None:
    """A 400 KB wheel whose WHEEL inflates to 400 MB (it peaked at 840 MB)."""
    text = b"Wheel-Version: 1.0\nTag: cp39-abi3-linux_x86_64\n"
    bomb = Entry(b"pkg-1.0.dist-info/WHEEL", deflate([text, *zeros(BOMB)]), len(text) + BOMB)
    wheel = Archive([member("pkg/_C.abi3.so", seed), bomb]).write(tmp_path / WHEEL_NAME)
    assert wheel.stat().st_size < MiB
    done = audit_with_peak(str(wheel))
    print(f"peak {done.peak_mib:.0f} MiB, exit {done.returncode}")
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg-1.0.dist-info/WHEEL",
                           f"{MAX_WHEEL_METADATA}-byte limit")
    assert done.peak_mib < PEAK_BOUND_MIB


def test_wheel_file_bomb_lying_small(seed: bytes, tmp_path: Path) -> None:
    """The same bomb declaring 48 bytes: inflating stops where the header says, and the rest is refused."""
    text = b"Wheel-Version: 1.0\nTag: cp39-abi3-linux_x86_64\n"
    bomb = Entry(b"pkg-1.0.dist-info/WHEEL", deflate([text, *zeros(BOMB)]), len(text))
    wheel = Archive([member("pkg/_C.abi3.so", seed), bomb]).write(tmp_path / WHEEL_NAME)
    done = audit_with_peak(str(wheel))
    print(f"peak {done.peak_mib:.0f} MiB, exit {done.returncode}")
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "WHEEL", "inflates to more than")
    assert done.peak_mib < PEAK_BOUND_MIB


def test_dt_strsz_bomb_in_wheel(seed: bytes, tmp_path: Path) -> None:
    """An ELF member padded to 400 MB of zeros with DT_STRSZ = 390 MB (it peaked at 820 MB): a
    large string table is streamed, never held (memory stays bounded); one declaring more than
    the limit is refused before anything is read."""
    for strsz, refused in ((390 * MiB, False), (MAX_STRING_TABLE + MiB, True)):
        elf = with_strsz(seed, strsz)
        so = Entry(b"pkg/_C.abi3.so", deflate([elf, *zeros(BOMB - len(elf))]), BOMB)
        wheel = Archive([so, *wheel_entries({})]).write(tmp_path / WHEEL_NAME)
        assert wheel.stat().st_size < MiB
        done = audit_with_peak(str(wheel))
        print(f"DT_STRSZ {strsz}: peak {done.peak_mib:.0f} MiB, exit {done.returncode}")
        if refused:
            assert_one_line_exit_2(
                done.returncode, done.stderr, WHEEL_NAME, "pkg/_C.abi3.so", "DT_STRSZ", f"{MAX_STRING_TABLE}-byte limit"
            )
        else:
            assert done.returncode == 0, done.stderr
            assert "STABLE" in done.stdout
        assert done.peak_mib < PEAK_BOUND_MIB


def test_dt_strsz_bomb_sparse_file(seed: bytes, tmp_path: Path) -> None:
    """The same object as a (sparse) 400 MB file on disk: read with pread, refused over the limit."""
    path = tmp_path / "big.so"
    with path.open("wb") as f:
        f.write(with_strsz(seed, MAX_STRING_TABLE + MiB))
        f.truncate(BOMB)
    done = audit_with_peak(str(path))
    print(f"peak {done.peak_mib:.0f} MiB, exit {done.returncode}")
    assert_one_line_exit_2(done.returncode, done.stderr, "big.so", "DT_STRSZ", "limit")
    assert done.peak_mib < PEAK_BOUND_MIB


@pytest.mark.parametrize("method", [0, 8])
def test_member_past_end_of_wheel(seed: bytes, tmp_path: Path, method: int) -> None:
    """A member whose declared size runs past the end of the file is corrupt (was: NO-TORCH / STABLE)."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed}, method=method)
    so = entries[0]
    so.csize = len(so.data) + 4 * MiB
    so.size = so.size + 4 * MiB if method == 0 else so.size
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg/_C.abi3.so", "run past the end")


def test_stored_member_cut_short(seed: bytes, tmp_path: Path) -> None:
    """A stored member that holds only the first 2 KB of its declared size, the rest taken by the next member."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed[:2048]}, method=0)
    entries[0].size = entries[0].csize = len(seed)
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg/_C.abi3.so")


def test_fifo_named_like_a_shared_object(tmp_path: Path) -> None:
    """A FIFO named x.so hung the audit; x.whl as well.  Directories refuse one too."""
    fifo = tmp_path / "x.so"
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "x.whl")
    for path in (fifo, tmp_path / "x.whl"):
        done = audit(str(path), timeout=30)
        assert_one_line_exit_2(done.returncode, done.stderr, str(path), "not a regular file")
    done = audit(str(tmp_path), timeout=30)
    assert_one_line_exit_2(done.returncode, done.stderr, "not a regular file")


def test_directory_link_leading_outside(seed: bytes, tmp_path: Path) -> None:
    """Links inside an audited directory are not followed out of it."""
    outside = tmp_path / "elsewhere.so"
    outside.write_bytes(seed)
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "_C.abi3.so").write_bytes(seed)
    (tree / "pkg" / "alias.so").symlink_to("_C.abi3.so")  # inside: audited once, through its target
    done = audit(str(tree), "--json")
    assert done.returncode == 0, done.stderr
    assert [e["path"] for e in json.loads(done.stdout)["extensions"]] == ["pkg/_C.abi3.so"]
    (tree / "pkg" / "_ext.so").symlink_to(outside)
    done = audit(str(tree))
    assert_one_line_exit_2(done.returncode, done.stderr, "_ext.so", "outside the directory")


@pytest.mark.parametrize("in_wheel", [False, True])
def test_four_byte_elf(tmp_path: Path, in_wheel: bool) -> None:
    """Just the ELF magic: IndexError before."""
    if in_wheel:
        path = Archive(wheel_entries({"pkg/_C.abi3.so": b"\x7fELF"})).write(tmp_path / WHEEL_NAME)
        needles = [WHEEL_NAME, "pkg/_C.abi3.so", "truncated ELF"]
    else:
        path = tmp_path / "tiny.so"
        path.write_bytes(b"\x7fELF")
        needles = ["tiny.so", "truncated ELF"]
    done = audit(str(path))
    assert_one_line_exit_2(done.returncode, done.stderr, *needles)


def test_non_utf8_member_name(seed: bytes, tmp_path: Path) -> None:
    """A member name flagged UTF-8 (bit 11) that is not UTF-8: UnicodeDecodeError before."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    entries[0].name = b"pkg/\xff\xfe.abi3.so"
    entries[0].flags = 0x800
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg/\\xff\\xfe.abi3.so", "not valid UTF-8")


def test_cp437_member_name(seed: bytes, tmp_path: Path) -> None:
    """Without bit 11 a name is cp437, as zipfile reads it: audited, not refused."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    entries[0].name = b"pkg/\x82.abi3.so"
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel), "--json")
    assert done.returncode == 0, done.stderr
    assert "pkg/\\u00e9.abi3.so" in done.stdout or "pkg/é.abi3.so" in done.stdout


def test_member_name_with_newline(seed: bytes, tmp_path: Path) -> None:
    """A name cannot split the error into two lines."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    entries[0].name = b"pkg/\nerror: forged.so"
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "control characters")


def test_short_zip64_extra_field(seed: bytes, tmp_path: Path) -> None:
    """Sizes marked 0xFFFFFFFF with a ZIP64 extra field that claims 16 bytes but holds 8: struct.error before."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    so = entries[0]
    so.size = 0xFFFFFFFF  # written as 0xFFFFFFFF: "see the ZIP64 extra field"
    so.central_extra = struct.pack("<HHQ", 1, 16, len(seed))
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg/_C.abi3.so", "extra field 0x0001")


def test_zip64_extra_field_without_the_size(seed: bytes, tmp_path: Path) -> None:
    """A well-formed ZIP64 extra field that lacks the value the header defers to it."""
    entries = wheel_entries({"pkg/_C.abi3.so": seed})
    entries[0].size = 0xFFFFFFFF
    entries[0].central_extra = struct.pack("<HH", 1, 0)
    wheel = Archive(entries).write(tmp_path / WHEEL_NAME)
    done = audit(str(wheel))
    assert_one_line_exit_2(done.returncode, done.stderr, WHEEL_NAME, "pkg/_C.abi3.so", "ZIP64")


def test_refresh_from_hostile_torch_wheel(tmp_path: Path) -> None:
    """--refresh-torch-table reads a torch wheel with zipfile: a FIFO and a damaged wheel are one line, exit 2."""
    from assembler.audit.torchdata import DEFAULT_TABLE

    table = tmp_path / "table.json"
    table.write_bytes(DEFAULT_TABLE.read_bytes())
    fifo = tmp_path / "torch-2.13.0-cp310-cp310-linux_x86_64.whl"
    os.mkfifo(fifo)
    header = b"#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0\nvoid torch_new(void);\n#endif\n"
    broken = Archive([member("torch-2.13.0.dist-info/METADATA", b"Name: torch\n"),
                      member("torch/include/torch/csrc/stable/c/shim.h", header)])
    damaged = broken.write(tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl")
    data = bytearray(damaged.read_bytes())
    data[data.rindex(b"PK\x01\x02") + 16] ^= 0xFF  # the shim header's CRC no longer matches
    damaged.write_bytes(bytes(data))
    for wheel, needle in ((fifo, "not a regular file"), (damaged, "cannot read torch wheel")):
        done = audit("--refresh-torch-table", "--from-torch", str(wheel), "--torch-table", str(table), timeout=30)
        assert_one_line_exit_2(done.returncode, done.stderr, str(wheel), needle)
    assert table.read_bytes() == DEFAULT_TABLE.read_bytes()
