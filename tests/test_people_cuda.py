"""`--cuda 12.4` is refused before anything is downloaded (#30 minors): PyPI's CUDA 12 wheels
have no nvcc, so asking the index (main downloaded ~24 MB, then said so) is wasted. The index
is a real HTTP server on 127.0.0.1 that records the requests it gets; none may come."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from assembler.errors import ToolchainError
from assembler.toolchain.cuda import select_cuda


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """pip's (and so uv's) index is a local server; the list fills with the paths asked of it."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    for name in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_NO_INDEX", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    try:
        yield asked
    finally:
        server.shutdown()
        thread.join()


def test_cuda_12_is_refused_before_the_index_is_asked(index: list[str], tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as raised:
        select_cuda("12.4")
    error = raised.value
    assert "PyPI has no nvcc for CUDA 12.4" in error.message and "nvidia-cuda-nvcc-cu12" in error.message
    assert "--cuda 13.0 or newer" in (error.hint or "") and "install CUDA 12.4 and set CUDA_HOME" in (error.hint or "")
    assert index == []  # nothing downloaded, nothing even asked
    toolchains = tmp_path / "cache" / "toolchains"
    assert not toolchains.exists() or not any(toolchains.iterdir())
