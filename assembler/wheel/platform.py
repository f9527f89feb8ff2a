"""The wheel's platform tag, from auditwheel's policy check of the shipped ELF files.

Libraries that torch (or the driver) provides at run time are excluded from the check: they
must not be grafted into the wheel, and they do not make it less portable. Everything else is
auditwheel's own verdict, the same one ``auditwheel show`` prints.

auditwheel parses every symbol table in pure Python, seconds per hundred MB of CUDA kernels, and
its answer depends only on the ELF files, the exclusions and the host's libc; so the verdict is
cached under the digest of those, and re-merging unchanged artifacts does not pay for it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import version as installed_version
from pathlib import Path

from assembler import jsonfile
from assembler.cache import cache_root
from assembler.errors import InputError
from assembler.fsutil import atomic_write
from assembler.wheel.metadata import record_text
from assembler.wheel.writer import ZIP_EPOCH, ReproducibleZip, Written

# torch's own libraries, the CUDA runtime torch ships, the driver, and libpython: all present
# whenever the extension is imported next to a (CUDA) torch; never grafted.
DEFAULT_EXCLUDES = ("libtorch*", "libc10*", "libcudart*", "libcuda.so*", "libpython*")
_CACHE_SCHEMA = 2


@dataclass(frozen=True)
class PlatformVerdict:
    policy: str  # auditwheel's overall policy, e.g. manylinux_2_28_x86_64
    platforms: tuple[str, ...]  # that policy and its legacy aliases, sorted as auditwheel writes them
    symbol_policy: str  # the best tag the versioned symbols alone allow
    external_libs: tuple[str, ...]  # needed, not excluded, not allowed by any policy: would need grafting
    cached: bool = False

    @property
    def tag(self) -> str:
        """The compressed platform tag set for the file name."""
        return ".".join(self.platforms)

    @property
    def portable(self) -> bool:
        return not self.policy.startswith("linux_")


def _cache_key(elf: Sequence[Written], exclude: Sequence[str]) -> str:
    payload = {
        "schema": _CACHE_SCHEMA,
        "auditwheel": installed_version("auditwheel"),
        "machine": host.machine(),
        "libc": os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else "",
        "exclude": sorted(exclude),
        "elf": sorted((w.name, w.sha256) for w in elf),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def platform_verdict(elf: Sequence[Written], exclude: Sequence[str]) -> PlatformVerdict:
    """auditwheel's verdict on the ELF members ``elf`` (already written to a zip), cached."""
    if not elf:
        raise InputError("the artifacts ship no compiled extension",
                         hint="check the dependencies' [deps.X.install] patterns")
    cache = cache_root() / "wheel-platform" / f"{_cache_key(elf, exclude)}.json"
    try:
        data = jsonfile.load(cache)
        return PlatformVerdict(data["policy"], tuple(data["platforms"]), data["symbol_policy"],
                               tuple(data["external_libs"]), cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    verdict = _analyze(elf, exclude)
    atomic_write(cache, json.dumps({k: v for k, v in asdict(verdict).items() if k != "cached"}, sort_keys=True))
    return verdict


def _analyze(elf: Sequence[Written], exclude: Sequence[str]) -> PlatformVerdict:
    """Run auditwheel on a probe wheel holding only the ELF members, at their wheel paths (so
    $ORIGIN-relative lookups between them resolve as they will after install)."""
    from auditwheel.error import InvalidLibcError, NonPlatformWheelError
    from auditwheel.wheel_abi import analyze_wheel_abi, get_wheel_elfdata

    with tempfile.TemporaryDirectory(prefix="assemble-platform-") as tmp:
        probe = Path(tmp) / "probe-0-py3-none-any.whl"
        with ReproducibleZip(probe, epoch=ZIP_EPOCH) as archive:
            for member in elf:
                archive.copy_member(member.name, member.raw, member.sha256)
            archive.write_bytes("probe-0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
            record = "probe-0.dist-info/RECORD"
            archive.write_bytes(record, record_text(archive.written, record).encode())
        try:
            info = analyze_wheel_abi(None, None, probe, frozenset(exclude), disable_isa_ext_check=False,
                                     allow_graft=False)
        except NonPlatformWheelError as exc:
            raise InputError(f"no ELF file for this machine among the shipped files ({exc.message})",
                             hint="build the artifacts for this architecture") from None
        except InvalidLibcError as exc:
            raise InputError(f"auditwheel cannot tell which libc the extensions need: {exc}",
                             hint="link the extensions against libc (a module that calls no libc function has no "
                                  "libc.so.6 entry)") from None
        finally:
            get_wheel_elfdata.cache_clear()  # keyed by path: a later probe may reuse this name
    overall = info.overall_policy
    external = info.external_refs[info.policies.highest.name].libs
    return PlatformVerdict(overall.name, tuple(sorted((overall.name, *overall.aliases))), info.sym_policy.name,
                           tuple(sorted(external)))
