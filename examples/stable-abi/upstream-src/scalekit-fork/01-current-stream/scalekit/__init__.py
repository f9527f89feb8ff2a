"""scalekit: a CUDA scaling kernel exposed as a torch operator."""

import torch

from scalekit import _scalekit_C  # noqa: F401  (loading the extension registers torch.ops.scalekit)

__all__ = ["scale"]


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    """Return ``s * x`` for a float32 CUDA tensor."""
    return torch.ops.scalekit.scale(x, s)
