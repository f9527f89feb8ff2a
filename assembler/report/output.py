"""The one place consoles and JSON are made, so every command prints the same way.

``console`` and ``err_console`` are created on first use (module ``__getattr__``) by
``make_console``: importing rich costs ~30 ms, which a ``--json`` run or a no-op should not pay.
Their colour follows ``--color`` and ``NO_COLOR``; without a terminal they never hard-wrap (a
CI log keeps wheel names and paths on one line) and are wide. Tables are report.table's, never
rich's.

JSON: a command hands its document to ``emit_json``; inside ``cli.main`` (a ``json_session``)
it is held and written once at the end inside the envelope ``{"schema", "command", "ok", ...}``,
with an ``error`` object when the command failed (``envelope``). Outside a session (a library
caller) it is written at once.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

    from rich.console import Console
    console: Console
    err_console: Console

COLORS = ("auto", "always", "never")
# Width of a console that is not a terminal: wide enough that no table column is ever cut, while
# rules and panels (which fill the width) stay printable. COLUMNS, when set, wins.
PIPED_WIDTH = 1000


class Settings:
    """The global options every command shares (cli.main sets them from -v/-q/--color). A plain
    class, as are the other records every command loads: the dataclasses module (with the inspect
    and ast it imports) and each generated class cost ~15 ms of the 100 ms start-up budget."""

    __slots__ = ("color", "verbosity")

    def __init__(self, color: str = "auto", verbosity: int = 0) -> None:
        self.color = color
        self.verbosity = verbosity  # -v adds one, -q takes one away


settings = Settings()


def configure(color: str = "auto", verbosity: int = 0) -> None:
    """Apply --color and -v/-q; consoles made before are dropped so the next use sees them."""
    settings.color = color
    settings.verbosity = verbosity
    _console.cache_clear()


def color_enabled(stream_is_terminal: bool) -> bool:
    """--color always/never, else colour on a terminal unless NO_COLOR is set (no-color.org)."""
    if settings.color != "auto":
        return settings.color == "always"
    return stream_is_terminal and not os.environ.get("NO_COLOR")


def in_ci() -> bool:
    """Running under a CI service (GITHUB_ACTIONS, CI): logs are read as plain text, later."""
    return bool(os.environ.get("GITHUB_ACTIONS") or os.environ.get("CI"))


DEFAULT_COLUMNS = 80  # a terminal that reports no usable size (a 0x0 pty, a serial console)
MIN_COLUMNS = 20  # narrower than this is a size nobody reads tables at: the default instead


def terminal_columns(stream: IO[str] | None) -> int | None:
    """The width output on ``stream`` is fitted to: COLUMNS when set (and positive), else the
    terminal's own when it reports a usable one, else DEFAULT_COLUMNS on a terminal; None for a
    pipe or a file (nothing to fit). The one rule for tables, consoles and --help."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), MIN_COLUMNS)
    try:
        if stream is None or not stream.isatty():
            return None
        size = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return None
    return size if size >= MIN_COLUMNS else DEFAULT_COLUMNS


def make_console(stderr: bool) -> Console:
    """The Console for stdout or stderr under the current settings (the one factory)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty()
    colour = color_enabled(terminal)
    width = terminal_columns(stream) or PIPED_WIDTH
    return Console(
        stderr=stderr, highlight=False, soft_wrap=not terminal, width=width,
        force_terminal=True if settings.color == "always" else None,
        no_color=not colour, color_system="auto" if colour else None,
    )


@functools.cache
def _console(stderr: bool) -> Console:
    return make_console(stderr)


def __getattr__(name: str) -> Console:
    if name in ("console", "err_console"):
        return _console(name == "err_console")
    raise AttributeError(name)


def clean(text: str) -> str:
    """``text`` safe to print (the one escape for data shown to people: table cells, error and
    hint lines, notes, Markdown cells, rebase lines): whitespace other than a space (newline, tab) becomes a space, any
    other character that is not printable (ESC, DEL, C1 controls, bidi overrides) is shown
    escaped as Python writes it (``\\x1b``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else " " if ch.isspace() else ascii(ch)[1:-1] for ch in text)


