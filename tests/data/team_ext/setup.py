from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    packages=["eb_team_ext"],
    ext_modules=[CppExtension("eb_team_ext._C", ["eb_team_ext/ops.cpp"])],
    cmdclass={"build_ext": BuildExtension},
)
