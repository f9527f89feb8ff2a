"""assembler: carry LibTorch kernel libraries as pinned forks plus patch series, build them
against the Stable ABI and merge them into one audited wheel."""

__version__ = "0.1.0"
