"""normkit: RMS normalisation kernels for PyTorch."""

from __future__ import annotations

import torch

from normkit import _C

__all__ = ["group_sum", "rms_norm", "rms_norm_stats", "scale_shift"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x**2, last dim) + eps) * weight, for float32 CPU tensors."""
    return _C.rms_norm(x, weight, eps)


def rms_norm_stats(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm with unit weight, and 1 / rms of each row."""
    return _C.rms_norm_stats(x, eps)


def group_sum(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Sums of ``groups`` equal slices of the last dimension."""
    return _C.group_sum(x, groups)


def scale_shift(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    """x * scale (+ shift) along the last dimension."""
    return _C.scale_shift(x, (scale, shift))
