"""What verify says while it works: never silent for long, never wider than the reader's screen.

A torch environment takes minutes to download and a probe tens of seconds to import torch and
load a large wheel, with nothing to say in between. ``Heartbeat`` remembers what each part of
the run is doing (installing torch 2.14.1, importing torch, loading an extension) and, when
nothing was said for ``interval`` seconds, says it again with the time it has taken. Lines relayed
from the installer are cut to the width; verify's own lines wrap between words.
"""

from __future__ import annotations

import shutil
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HEARTBEAT = 20.0  # seconds without a line before the heartbeat says what is still running (under 30)
WIDTH = 80


def width() -> int:
    """The terminal's width, at most ``WIDTH`` (a piped run: ``WIDTH``)."""
    return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


def shorten(line: str, columns: int | None = None) -> str:
    """``line`` cut to ``columns`` with an ellipsis (for another tool's lines: their tail is noise)."""
    columns = columns or width()
    return line if len(line) <= columns else line[: columns - 3].rstrip() + "..."


def wrapped(message: str, columns: int | None = None) -> list[str]:
    """``message`` in lines of ``columns``, broken between words only (a path longer than the
    width stays whole on a line of its own), continuation lines indented."""
    columns = columns or width()
    lines: list[str] = []
    for paragraph in message.splitlines() or [""]:
        indent = paragraph[: len(paragraph) - len(paragraph.lstrip())]
        lines += textwrap.wrap(paragraph, columns, subsequent_indent=indent + "    ", break_long_words=False,
                               break_on_hyphens=False) or [paragraph]
    return lines


class Heartbeat:
    """A progress callback that also repeats, every ``interval`` seconds of silence, what each
    running part is doing. Thread-safe: the probes of several torch versions report at once."""

    def __init__(self, say: Callable[[str], None], interval: float = HEARTBEAT) -> None:
        self._say = say
        self._interval = interval
        self._lock = threading.Lock()
        self._doing: dict[str, tuple[str, float]] = {}  # part -> (what, since when)
        self._quiet: set[str] = set()  # parts whose tool draws its own progress on the terminal
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        with self._lock:
            self._last = time.monotonic()
            self._say(message)

    def relay(self, message: str) -> None:
        """A progress line of the environment's making: the tool's own lines (uv's, pip's: indented,
        as ``toolchain.installer`` passes them on) cut to the width, assembler's whole."""
        self(shorten(message) if message.startswith("  ") else message)

    def doing(self, part: str, what: str | None, quiet: bool = False) -> None:
        """``part`` ("torch 2.14.1") is now doing ``what``; None: it is done. ``quiet``: a tool
        draws its own progress meanwhile, so the heartbeat does not write over it."""
        with self._lock:
            if what is None:
                self._doing.pop(part, None)
                self._quiet.discard(part)
                return
            current = self._doing.get(part)
            self._doing[part] = (what, current[1] if current and current[0] == what else time.monotonic())
            if quiet:
                self._quiet.add(part)
            else:
                self._quiet.discard(part)

    def beat(self) -> list[str]:
        """Say what is still running when nothing was said for ``interval`` seconds; the lines said."""
        with self._lock:
            now = time.monotonic()
            if now - self._last < self._interval:
                return []
            lines = []
            for part, (what, since) in sorted(self._doing.items()):
                if part not in self._quiet:
                    head, tail = f"  {part}: still ", f" ({now - since:.0f} s)"
                    lines.append(head + shorten(what, width() - len(head) - len(tail)) + tail)  # the time is never cut
            for line in lines:
                self._say(line)
            if lines:
                self._last = now
            return lines

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self._interval / 4)):
            self.beat()

    @contextmanager
    def running(self) -> Iterator[Heartbeat]:
        """The heartbeat's thread, for the duration of the block."""
        self._thread = threading.Thread(target=self._run, name="verify-heartbeat", daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

