"""Git operations: bare mirrors in the cache, fork checkouts with the series applied, export.

The one git layer: every git process of assemble starts in ``process.py`` (see its header for
why plain processes rather than GitPython); no other package runs git or reads its errors."""
