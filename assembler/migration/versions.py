"""The torch release that provides each rule's stable equivalent, from the build torch's own
headers: the ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z`` guards around its
declaration (unguarded: the first Stable-ABI release, the shim table's baseline), or, for a
rule that names a C shim function, the shim table the audit ships."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from assembler.audit.torchdata import Version, load_table
from assembler.audit.torchheaders import feature_guarded_lines
from assembler.migration.lexer import strip_comments
from assembler.migration.rules import Rule, RuleSet


@dataclass(frozen=True)
class Provided:
    """Where a rule's version came from."""

    since: str | None
    source: str  # "torch headers", "shim table", "rules data"


def short(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def declaration_version(text: str, declares: re.Pattern[str] | None, baseline: Version) -> Version | None:
    """The earliest release in which ``text`` (a header) declares ``declares``: the innermost
    ``>=`` guard around each match (the baseline when unguarded), the lowest over matches;
    None when nothing matches. Without ``declares`` the header itself counts, unguarded."""
    if declares is None:
        return baseline
    best: Version | None = None
    for line, since in feature_guarded_lines(strip_comments(text)):
        if declares.search(line):
            found = since or baseline
            best = found if best is None else min(best, found)
    return best


class Versions:
    """Each rule's release, read once per torch include root."""

    def __init__(self, include_root: Path | None) -> None:
        self.include_root = include_root
        self.table = load_table()
        self._texts: dict[str, str | None] = {}

    def _header(self, name: str) -> str | None:
        if name not in self._texts:
            text = None
            if self.include_root is not None:
                try:
                    text = (self.include_root / name).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    text = None
            self._texts[name] = text
        return self._texts[name]

    def of(self, rule: Rule) -> Provided:
        if rule.shim:
            version = self.table.version_of(rule.shim)
            if version is not None:
                return Provided(short(version), "shim table")
        if rule.provided_by and self.include_root is not None:
            text = self._header(rule.provided_by["header"])
            if text is not None:
                declares = rule.provided_by.get("declares")
                version = declaration_version(text, re.compile(declares) if declares else None,
                                              self.table.baseline_version)
                if version is not None:
                    return Provided(short(version), "torch headers")
        return Provided(rule.since, "rules data")

    def all(self, ruleset: RuleSet) -> dict[str, Provided]:
        return {rule.id: self.of(rule) for rule in ruleset.rules}
