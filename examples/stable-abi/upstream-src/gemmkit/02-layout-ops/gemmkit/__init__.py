"""gemmkit: block GEMM kernels for PyTorch."""

from . import _C
from ._C import (
    block_amax,
    column_sums,
    dequantize,
    gather_rows,
    gemm_nt,
    gemm_nt_bias,
    get_num_threads,
    get_tile_policy,
    set_num_threads,
    scale_rows_by,
    set_block_multiple,
    set_tile_policy,
    shape_of,
    split_rows,
)

__all__ = ["_C", "block_amax", "column_sums", "dequantize", "gather_rows", "gemm_nt", "gemm_nt_bias", "get_num_threads",
           "get_tile_policy", "scale_rows_by", "set_block_multiple", "set_num_threads", "set_tile_policy", "shape_of",
           "split_rows"]
