"""git's own rules for ref and branch names (``git check-ref-format --branch``), in Python.

A value from deps.toml or the command line that names a branch is checked here before any git
process sees it: no process is ever started with a hostile value, and a name git would refuse
(or read as an option or a refspec) is a manifest error with a position instead of a git error.
tests/test_refname.py compares this with ``git check-ref-format --branch`` on a corpus.
"""

from __future__ import annotations

# Characters git refuses anywhere in a ref name (refs.c: refname_disposition), besides the
# ASCII control characters and DEL.
_FORBIDDEN = frozenset(" ~^:?*[\\")


def refname_problem(refname: str) -> str | None:
    """Why the full ref name ``refname`` (``refs/heads/x``) is invalid, or None (git's
    check_refname_format with no flags)."""
    if not refname:
        return "it is empty"
    if refname == "@":
        return "'@' alone is not a ref name"
    if refname.endswith("/") or refname.startswith("/"):
        return "it starts or ends with '/'"
    if refname.endswith("."):
        return "it ends with '.'"
    for char in refname:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return f"it contains the control character {char!r}"
        if char in _FORBIDDEN:
            return f"it contains {char!r}"
    if ".." in refname:
        return "it contains '..'"
    if "@{" in refname:
        return "it contains '@{'"
    for component in refname.split("/"):
        if not component:
            return "it contains '//'"
        if component.startswith("."):
            return f"the component {component!r} starts with '.'"
        if component.endswith(".lock"):
            return f"the component {component!r} ends with '.lock'"
    return None


def branch_problem(name: str) -> str | None:
    """Why ``name`` is not a valid branch name (``git check-ref-format --branch``), or None.
    A leading '-' would read as an option; 'HEAD' is not a branch."""
    if name.startswith("-"):
        return "it starts with '-' (it would read as an option)"
    if name == "HEAD":
        return "'HEAD' is not a branch name"
    return refname_problem(f"refs/heads/{name}")
