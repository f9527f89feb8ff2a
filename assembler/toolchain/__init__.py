"""Toolchains a build runs with: the CUDA toolkit asked for and cached Python environments."""
