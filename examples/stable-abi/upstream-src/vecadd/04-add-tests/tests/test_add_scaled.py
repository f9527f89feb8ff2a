"""Checks vecadd::add_scaled against the same arithmetic in plain torch."""

import pytest
import torch
import vecadd


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (2, 3, 4)])
def test_matches_torch(shape: tuple[int, ...]) -> None:
    a, b = torch.randn(shape), torch.randn(shape)
    torch.testing.assert_close(vecadd.add_scaled(a, b, 0.25), a + 0.25 * b)


def test_non_contiguous_input() -> None:
    a, b = torch.randn(5, 3).t(), torch.randn(3, 5)
    torch.testing.assert_close(vecadd.add_scaled(a, b, -1.5), a - 1.5 * b)


def test_rejects_mismatched_shapes() -> None:
    with pytest.raises(RuntimeError, match="same shape"):
        vecadd.add_scaled(torch.randn(3), torch.randn(4))


def test_rejects_float64() -> None:
    with pytest.raises(RuntimeError, match="float32"):
        vecadd.add_scaled(torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))
