"""Fuzzing what `merge` and the shared store read: packed artifacts (``files.zip`` and its
RECORD) and store objects (key objects and blobs), issue 21.

Artifacts: a real packed artifact (``pack_files``, as `assemble build` writes it) next to a
loose one holding a real CPython abi3 extension (gcc, once per session; its platform verdict is
cached after the first merge, so each case costs a merge, not an auditwheel run). The packed one
is then bit-flipped, truncated, given lying CRCs, sizes and offsets in its directory and local
headers, or a RECORD of arbitrary bytes. Every merge must end in a wheel or in InputError (exit
2), nothing else; a wheel that is written must be true: every CRC holds and every RECORD
digest and size is the one of the member's bytes.

Store: a real published artifact in a file:// store, then its key object replaced by arbitrary
bytes or JSON with arbitrary fields, its blob flipped, truncated, grown, or either object
replaced by a FIFO, a directory or a link (to /dev/zero, to the real blob). `fetch` must return
(found, note) without raising or blocking; when it finds the artifact, the tree is exactly the
one that was published.

Deterministic (``derandomize``, no example database); ``ASSEMBLE_FUZZ_EXAMPLES`` sets the
examples per test (default 60 here).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sysconfig
import tempfile
import threading
import zipfile
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assembler.errors import InputError
from assembler.manifest import load_manifest
from assembler.store import SharedStore
from assembler.store.files import FileBackend
from assembler.wheel.artifact import PACK_NAME, PACK_RECORD, pack_files
from assembler.wheel.merge import merge_wheel
from tests.fuzzing import fuzz_examples, fuzz_settings
from tests.test_wheel_merge import MANIFEST, OPS_SHA, VECADD_C, VECADD_SHA, _artifact

EXAMPLES = fuzz_examples(60)
FUZZ = fuzz_settings(EXAMPLES)
OUTCOMES: Counter[str] = Counter()
LYING = [0, 1, 7, 0x7F, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF]
KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nfuzz outcomes: {dict(sorted(OUTCOMES.items()))}")


@cache
def base() -> Path:
    """deps.toml, a loose vecadd artifact (a real extension) and the honest ops pack, once."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-artifacts-"))
    (root / "vecadd.c").write_text(VECADD_C)
    so = root / "_vecadd_C.abi3.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", f"-I{sysconfig.get_paths()['include']}", str(root / "vecadd.c"),
                    "-o", str(so)],
                   check=True, capture_output=True)
    (root / "deps.toml").write_text(MANIFEST)
    _artifact(root / "artifacts", "vecadd", VECADD_SHA,
              {"vecadd/__init__.py": b"from ._vecadd_C import add\n", "vecadd/_vecadd_C.abi3.so": so}, cuda=None)
    ops = _artifact(root / "artifacts", "ops", OPS_SHA, {
        "ops/__init__.py": b"",
        # several deflate blocks
        "ops/kernels/table.bin": bytes(range(256)) * 64 + hashlib.sha256(b"seed").digest() * 2048,
        "ops/notes.txt": b"kernel notes\n" * 20,
    }, cuda="13.2")
    pack_files(ops / "files", ops / PACK_NAME)
    shutil.rmtree(ops / "files")
    return root


def _directory_entries(data: bytes) -> list[int]:
    entries, at = [], data.find(b"PK\x01\x02")
    while at >= 0 and data[at:at + 4] == b"PK\x01\x02" and at + 46 <= len(data):
        entries.append(at)
        name_len, extra_len, comment_len = struct.unpack_from("<3H", data, at + 28)
        at += 46 + name_len + extra_len + comment_len
    return entries


def _with_record(data: bytes, record: bytes) -> bytes:
    """The same members with ``record`` as the RECORD."""
    import io

    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = [(i.filename, source.read(i)) for i in source.infolist() if i.filename != PACK_RECORD]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members:
            archive.writestr(name, content)
        archive.writestr(PACK_RECORD, record)
    return out.getvalue()


@st.composite
def hostile_packs(draw: st.DrawFn) -> bytes:
    data = bytearray((base() / "artifacts" / "ops" / PACK_NAME).read_bytes())
    kind = draw(st.sampled_from(["flip", "truncate", "directory", "local", "record", "insert"]))
    OUTCOMES[f"mutation:{kind}"] += 1
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif kind == "insert":
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=64))
    elif kind in ("directory", "local"):
        entries = _directory_entries(bytes(data))
        entry = draw(st.sampled_from(entries))
        if kind == "directory":
            field = draw(st.sampled_from([16, 20, 24, 42]))  # CRC, compressed size, size, local header offset
        else:
            entry = struct.unpack_from("<L", data, entry + 42)[0]
            field = draw(st.sampled_from([14, 18, 22, 26, 28]))  # CRC, sizes, name and extra lengths
        width = 2 if kind == "local" and field >= 26 else 4
        value = draw(st.sampled_from(LYING)) & ((1 << (8 * width)) - 1)
        struct.pack_into("<H" if width == 2 else "<L", data, entry + field, value)
    else:
        lines = st.lists(st.tuples(st.sampled_from(["ops/__init__.py", "ops/kernels/table.bin", "ops/notes.txt", "x"]),
                                   st.one_of(st.just("sha256=" + "A" * 43), st.text(max_size=50)),
                                   st.text(max_size=10)), max_size=6)
        record = draw(st.one_of(st.binary(max_size=300), lines.map(
            lambda rows: "".join(",".join(r) + "\n" for r in rows).encode("utf-8", "surrogatepass"))))
        return _with_record(bytes(data), record)
    return bytes(data)


