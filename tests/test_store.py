"""The shared artifact store: content-addressed publish and digest-checked download on a shared
directory and on a real S3 server (moto on 127.0.0.1), and two CI runners that build disjoint
halves of `plan --matrix` into a file:// store, then a third that merges and reuses them."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from assembler.store import SharedStore, StoreUnavailable, open_store
from assembler.store.files import FileBackend
from tests.build_support import ci_runner

KEY = "0123456789abcdef0123456789abcdef"


def _artifact(root: Path, dep: str = "vecadd", key: str = KEY) -> Path:
    directory = root / dep / key
    (directory / "files" / "vecadd").mkdir(parents=True)
    (directory / "files" / "vecadd" / "_C.abi3.so").write_bytes(os.urandom(4096))
    (directory / "files.zip").write_bytes(b"PK" + os.urandom(512))
    (directory / "artifact.json").write_text(json.dumps({"dep": dep, "key": key, "commit": "c" * 40}))
    return directory


def _same_tree(a: Path, b: Path) -> bool:
    def listing(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return listing(a) == listing(b)


def _round_trip(store: SharedStore, tmp_path: Path) -> None:
    artifact = _artifact(tmp_path / "local")
    assert not store.has("vecadd", KEY)
    assert store.fetch("vecadd", KEY, tmp_path / "miss") == (False, "not in the shared store")
    assert store.upload(artifact, "vecadd", KEY) == "uploaded"
    assert store.has("vecadd", KEY)
    assert store.fetch("vecadd", KEY, tmp_path / "got") == (True, "downloaded")
    assert _same_tree(artifact, tmp_path / "got")
    assert not list(artifact.parent.glob(".*.tar"))  # the packed blob was temporary


def test_file_store_round_trip_is_content_addressed(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path / 'shared'}")
    assert store is not None
    _round_trip(store, tmp_path)
    [blob] = (tmp_path / "shared" / "blobs").iterdir()
    entry = json.loads((tmp_path / "shared" / "keys" / "vecadd" / f"{KEY}.json").read_text())
    assert blob.name == f"{entry['digest']}.tar" == f"{hashlib.sha256(blob.read_bytes()).hexdigest()}.tar"
    assert entry["size"] == blob.stat().st_size
    leftovers = [p.name for p in (tmp_path / "shared").rglob("*") if p.name.startswith(".")]
    assert leftovers == []  # every object was renamed into place


@pytest.mark.parametrize("damage", ["corrupt", "truncate", "remove"])
def test_damaged_download_is_refused(tmp_path: Path, damage: str) -> None:
    store = SharedStore(FileBackend(tmp_path / "shared"))
    store.upload(_artifact(tmp_path / "local"), "vecadd", KEY)
    [blob] = (tmp_path / "shared" / "blobs").iterdir()
    data = blob.read_bytes()
    if damage == "corrupt":
        blob.write_bytes(data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:])
    elif damage == "truncate":
        blob.write_bytes(data[: len(data) // 2])
    else:
        blob.unlink()
    found, note = store.fetch("vecadd", KEY, tmp_path / "got")
    assert not found
    assert ("missing" if damage == "remove" else "corrupt or partial") in note
    assert not (tmp_path / "got").exists()


def test_blob_that_escapes_is_refused(tmp_path: Path) -> None:
    """A store's content is data: a member outside the artifact or a link is never written."""
    for member in ("../escaped", "files/link"):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(member)
            if member.endswith("link"):
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                archive.addfile(info)
            else:
                info.size = 3
                archive.addfile(info, io.BytesIO(b"bad"))
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        shared = tmp_path / "shared"
        (shared / "blobs").mkdir(parents=True, exist_ok=True)
        (shared / "blobs" / f"{digest}.tar").write_bytes(data)
        (shared / "keys" / "vecadd").mkdir(parents=True, exist_ok=True)
        (shared / "keys" / "vecadd" / f"{KEY}.json").write_text(json.dumps({"digest": digest, "size": len(data)}))
        found, note = SharedStore(FileBackend(shared)).fetch("vecadd", KEY, tmp_path / "got" / "x")
        assert not found and "unusable" in note, note
        assert not (tmp_path / "got" / "escaped").exists()
        assert not (tmp_path / "got" / "x").exists()


