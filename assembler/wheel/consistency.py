"""Artifacts from several CI jobs belong in one wheel only when they came from one release: the
same deps.toml pins and patch series, and the same toolchain. `assemble merge` refuses
otherwise, naming the field and each job's value (``merge.check_artifacts`` covers the pins,
the series names and the Python ABI; this covers the series content and the toolchain)."""

from __future__ import annotations

from collections.abc import Sequence

from assembler.errors import InputError
from assembler.git.state import series_digest
from assembler.manifest import Manifest
from assembler.wheel.artifact import Artifact

# artifact.json toolchain fields that must agree across the artifacts of one wheel (nvcc only
# among those that compiled CUDA: the others record none).
SAME_TOOLCHAIN = ("torch", "cxx", "nvcc", "cuda_origin", "python_abi", "cmake", "ninja", "scikit_build_core")


def check_same_release(manifest: Manifest, artifacts: Sequence[Artifact]) -> None:
    """Raise InputError naming the first mismatch: a series whose content changed since the
    artifact was built, or a toolchain field on which the artifacts differ."""
    for artifact in artifacts:
        dep = manifest.deps.get(artifact.dep)
        recorded = artifact.series_digest
        if dep is None or recorded is None:
            continue
        try:
            current = series_digest(dep)
        except OSError:
            continue  # a missing patch file is the series check's to report
        if recorded != current:
            raise InputError(
                f"{artifact.root}: {dep.name} was built from other contents of its patch series "
                f"(series digest {recorded[:12]}, {dep.patches_dir.name}/ now {current[:12]})",
                hint=f"rebuild it from this checkout: assemble build --only {dep.name} --artifacts DIR")
    for name in SAME_TOOLCHAIN:
        values = {a.dep: str(a.toolchain[name]) for a in artifacts if a.toolchain.get(name) is not None}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{dep}: {value}" for dep, value in sorted(values.items()))
            raise InputError(f"the artifacts were built with different toolchains: {name} differs ({shown})",
                             hint="build every artifact of a release on runners with one toolchain (same image, --cuda "
                                  "and --torch)")

