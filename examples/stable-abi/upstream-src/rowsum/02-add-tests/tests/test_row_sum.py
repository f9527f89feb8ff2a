"""Checks rowsum::row_sum against x.sum(dim=1) in plain torch."""

import pytest
import rowsum
import torch


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (4, 7), (16, 0)])
def test_matches_torch(shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    torch.testing.assert_close(rowsum.row_sum(x), x.sum(dim=1))


def test_non_contiguous_input() -> None:
    x = torch.randn(5, 3).t()
    torch.testing.assert_close(rowsum.row_sum(x), x.sum(dim=1))


def test_rejects_one_dimensional_input() -> None:
    with pytest.raises(RuntimeError, match="2-D"):
        rowsum.row_sum(torch.randn(3))
