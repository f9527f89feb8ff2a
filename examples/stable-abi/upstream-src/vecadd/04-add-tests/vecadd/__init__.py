"""vecadd: small vector kernels exposed as torch operators."""

import torch

from vecadd import _vecadd_C  # noqa: F401  (loading the extension registers torch.ops.vecadd)

__all__ = ["add_scaled"]


def add_scaled(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Return ``a + alpha * b`` for float32 CPU tensors of the same shape."""
    return torch.ops.vecadd.add_scaled(a, b, alpha)
