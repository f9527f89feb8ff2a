"""deps.toml: the typed model, its single validator, and comment-preserving edits."""

from assembler.manifest.load import MANIFEST_NAME, find_workspace, load_manifest
from assembler.manifest.model import BuildRecipe, Bundle, Dependency, Extension, Manifest, VerifySpec

__all__ = [
    "MANIFEST_NAME", "BuildRecipe", "Bundle", "Dependency", "Extension", "Manifest",
    "VerifySpec", "find_workspace", "load_manifest",
]
