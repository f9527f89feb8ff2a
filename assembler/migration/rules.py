"""The migration rules, as data (``assembler/data/migration_rules.json``, versioned like
auditwheel's policy files): which LibTorch uses there are, their Stable-ABI equivalents, and
how each is migrated. Loading validates the file, so a broken rules file is an error naming
the rule, never a wrong inventory."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from assembler.errors import InputError

RULES_FILE = Path(__file__).resolve().parent.parent / "data" / "migration_rules.json"
RULES_SCHEMA = 1


class Kind(StrEnum):
    """How a use is migrated: what the inventory marks it."""

    MECHANICAL = "mechanical"  # a rule can rewrite it
    JUDGMENT = "judgment"  # a stable equivalent exists; the rewrite needs a decision
    NONE = "none"  # no stable equivalent: the rule's way round

    @property
    def words(self) -> str:
        return {"mechanical": "mechanical", "judgment": "needs judgment", "none": "no stable equivalent"}[self.value]


class Rule(NamedTuple):
    """One kind of LibTorch use (a NamedTuple: `patches` reads the rules' version at start-up, where
    dataclasses cost)."""

    id: str
    family: str
    pattern: re.Pattern[str]
    api: str
    stable: str | None
    since: str | None  # the data's torch release of the stable equivalent (2.13.0's headers)
    kind: Kind
    provided_by: dict[str, str] | None = None  # {"header": ..., "declares": regex}: where headers say the version
    shim: str | None = None  # the C shim function the equivalent calls
    way_round: str | None = None
    hazard: str | None = None
    fallback: bool = False  # counts only where no other rule matched
    unless_defined: re.Pattern[str] | None = None  # not a use where the project #defines a macro it names


class RuleSet(NamedTuple):
    version: str
    families: dict[str, str]
    rules: tuple[Rule, ...]

    def by_id(self, rule_id: str) -> Rule:
        return next(rule for rule in self.rules if rule.id == rule_id)


_REQUIRED = ("id", "family", "pattern", "api", "kind")


def load_rules(path: Path = RULES_FILE) -> RuleSet:
    """Read and validate the rules file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: unreadable migration rules ({error})",
                         hint="reinstall assembler, or fix the file") from None
    if not isinstance(data, dict) or data.get("schema") != RULES_SCHEMA:
        raise InputError(f"{path}: migration rules schema {data.get('schema') if isinstance(data, dict) else None!r}, "
                         f"expected {RULES_SCHEMA}",
                         hint="this assembler reads rules files of schema 1; upgrade assembler")
    families = data.get("families", {})
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, raw in enumerate(data.get("rules", [])):
        where = f"{path}: rules[{index}]"
        if not isinstance(raw, dict) or any(not isinstance(raw.get(key), str) for key in _REQUIRED):
            raise InputError(f"{where}: a rule needs the strings {', '.join(_REQUIRED)}", hint="fix the rules file")
        rule_id = raw["id"]
        if rule_id in seen:
            raise InputError(f"{where}: rule id {rule_id!r} appears twice", hint="give each rule its own id")
        seen.add(rule_id)
        if raw["family"] not in families:
            raise InputError(f"{where} ({rule_id}): family {raw['family']!r} is not in 'families'", hint="add it there")
        try:
            pattern = re.compile(raw["pattern"], re.M)
            kind = Kind(raw["kind"])
            if raw.get("provided_by") and "declares" in raw["provided_by"]:
                re.compile(raw["provided_by"]["declares"])
            unless = re.compile(raw["unless_defined"]) if raw.get("unless_defined") else None
        except (re.error, ValueError) as error:
            raise InputError(f"{where} ({rule_id}): {error}",
                             hint="fix the pattern or kind (mechanical, judgment, none)") from None
        if kind is Kind.NONE and not raw.get("way_round"):
            raise InputError(f"{where} ({rule_id}): a rule without a stable equivalent needs a way_round",
                             hint="say what to do instead")
        rules.append(Rule(
            id=rule_id, family=raw["family"], pattern=pattern, api=raw["api"], stable=raw.get("stable"),
            since=raw.get("since"), kind=kind, provided_by=raw.get("provided_by"), shim=raw.get("shim"),
            way_round=raw.get("way_round"), hazard=raw.get("hazard"), fallback=bool(raw.get("fallback", False)),
            unless_defined=unless,
        ))
    return RuleSet(version=str(data.get("version", "")), families=dict(families), rules=tuple(rules))


class Match(NamedTuple):
    rule: Rule
    line: int  # 1-based
    column: int  # 1-based
    text: str


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)


def defined_macros(texts: Iterable[str]) -> frozenset[str]:
    """The macros a dependency's own files ``#define``: a name of LibTorch's (c10's ``CHECK``)
    that the project defines itself is the project's, no use."""
    return frozenset(name for text in texts for name in _DEFINE.findall(text))


def match_rules(ruleset: RuleSet, code: str, active: set[int] | None = None,
                defined: frozenset[str] = frozenset()) -> list[Match]:
    """Every use in ``code`` (comments and string contents already blanked), on the ``active``
    lines only (all when None; a multi-line macro body continues an active line), in source
    order. A fallback rule counts only where no rule before it matched overlapping text; a rule
    with ``unless_defined`` not at all where one of the ``defined`` macros (the project's own,
    :func:`defined_macros`) is a name it means."""
    if active is not None:
        from assembler.migration.lexer import continued_lines

        active = continued_lines(code, active)
    starts = [0]
    for found in re.finditer("\n", code):
        starts.append(found.end())

    def line_of(offset: int) -> int:
        import bisect

        return bisect.bisect_right(starts, offset)

    claimed: list[tuple[int, int]] = []
    matches: list[tuple[int, Match]] = []
    ordered = [rule for rule in ruleset.rules if not rule.fallback] + [rule for rule in ruleset.rules if rule.fallback]
    for rule in ordered:
        if rule.unless_defined is not None and any(rule.unless_defined.fullmatch(name) for name in defined):
            continue
        for found in rule.pattern.finditer(code):
            start, end = found.span()
            start += len(found.group(0)) - len(found.group(0).lstrip())  # a leading \s* may span newlines
            if end <= start:
                continue
            line = line_of(start)
            if active is not None and line not in active:
                continue
            if rule.fallback and any(start < c_end and c_start < end for c_start, c_end in claimed):
                continue
            claimed.append((start, end))
            matches.append((start, Match(rule, line, start - starts[line - 1] + 1, found.group(0).strip())))
    matches.sort(key=lambda item: item[0])
    return [match for _, match in matches]


def as_json(rule: Rule) -> dict[str, Any]:
    return {"id": rule.id, "family": rule.family, "api": rule.api, "stable": rule.stable, "kind": rule.kind.value,
            "way_round": rule.way_round, "hazard": rule.hazard}