def _true_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None  # every CRC holds
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        for name, digest, size in (line.split(",") for line in archive.read(record).decode().splitlines()):
            if name == record:
                continue
            data = archive.read(name)
            assert (digest == "sha256="
                    + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()), name
            assert int(size) == len(data), name


@FUZZ
@given(pack=hostile_packs(), jobs=st.sampled_from([1, 2]))
def test_merge_of_hostile_packs_is_a_true_wheel_or_input_error(pack: bytes, jobs: int,
                                                               tmp_path_factory: pytest.TempPathFactory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = base()
    monkeypatch.setenv("ASSEMBLE_CACHE", str(root / "cache"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    case = tmp_path_factory.mktemp("case")
    shutil.copytree(root / "artifacts", case / "artifacts")
    (case / "artifacts" / "ops" / PACK_NAME).write_bytes(pack)
    try:
        result = merge_wheel(load_manifest(root / "deps.toml"), [case / "artifacts"], case / "dist", jobs=jobs)
    except InputError as error:
        assert error.message and "\n" not in error.message
        assert not list((case / "dist").glob("*.whl")) if (case / "dist").exists() else True
        OUTCOMES["merge:refused"] += 1
    else:
        _true_wheel(result.wheel)
        OUTCOMES["merge:wheel"] += 1
    shutil.rmtree(case, ignore_errors=True)


# --- store objects ---------------------------------------------------------------------------


@cache
def published() -> tuple[Path, Path]:
    """A file:// store holding one real artifact, and that artifact."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-store-"))
    artifact = root / "local" / "vecadd" / KEY
    (artifact / "files" / "vecadd").mkdir(parents=True)
    (artifact / "files" / "vecadd" / "_C.abi3.so").write_bytes(hashlib.sha256(b"so").digest() * 256)
    (artifact / "artifact.json").write_text(json.dumps({"dep": "vecadd", "key": KEY, "commit": "c" * 40}))
    assert SharedStore(FileBackend(root / "shared")).upload(artifact, "vecadd", KEY) == "uploaded"
    return root / "shared", artifact


def _tree(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


key_objects = st.one_of(
    st.binary(max_size=200),
    st.fixed_dictionaries({}, optional={
        "digest": st.one_of(st.text(max_size=70), st.integers(), st.none(), st.just("0" * 64)),
        "size": st.one_of(st.integers(-2, 1 << 40), st.floats(allow_nan=True), st.text(max_size=5), st.booleans(),
                          st.none()),
        "dep": st.text(max_size=10),
    }).map(lambda entry: json.dumps(entry).encode()),
)


@st.composite
def hostile_stores(draw: st.DrawFn) -> tuple[str, object]:
    target = draw(st.sampled_from(["key", "blob"]))
    kind = draw(st.sampled_from(["content", "fifo", "directory", "link to /dev/zero", "link to the blob", "flip",
                                 "truncate", "grow"]))
    if kind == "content":
        return target, draw(key_objects) if target == "key" else draw(st.binary(max_size=2000))
    if kind in ("flip", "truncate", "grow"):
        return target, (kind, draw(st.integers(0, 1 << 16)))
    return target, kind


def _fetch(store: SharedStore, staging: Path) -> tuple[bool, str]:
    result: list[tuple[bool, str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(store.fetch("vecadd", KEY, staging))
        except BaseException as error:  # reported below, on the test's thread
            errors.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not errors, errors
    assert result, "fetch blocked on the store"
    return result[0]


@FUZZ
@given(case=hostile_stores())
def test_fetch_from_a_hostile_store_returns_a_note_or_the_published_artifact(
        case: tuple[str, object], tmp_path_factory: pytest.TempPathFactory) -> None:
    template, artifact = published()
    work = tmp_path_factory.mktemp("store")
    shared = work / "shared"
    shutil.copytree(template, shared)
    key_object = shared / "keys" / "vecadd" / f"{KEY}.json"
    [blob] = (shared / "blobs").iterdir()
    target, change = case
    path = key_object if target == "key" else blob
    if isinstance(change, bytes):
        path.write_bytes(change)
    elif isinstance(change, tuple):
        how, at = change
        data = bytearray(path.read_bytes())
        if how == "flip":
            data[at % len(data)] ^= 0x01
        elif how == "truncate":
            del data[at % len(data):]
        else:
            data += bytes(at % 4096 + 1)
        path.write_bytes(bytes(data))
    else:
        moved = work / "moved"
        path.rename(moved)
        if change == "fifo":
            os.mkfifo(path)
        elif change == "directory":
            path.mkdir()
        elif change == "link to /dev/zero":
            path.symlink_to("/dev/zero")
        else:
            path.symlink_to(blob if target == "key" else moved)
    OUTCOMES[f"store:{target}:{change if isinstance(change, str) else type(change).__name__}"] += 1
    found, note = _fetch(SharedStore(FileBackend(shared)), work / "got")
    assert isinstance(note, str) and note and "\n" not in note
    if found:
        assert _tree(work / "got") == _tree(artifact)
        OUTCOMES["store:found"] += 1
    else:
        assert not (work / "got").exists()
        OUTCOMES["store:refused"] += 1
    shutil.rmtree(work, ignore_errors=True)
