"""gemmkit: block GEMM kernels for PyTorch."""

from . import _C
from ._C import (
    block_amax,
    gemm_nt,
    gemm_nt_bias,
    get_num_threads,
    get_tile_policy,
    set_num_threads,
    set_tile_policy,
)

__all__ = ["_C", "block_amax", "gemm_nt", "gemm_nt_bias", "get_num_threads", "get_tile_policy", "set_num_threads",
           "set_tile_policy"]
