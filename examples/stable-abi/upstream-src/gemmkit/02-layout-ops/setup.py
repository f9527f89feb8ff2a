"""Builds gemmkit and its extension gemmkit._C with torch.utils.cpp_extension."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="gemmkit",
    version="0.1.0",
    description="Block GEMM kernels for PyTorch",
    packages=["gemmkit"],
    # Wheels are tagged abi3 already: the project plans to drop pybind11 for torch's library.
    ext_modules=[CppExtension("gemmkit._C", ["csrc/python_api.cpp"], include_dirs=["csrc"], py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
