"""DEP-3 style fields carried as trailers of each patch's commit message.

Keeping them as git trailers means ``git am`` and ``git format-patch`` carry them through a
checkout/export round trip without any bookkeeping of ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from pathlib import Path

DEP3_FIELDS = ("Forwarded", "Applied-Upstream", "Origin", "Bug", "Last-Update")
_TRAILER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.*)$")


@dataclass(frozen=True)
class PatchHeader:
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
                    author = str(make_header(decode_header(line.split(":", 1)[1].strip())))
                elif current == "Date":
                    date = line.split(":", 1)[1].strip()
                continue
            match = _TRAILER_RE.match(line)
            if match and match.group("key") in DEP3_FIELDS:
                fields[match.group("key")] = match.group("value").strip()
    subject = str(make_header(decode_header(" ".join(subject_lines))))
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    return PatchHeader(file=path.name, subject=subject, author=author, date=date, fields=fields)
