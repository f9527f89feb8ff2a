"""A terminal that reports 0x0 (a fresh pty, a serial console) gets tables at 80 columns, not one
word per line: a real pty, its size set to 0x0 with TIOCSWINSZ, the real CLI writing to it."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from tests.conftest import GitWorkspace


def _run_on_pty(args: list[str], rows: int, columns: int, env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    try:
        process = subprocess.Popen([sys.executable, "-m", "assembler", *args], stdin=slave, stdout=slave, stderr=slave,
                                   env=env, close_fds=True)
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")[-2000:]
    finally:
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_a_zero_sized_terminal_is_read_as_80_columns(git_workspace: GitWorkspace) -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env.update(ASSEMBLE_CACHE=str(git_workspace.cache), NO_COLOR="1")
    text = _run_on_pty(["-C", str(git_workspace.root), "deps"], 0, 0, env)
    lines = [line.rstrip() for line in text.replace("\r", "").splitlines() if line.strip()]
    assert any("kern" in line and "main" in line for line in lines), text  # a row, whole, on one line
    assert max(len(line) for line in lines) <= 80, text
    help_text = _run_on_pty(["deps", "--help"], 0, 0, env)
    assert max(len(line) for line in help_text.replace("\r", "").splitlines()) <= 80
    assert sum(len(line.split()) <= 1 for line in help_text.splitlines() if line.strip()) < 5, help_text