def clean_block(text: str) -> str:
    """Text of several lines (a diff, a commit message, a range-diff) safe to print: line breaks
    and tabs kept, every other character that is not printable escaped as :func:`clean` does
    (ESC, CR, DEL, C1 controls, bidi overrides): data never moves the cursor or recolours."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t" else ascii(ch)[1:-1] for ch in text)


def note(message: str, level: int = 0) -> None:
    """A progress or status line on stderr, unless -q brought the verbosity below ``level``
    (level 1: only with -v). Plain text, never markup; one line, never wrapped when piped.
    The line is also what the heartbeat repeats while nothing else is said."""
    if settings.verbosity >= level:
        _console(True).print(clean(message), markup=False, highlight=False, soft_wrap=True)
        _heartbeat.said(message)


def status(message: str, active: bool = True) -> AbstractContextManager[Any]:
    """A spinner on stderr while a step runs: only on a terminal, and not under -q. A CI log
    gets no redraw: while the step runs, the heartbeat says every HEARTBEAT_S that it still does."""
    if settings.verbosity < 0 or not sys.stderr.isatty():
        return _heartbeat.step(message)
    if not active:
        return nullcontext()
    return _console(True).status(message, spinner="dots")


# ---------------------------------------------------------------------------------------------
# The heartbeat: a CI log never goes silent for long


HEARTBEAT_S = 30.0  # at most this long without a line on a piped stderr while a command runs


class Heartbeat:
    """While a command runs with stderr piped (a CI log, a file), a line every ``HEARTBEAT_S``
    in which nothing else was printed: the step in progress and how long it has run, e.g.
    ``vecadd: mirror: still running (61 s)``. The step is the innermost ``status()`` block, else
    the last ``note()``; a command with several things in flight (a build) says them all
    through ``describe``. A terminal has spinners instead, and -q silences it."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0.0  # when a line was last printed (monotonic)
        self._message: str | None = None  # what the heartbeat repeats
        self._since = 0.0  # when that step began
        self.describe: Callable[[], list[str]] | None = None  # the lines to print instead

    def said(self, message: str | None) -> None:
        import time

        with self._lock:
            self._last = time.monotonic()
            if message is not None:
                self._message, self._since = message, self._last

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        """A step that prints nothing while it runs (``status`` off a terminal)."""
        with self._lock:
            outer = (self._message, self._since)
        self.said(message)
        try:
            yield None
        finally:
            with self._lock:
                self._message, self._since = outer

    def lines(self, now: float) -> list[str]:
        """What a beat at ``now`` prints: nothing when a line went out within HEARTBEAT_S."""
        with self._lock:
            if now - self._last < HEARTBEAT_S:
                return []
            describe, message, since = self.describe, self._message, self._since
        if describe is not None:
            return list(describe())
        return [] if message is None else [f"{message.rstrip('.…')}: still running ({now - since:.0f} s)"]

    def repeat(self, now: float) -> list[str]:
        """The line that says the last step still runs (what ``describe`` may fall back to)."""
        with self._lock:
            message, since = self._message, self._since
        return [] if message is None else [f"{message.rstrip('.…')}: still running ({now - since:.0f} s)"]

    def _run(self) -> None:
        import time

        while not self._stopped.wait(min(HEARTBEAT_S, 5.0) / 2):
            if settings.verbosity < 0:
                continue
            now = time.monotonic()
            beat = self.lines(now)
            for line in beat:
                _console(True).print(clean(line), markup=False, highlight=False, soft_wrap=True)
            if beat:
                with self._lock:
                    self._last = now

    @contextmanager
    def running(self) -> Iterator[Heartbeat]:
        """Beat while the block runs, when stderr is not a terminal."""
        import threading
        import time

        if sys.stderr.isatty() or self._thread is not None:
            yield self
            return
        self._stopped.clear()
        with self._lock:
            self._last = self._since = time.monotonic()
            self._message, self.describe = None, None
        self._thread = threading.Thread(target=self._run, name="assemble-heartbeat", daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stopped.set()
            self._thread.join()
            self._thread = None


_heartbeat = Heartbeat()


def current_heartbeat() -> Heartbeat:
    """The heartbeat a command's progress display may tell what is running (``describe``)."""
    return _heartbeat


def heartbeat() -> AbstractContextManager[Heartbeat]:
    """The command's heartbeat (``cli.main`` runs every command inside it)."""
    return _heartbeat.running()


class DeferredStatus:
    """``status(message)``, started only when ``start()`` is called inside the block: a command
    whose slow part may not happen (a stored answer reused) shows no spinner, and loads no rich,
    when it does not."""

    def __init__(self, message: str, active: bool = True) -> None:
        self.message, self.active = message, active
        self._spinner: AbstractContextManager[Any] | None = None

    def start(self) -> None:
        if self._spinner is None and self.active:
            self._spinner = status(self.message)
            self._spinner.__enter__()

    def __enter__(self) -> DeferredStatus:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._spinner is not None:
            self._spinner.__exit__(kind, value, trace)
            self._spinner = None


# ---------------------------------------------------------------------------------------------
# JSON


class JsonSession:
    """What ``cli.main`` knows while a command runs: its name and the document it emitted."""

    __slots__ = ("command", "document", "emitted")

    def __init__(self, command: str) -> None:
        self.command = command
        self.document: Any = None
        self.emitted = False


_session: JsonSession | None = None


@contextmanager
def json_session(command: str) -> Iterator[JsonSession]:
    """Hold what ``emit_json`` is given until ``cli.main`` writes the envelope."""
    global _session
    previous, _session = _session, JsonSession(command)
    try:
        yield _session
    finally:
        _session = previous


def emit_json(data: Any) -> None:
    """JSON goes to stdout alone (progress and notes go to stderr), so CI can pipe it. Within a
    ``json_session`` it is held for the envelope; else written now."""
    if _session is not None:
        _session.document, _session.emitted = data, True
        return
    write_json(data)


def write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


DEFAULT_SCHEMA = 1


def envelope(command: str, document: Any, exit_code: int, error: dict[str, Any] | None) -> dict[str, Any]:
    """The one JSON shape: ``schema`` (the document's own, else 1), ``command``, ``ok`` (exit
    code 0), the command's keys (a list becomes ``results``) and, when it failed, ``error``
    ({message, hint, exit_code})."""
    body: dict[str, Any] = {}
    if isinstance(document, dict):
        body = dict(document)
    elif document is not None:
        body = {"results": document}
    out: dict[str, Any] = {"schema": body.pop("schema", DEFAULT_SCHEMA), "command": body.pop("command", command),
                           "ok": exit_code == 0}
    body.pop("ok", None)
    out.update(body)
    if error is not None:
        out["error"] = error
    elif exit_code != 0:
        out["error"] = {"message": f"{command} finished with exit code {exit_code}", "hint": None,
                        "exit_code": exit_code}
    return out  # a command that always carries "error" (build) keeps its null on success


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"
