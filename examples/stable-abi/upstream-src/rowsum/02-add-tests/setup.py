"""Builds rowsum and its extension rowsum._C with torch.utils.cpp_extension."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="rowsum",
    version="0.1.0",
    description="Row reductions for PyTorch",
    packages=["rowsum"],
    ext_modules=[CppExtension("rowsum._C", ["csrc/rowsum.cpp"])],
    cmdclass={"build_ext": BuildExtension},
)
