"""Builds normkit and its extension normkit._C with torch.utils.cpp_extension."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="normkit",
    version="0.2.0",
    description="RMS normalisation for PyTorch",
    packages=["normkit"],
    ext_modules=[
        CppExtension("normkit._C", ["csrc/normkit.cpp"], define_macros=[("NORMKIT_NO_LEGACY", None)]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