def test_s3_store_against_a_real_server(tmp_path: Path, s3_endpoint: str) -> None:
    store = open_store("s3://artifacts/release/2026", s3_endpoint)
    assert store is not None
    _round_trip(store, tmp_path)
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    names = sorted(item["Key"] for item in client.list_objects_v2(Bucket="artifacts")["Contents"])
    assert names[0].startswith("release/2026/blobs/") and names[1] == f"release/2026/keys/vecadd/{KEY}.json"
    client.put_object(Bucket="artifacts", Key=names[0], Body=b"not the artifact")  # a corrupt blob
    found, note = store.fetch("vecadd", KEY, tmp_path / "again")
    assert not found and "corrupt or partial" in note
    # the endpoint may also come from AWS_ENDPOINT_URL
    assert open_store("s3://artifacts/release/2026", None, {"AWS_ENDPOINT_URL": s3_endpoint}).has("vecadd", KEY)  # type: ignore[union-attr]


def test_unreachable_store_is_a_note_not_a_failure(tmp_path: Path) -> None:
    store = open_store("s3://artifacts/x", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert store is not None
    found, note = store.fetch("vecadd", KEY, tmp_path / "got")
    assert not found and note.startswith("shared store unavailable")
    with pytest.raises(StoreUnavailable):  # "could not look", not "not there"
        store.has("vecadd", KEY)
    assert store.upload(_artifact(tmp_path / "local"), "vecadd", KEY).startswith("upload to the shared store failed")


# --- runners -----------------------------------------------------------------------------------


def _runner(root: Path, toolchains: Path, store: Path) -> tuple[Path, dict[str, str]]:
    """A fresh CI runner whose shared artifact store is the directory ``store``, and its environment."""
    ws, cache = ci_runner(root, toolchains, f'artifacts = "file://{store}"')
    return ws, {**os.environ, "ASSEMBLE_CACHE": str(cache)}


def _assemble(ws: Path, env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args], env=env, capture_output=True,
                          text=True, check=False)
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.integration
def test_two_runners_build_halves_and_a_third_merges(tmp_path: Path, toolchains: Path) -> None:
    store = tmp_path / "shared-store"
    ws_a, env_a = _runner(tmp_path / "a", toolchains, store)
    ws_b, env_b = _runner(tmp_path / "b", toolchains, store)
    matrix = json.loads(_assemble(ws_a, env_a, "plan", "--matrix", "--json", "--cuda", "13.2").stdout)
    entries = matrix["include"]
    assert sorted(e["dep"] for e in entries) == ["rowsum", "scalekit", "vecadd"]
    assert not any(e["in_store"] or e["cached"] for e in entries)
    assert [e["cost"] for e in entries] == sorted((e["cost"] for e in entries), reverse=True)
    halves = {"a": entries[0::2], "b": entries[1::2]}
    for name, ws, env in (("a", ws_a, env_a), ("b", ws_b, env_b)):
        only = [arg for e in halves[name] for arg in ("--only", e["dep"])]
        report = json.loads(_assemble(ws, env, "build", "--cuda", "13.2", "--json", *only, "--artifacts",
                                      str(tmp_path / f"out-{name}")).stdout)
        assert {d["dep"]: d["shared"] for d in report["deps"]} == {e["dep"]: "uploaded" for e in halves[name]}
        for entry in halves[name]:  # the planned key is the key the build used
            assert (json.loads((tmp_path / f"out-{name}" / entry["dep"] / "artifact.json").read_text())["key"]
                    == entry["key"])

    ws_c, env_c = _runner(tmp_path / "c", toolchains, store)
    planned = {e["dep"]: e for e
               in json.loads(_assemble(ws_c, env_c, "plan", "--matrix", "--json", "--cuda", "13.2").stdout)["include"]}
    assert all(e["in_store"] and not e["cached"] and e["cost"] == 0 for e in planned.values()), planned
    merged = json.loads(_assemble(ws_c, env_c, "merge", "--json", str(tmp_path / "out-a"),
                                  str(tmp_path / "out-b")).stdout)
    assert set(merged["deps"]) == {"rowsum", "scalekit", "vecadd"}
    # the whole build on the third runner compiles nothing: every artifact comes from the store
    report = json.loads(_assemble(ws_c, env_c, "build", "--cuda", "13.2", "--json").stdout)
    assert ({d["dep"]: (d["status"], d["shared"]) for d in report["deps"]}
            == {name: ("cached", "downloaded") for name in planned})
    # a reused artifact reports the compiler-cache figures of the runner that built it
    assert all(d["compiler_cache"]["reused"] and d["compiler_cache"]["requests"] > 0
               for d in report["deps"]), report["deps"]
    assert report["wheel"] and Path(report["wheel"]).name == Path(merged["wheel"]).name

    # artifacts of another toolchain are refused, naming the field
    mixed = tmp_path / "out-mixed"
    shutil.copytree(tmp_path / "out-b", mixed)
    record_path = next(mixed.glob("*/artifact.json"))
    record = json.loads(record_path.read_text())
    record["toolchain"]["cxx"] = "c++ (GCC) 99.0.0"
    record_path.write_text(json.dumps(record))
    refused = _assemble(ws_c, env_c, "merge", str(tmp_path / "out-a"), str(mixed), ok=False)
    assert refused.returncode == 2 and "cxx differs" in refused.stderr, refused.stderr

    # a corrupt blob in the store: the next runner notices, rebuilds and publishes a sound one
    entry = json.loads((store / "keys" / "vecadd" / f"{planned['vecadd']['key']}.json").read_text())
    blob = store / "blobs" / f"{entry['digest']}.tar"
    blob.write_bytes(blob.read_bytes()[:-100])
    ws_d, env_d = _runner(tmp_path / "d", toolchains, store)
    done = _assemble(ws_d, env_d, "build", "--cuda", "13.2", "--json", "--only", "vecadd")
    assert "corrupt or partial" in done.stderr
    [dep] = json.loads(done.stdout)["deps"]
    assert (dep["status"], dep["shared"]) == ("built", "uploaded")
    assert (SharedStore(FileBackend(store)).fetch("vecadd", planned["vecadd"]["key"], tmp_path / "check")
            == (True, "downloaded"))


