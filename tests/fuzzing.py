"""The one hypothesis profile every fuzz test runs under: deterministic (derandomized, no
example database), no per-example deadline, and `ASSEMBLE_FUZZ_EXAMPLES` to run longer."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def fuzz_examples(default: int) -> int:
    """How many examples a fuzz test runs: its default, or ASSEMBLE_FUZZ_EXAMPLES."""
    return int(os.environ.get("ASSEMBLE_FUZZ_EXAMPLES", str(default)))


def fuzz_settings(examples: int) -> settings:
    """Settings for a fuzz test of `examples` examples (the health checks it trips by design off)."""
    return settings(
        derandomize=True,
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
