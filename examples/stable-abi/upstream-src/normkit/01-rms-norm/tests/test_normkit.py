"""Checks normkit's operators against the same arithmetic in plain torch."""

import normkit
import torch


def test_rms_norm() -> None:
    x, w = torch.randn(4, 8), torch.rand(8)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(normkit.rms_norm(x, w), expected)


def test_stats_group_sum_scale_shift() -> None:
    x = torch.randn(2, 3, 6)
    y, rstd = normkit.rms_norm_stats(x)
    assert rstd.shape == (2, 3)
    torch.testing.assert_close(y, x * rstd.unsqueeze(-1))
    torch.testing.assert_close(normkit.group_sum(x, 3), x.view(2, 3, 3, 2).sum(-1))
    s, b = torch.rand(6), torch.rand(6)
    torch.testing.assert_close(normkit.scale_shift(x, s, b), x * s + b)
    torch.testing.assert_close(normkit.scale_shift(x, s), x * s)
