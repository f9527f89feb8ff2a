"""Facts about the machine this process runs on, asked the same way everywhere."""

from __future__ import annotations

import os


def available_cpus() -> int:
    """CPUs this process may run on: the affinity mask where the platform has one (a container or
    `taskset` limits it below os.cpu_count()), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
