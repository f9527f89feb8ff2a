"""Checks for values that reach git, ssh or the filesystem: repository URLs and plain file names.

Whoever wrote deps.toml or a series (a pull request, say) must not be able to turn a value into
an option of a process (a leading '-'), a second line of a config file (a newline), another
transport (``ext::``) or a path outside the directory it belongs to. Each function returns why
a value is refused, or None; callers turn that into an error with a position.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

URL_SCHEMES = ("https", "http", "ssh", "git", "file")
# scp-like syntax git accepts for ssh: [user@]host:path, with no '/' before the first ':'.
_SCP_RE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:]+):(?P<path>.*)$")
MAX_VALUE_CHARS = 4096  # any longer URL, ref or file name is a mistake or an attack


# A torch release as pip names it, always MAJOR.MINOR.PATCH: 2.13.0, 2.11.0+cu130, 2.14.0rc1,
# 2.15.0.dev20260101. The one spelling of --torch, [bundle] torch and verify-torch: a build
# environment, a verify environment and the build's check ("holds torch 2.13.0+cpu") all name
# torch by it, so "2.13" would be a second name for the same environment, or a mismatch.
TORCH_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+|\.post\d+|\.dev\d+)*(\+[A-Za-z0-9.]+)?$")
_SHORT_TORCH_RE = re.compile(r"^(\d+\.\d+)(\+[A-Za-z0-9.]+)?$")


def torch_release_problem(value: str) -> tuple[str, str] | None:
    """Why ``value`` is not a torch release (X.Y.Z), and the fix; None when it is one. A short
    ``2.13`` is refused rather than read as 2.13.0: pip would take it as 2.13.0 but a reader may
    mean the newest 2.13.x, and one spelling keeps one environment per torch."""
    if TORCH_RELEASE_RE.match(value):
        return None
    short = _SHORT_TORCH_RE.match(value)
    example = f"{short[1]}.0{short[2] or ''}" if short else "2.13.0"
    return (f"{value[:40]!r} is not a torch release: expected MAJOR.MINOR.PATCH (X.Y.Z)",
            f"write {example}" + (" (the full release, as pip names it)" if short else ", or e.g. 2.11.0+cu130"))


def shown(value: str) -> str:
    """A value as an error message shows it: escaped (no newline reaches the terminal), cut short."""
    return repr(value if len(value) <= 80 else value[:80] + "...")


def control_character(value: str) -> str | None:
    """The first ASCII control character (or DEL) in ``value``, shown escaped."""
    for char in value:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return repr(char)
    return None


def text_problem(value: str, limit: int = MAX_VALUE_CHARS) -> str | None:
    """Why ``value`` is no value at all: empty, longer than ``limit``, or holding a control
    character (what every check below refuses first)."""
    if not value:
        return "it is empty"
    if len(value) > limit:
        return f"it is {len(value)} characters long (at most {limit})"
    if (char := control_character(value)) is not None:
        return f"it contains the control character {char}"
    return None


def url_problem(url: str, *, prefix: bool = False) -> str | None:
    """Why ``url`` is not a repository location assemble passes to git: allowed are
    https/http/ssh/git/file URLs, scp-like ``user@host:path`` and local paths. A ``prefix``
    (a [mirrors] key or value) may end where the path begins (``git@github.com:``)."""
    if (problem := text_problem(url)) is not None:
        return problem
    if url.startswith("-"):
        return "it starts with '-' (it would read as an option)"
    if "::" in url.split("/", 1)[0]:
        return "'transport::address' URLs run helper programs"
    if "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in URL_SCHEMES:
            return f"the scheme {scheme!r} is not one of {', '.join(URL_SCHEMES)}"
        try:
            netloc = urlsplit(url).netloc
        except ValueError as exc:
            return f"it is not a valid URL ({exc})"
        if netloc.startswith("-") or "@-" in netloc:
            return "its user or host starts with '-' (ssh would read it as an option)"
        return None
    scp = _SCP_RE.match(url)
    if scp is not None:  # git reads "host:path" as ssh even without a user
        if (scp.group("user") or "").startswith("-") or scp.group("host").startswith("-"):
            return "its user or host starts with '-' (ssh would read it as an option)"
        if not scp.group("host") or not (scp.group("path") or prefix):
            return "an scp-like URL needs host:path"
    return None


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not a plain file name inside one directory (a series entry)."""
    if (problem := text_problem(name, limit=255)) is not None:
        return problem
    if "/" in name or "\\" in name:
        return "it contains a path separator (series entries are file names in the patches directory)"
    if name in (".", ".."):
        return f"{name!r} is a directory"
    if name.startswith("-"):
        return "it starts with '-' (it would read as an option)"
    if name.startswith("."):
        return "it starts with '.' (hidden files are assemble's own temporaries)"
    return None


def relative_path_problem(path: str) -> str | None:
    """Why ``path`` is not a relative path that stays below its directory."""
    if (problem := text_problem(path)) is not None:
        return problem
    if path.startswith("/"):
        return "it is absolute"
    if path.startswith("-"):
        return "it starts with '-' (it would read as an option)"
    if ".." in path.split("/"):
        return "it climbs out with '..'"
    return None


def install_destination_problem(dest: str) -> str | None:
    """Why ``dest`` (an [install] destination: a directory inside the wheel, "" for its root)
    is not one: it leaves the wheel (absolute, '..', a drive), holds a backslash (a separator
    on Windows, where pip would climb with it) or a control character (a newline splits
    RECORD), or lands in a directory an installer treats specially: a ``*.dist-info`` (the
    merge writes the only one) or a ``*.data`` scheme directory (its ``data/``, ``scripts/``,
    ``headers/`` are installed outside site-packages)."""
    if not dest:
        return None
    if len(dest) > MAX_VALUE_CHARS:
        return f"it is {len(dest)} characters long (at most {MAX_VALUE_CHARS})"
    if (char := control_character(dest) or _format_character(dest)) is not None:
        return f"it contains the control character {char}"
    if "\\" in dest:
        return "it contains a backslash (write '/' between directories)"
    parts = dest.split("/")
    if dest.startswith("/") or ".." in parts or re.match(r"^[A-Za-z]:", dest):
        return "it leaves the wheel"
    top = next((part for part in parts if part not in ("", ".")), "").lower()
    if top.endswith(".dist-info"):
        return "it is inside a .dist-info directory, which the merge writes itself"
    if top.endswith(".data"):
        return "it is inside a .data directory, whose schemes (data, scripts, headers) install outside site-packages"
    return None


def _format_character(value: str) -> str | None:
    """The first C1 control, line or paragraph separator, or bidirectional override in
    ``value`` (a name that reads differently from what it is), shown escaped."""
    for char in value:
        code = ord(char)
        if 0x80 <= code <= 0x9F or code in (0x2028, 0x2029) or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
            return ascii(char)
    return None
