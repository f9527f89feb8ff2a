"""The merged wheel: artifacts in, one reproducible abi3 wheel with a manylinux tag out.

Import the submodules (``assembler.wheel.merge``, ``.artifact``, ...): this package imports
nothing itself, so a no-op build that only reads artifact.json does not load the merge.
"""
