"""Real servers for the cache tests, each on a free port of 127.0.0.1, stopped after its test:
redis-server (Debian's package; `.ci/run` installs it) and moto's S3 server (``moto[server]``
from the test extras). Nothing listens on anything but loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.toolchain.sccache import free_port


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on 127.0.0.1:{port}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(name="redis_url")
def redis_url_fixture(tmp_path: Path) -> Iterator[str]:
    """redis://127.0.0.1:PORT/0 of a redis-server started for the test (no persistence)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (`.ci/run` installs Debian's redis-server package)")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(process)


@pytest.fixture(name="s3_endpoint")
def s3_endpoint_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """http://127.0.0.1:PORT of moto's S3 server, with a bucket named ``artifacts`` and dummy credentials."""
    pytest.importorskip("boto3", reason="boto3 is in the test extras (pip install -e '.[test]')")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        wait_for_port(port, process, "moto S3 server")
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="artifacts")
        yield endpoint
    finally:
        stop(process)
