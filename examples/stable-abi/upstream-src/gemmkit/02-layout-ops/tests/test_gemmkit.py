"""Checks gemmkit's operators against the same arithmetic in plain torch."""

import gemmkit
import torch


def test_gemm_and_block_amax() -> None:
    a, b, c = torch.randn(4, 8), torch.randn(3, 8), torch.randn(4, 3)
    torch.testing.assert_close(gemmkit.gemm_nt(a, b), a @ b.t())
    torch.testing.assert_close(gemmkit.gemm_nt(a, b, c, compiled_dims="mn"), a @ b.t() + c)
    torch.testing.assert_close(gemmkit.block_amax(a, (2, 4)), a.abs().view(2, 2, 2, 4).amax((1, 3)))


def test_settings() -> None:
    gemmkit.set_num_threads(3)
    assert gemmkit.get_num_threads() == 3
    gemmkit.set_tile_policy("wide")
    assert gemmkit.get_tile_policy() == "wide"
