"""Patch series on disk: the quilt-style ``series`` file and DEP-3 style patch headers."""
