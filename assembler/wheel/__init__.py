"""The merged wheel: artifacts in, one reproducible abi3 wheel with a manylinux tag out."""

from assembler.wheel.artifact import Artifact, load_artifacts, pack_files
from assembler.wheel.merge import MergeResult, merge_wheel
from assembler.wheel.platform import DEFAULT_EXCLUDES, PlatformVerdict

__all__ = [
    "DEFAULT_EXCLUDES", "Artifact", "MergeResult", "PlatformVerdict", "load_artifacts",
    "merge_wheel", "pack_files",
]
