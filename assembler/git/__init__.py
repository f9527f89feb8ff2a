"""Git operations: bare mirrors in the cache, fork checkouts with the series applied, export."""

import os

# GitPython runs `git version` when imported and raises ImportError ("Bad git executable") when
# there is no git: quiet, so that the first git assemble runs says "cannot run git" with exit 7
# (process._spawn_failed, runner.repo_at) on every command alike. The package is imported
# before any module of it imports GitPython.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
