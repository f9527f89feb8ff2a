"""rowsum: row reductions exposed as torch operators."""

import torch

from rowsum import _C  # noqa: F401  (loading the extension registers torch.ops.rowsum)

__all__ = ["row_sum"]


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Return the sum of each row of a 2-D float32 CPU tensor."""
    return torch.ops.rowsum.row_sum(x)