# --- a hostile store (issue 21, item 4) -----------------------------------------------------------


def _key_object(shared: Path, entry: object = None) -> Path:
    keys = shared / "keys" / "vecadd"
    keys.mkdir(parents=True, exist_ok=True)
    path = keys / f"{KEY}.json"
    if entry is not None:
        path.write_text(json.dumps(entry))
    return path


def _fetch_guarded(store: SharedStore, staging: Path, unblock: Path | None = None) -> tuple[bool, str]:
    """fetch on a thread, so that a read that blocks fails this test instead of hanging the suite
    (``unblock``: a FIFO to open for writing if it does)."""
    import threading

    result: list[tuple[bool, str]] = []
    worker = threading.Thread(target=lambda: result.append(store.fetch("vecadd", KEY, staging)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive() and unblock is not None:
        with unblock.open("wb"):
            pass
        worker.join(60)
    assert result, "fetch blocked on the store"
    return result[0]


def test_a_key_object_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    fifo = _key_object(shared)
    os.mkfifo(fifo)
    found, note = _fetch_guarded(SharedStore(FileBackend(shared)), tmp_path / "got", unblock=fifo)
    assert not found and "is a FIFO, not a regular file" in note and note.endswith("rebuilt")
    assert not SharedStore(FileBackend(shared)).has("vecadd", KEY)


def test_a_huge_sparse_key_object_is_not_read(tmp_path: Path) -> None:
    """The issue's was 6 GB and read whole; 256 MiB shows the same (refused from its size)."""
    import tracemalloc

    shared = tmp_path / "shared"
    key = _key_object(shared, {"digest": "ab" * 32, "size": 10})
    with key.open("r+b") as handle:
        handle.truncate(256 << 20)
    tracemalloc.start()
    try:
        found, note = SharedStore(FileBackend(shared)).fetch("vecadd", KEY, tmp_path / "got")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not found and f"is {256 << 20} bytes, over the limit of 65536" in note
    assert peak < 8 << 20


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere"])
def test_a_blob_that_is_a_link_is_not_followed(tmp_path: Path, target: str) -> None:
    """A blob linked to /dev/zero was copied until the disk was full; a link to a file of this
    machine would be read. Neither is followed, and nothing is written."""
    shared = tmp_path / "shared"
    store = SharedStore(FileBackend(shared))
    store.upload(_artifact(tmp_path / "local"), "vecadd", KEY)
    [blob] = (shared / "blobs").iterdir()
    moved = tmp_path / "moved.tar"
    blob.rename(moved)
    blob.symlink_to(target if target.startswith("/") else moved)
    found, note = store.fetch("vecadd", KEY, tmp_path / "got" / "x")
    assert not found and "is a symbolic link" in note
    assert not (tmp_path / "got").exists() or not any((tmp_path / "got").iterdir())


@pytest.mark.parametrize("entry", [
    {"digest": "ab" * 32, "size": 1 << 50},
    {"digest": "ab" * 32, "size": "4096"},
    {"digest": "ab" * 32, "size": True},
    {"digest": ["ab" * 32], "size": 1},
    ["not", "an", "object"],
])
def test_a_key_object_declaring_nonsense_is_refused_before_downloading(tmp_path: Path, entry: object) -> None:
    shared = tmp_path / "shared"
    _key_object(shared, entry)
    (shared / "blobs").mkdir()
    (shared / "blobs" / f"{'ab' * 32}.tar").symlink_to("/dev/zero")  # would be read if asked for
    found, note = SharedStore(FileBackend(shared)).fetch("vecadd", KEY, tmp_path / "got")
    assert not found and note.endswith("rebuilt") and "symbolic link" not in note, note


def test_the_declared_size_bounds_the_copy(tmp_path: Path) -> None:
    """A blob larger than its key object says is refused from its size, not copied whole."""
    shared = tmp_path / "shared"
    store = SharedStore(FileBackend(shared))
    store.upload(_artifact(tmp_path / "local"), "vecadd", KEY)
    [blob] = (shared / "blobs").iterdir()
    with blob.open("ab") as grown:
        grown.truncate(blob.stat().st_size + (64 << 20))
    found, note = store.fetch("vecadd", KEY, tmp_path / "got")
    assert not found and "corrupt or partial" in note and "its key object says" in note
    assert not list(tmp_path.glob("got*"))


def test_s3_objects_are_bounded_by_their_length(tmp_path: Path, s3_endpoint: str) -> None:
    import boto3

    store = open_store("s3://artifacts/hostile", s3_endpoint)
    assert store is not None
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    key = f"hostile/keys/vecadd/{KEY}.json"
    client.put_object(Bucket="artifacts", Key=key, Body=b" " * (128 << 10) + b"{}")
    found, note = store.fetch("vecadd", KEY, tmp_path / "got")
    assert not found and ("over the limit of 65536" in note or "the limit is 65536" in note), note
    digest = "cd" * 32
    client.put_object(Bucket="artifacts", Key=key, Body=json.dumps({"digest": digest, "size": 10}).encode())
    client.put_object(Bucket="artifacts", Key=f"hostile/blobs/{digest}.tar", Body=b"\0" * (1 << 20))
    found, note = store.fetch("vecadd", KEY, tmp_path / "got")
    assert not found and "corrupt or partial" in note and "its key object says 10" in note, note
    assert not list(tmp_path.glob("got*"))
