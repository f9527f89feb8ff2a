"""`assemble show DEP` after a rebase dropped the first patch (#30 minors): every number the
listing shows is one `assemble show DEP N` takes, naming that same patch (main listed
``1  0002-...`` and then refused `show DEP 1`). Real git and real patch files."""

from __future__ import annotations

import re

from tests.conftest import GitWorkspace


def test_the_numbers_listed_are_the_numbers_accepted(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    series = ws.patches / "series"
    first, second = [line for line in series.read_text().splitlines() if line and not line.startswith("#")]
    (ws.patches / first).unlink()  # what a rebase that drops 0001 leaves: 0002 alone
    series.write_text(f"{second}\n")
    (ws.patches / "local-fix.patch").write_bytes((ws.patches / second).read_bytes())  # a file without a number
    series.write_text(f"{second}\nlocal-fix.patch\n")
    listing = ws.assemble("show", "kern")
    assert listing.returncode == 0, listing.stderr
    shown = re.findall(r"^ *(\S+)  (\S+\.patch)$", listing.stdout, re.M)
    assert shown == [("2", second), ("-", "local-fix.patch")], listing.stdout
    for number, name in shown:
        wanted = name if number == "-" else number
        patch = ws.assemble("show", "kern", wanted)
        assert patch.returncode == 0, patch.stderr
        assert patch.stdout == (ws.patches / name).read_text()
