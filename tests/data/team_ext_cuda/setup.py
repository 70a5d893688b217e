from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    packages=["eb_team_ext_cuda"],
    ext_modules=[CUDAExtension("eb_team_ext_cuda._C", ["eb_team_ext_cuda/ops.cpp", "eb_team_ext_cuda/kernel.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
