"""DEP-3 style fields carried as trailers of each patch's commit message.

Keeping them as git trailers means ``git am`` and ``git format-patch`` carry them through a
checkout/export round trip without any bookkeeping of ours.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

DEP3_FIELDS = ("Forwarded", "Applied-Upstream", "Origin", "Bug", "Last-Update")
_TRAILER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.*)$")
_URL_RE = re.compile(r"https?://\S+")


class PatchStatus(StrEnum):
    """Where a carried patch stands with upstream (`assemble patches`, the SBOM)."""

    UPSTREAM = "upstream"  # upstream has the change
    FORWARDED = "forwarded"  # sent (a PR URL in Forwarded)
    LOCAL = "local"  # not sent (Forwarded: no, or no Forwarded header)
    NOT_NEEDED = "not-needed"  # never meant for upstream


class PatchHeader(NamedTuple):
    file: str
    subject: str
    author: str
    date: str
    fields: dict[str, str]

    @property
    def forwarded(self) -> str | None:
        return self.fields.get("Forwarded")

    @property
    def applied_upstream(self) -> str | None:
        """The commit SHA from ``Applied-Upstream: commit:<sha>`` (or a bare SHA)."""
        value = self.fields.get("Applied-Upstream")
        if not value:
            return None
        match = re.search(r"\b([0-9a-f]{7,40})\b", value)
        return match.group(1) if match else None


def forwarded_status(header: PatchHeader) -> tuple[PatchStatus, str | None, str]:
    """What the ``Forwarded`` field alone says: (status, PR URL, note). A URL = forwarded;
    ``no`` or no field = local; ``not-needed``; anything else = forwarded, without a link."""
    value = (header.forwarded or "").strip()
    lowered = value.lower()
    if not value:
        return PatchStatus.LOCAL, None, "no Forwarded header"
    if lowered == "no":
        return PatchStatus.LOCAL, None, "Forwarded: no"
    if lowered == "not-needed":
        return PatchStatus.NOT_NEEDED, None, "Forwarded: not-needed"
    url = _URL_RE.search(value)
    return PatchStatus.FORWARDED, url.group(0) if url else None, "" if url else f"Forwarded: {value}"


def _decoded(value: str) -> str:
    """An RFC 2047 header value (``=?utf-8?q?...?=``, as git format-patch writes non-ASCII) as
    text. The email package is imported only for such a value: it is ~4 ms of the start-up budget."""
    if "=?" not in value:
        return value
    from email.header import decode_header, make_header

    return str(make_header(decode_header(value)))


def parse_patch_header(path: Path) -> PatchHeader:
    """Read the mail header and message of a git format-patch file (stops at the diff)."""
    subject_lines: list[str] = []
    author = date = ""
    fields: dict[str, str] = {}
    in_headers = True
    current = None
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith("---") or line.startswith("diff --git"):
                break
            if in_headers:
                if not line:
                    in_headers = False
                    continue
                if line[:1] in " \t" and current == "Subject":
                    subject_lines.append(line.strip())
                    continue
                current = line.split(":", 1)[0]
                if current == "Subject":
                    subject_lines.append(line.split(":", 1)[1].strip())
                elif current == "From" and ":" in line:
                    author = _decoded(line.split(":", 1)[1].strip())
                elif current == "Date":
                    date = line.split(":", 1)[1].strip()
                continue
            match = _TRAILER_RE.match(line)
            if match and match.group("key") in DEP3_FIELDS:
                fields[match.group("key")] = match.group("value").strip()
    subject = _decoded(" ".join(subject_lines))
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    return PatchHeader(file=path.name, subject=subject, author=author, date=date, fields=fields)
