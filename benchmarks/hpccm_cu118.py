"""The hpccm recipe benchmarks/render.py compares envbuilder with: two stages, CUDA 11.8 +
NCCL, torch and DeepSpeed by pip, in the style of hpccm's own recipes
(https://github.com/NVIDIA/hpc-container-maker/tree/master/recipes).

    hpccm --recipe benchmarks/hpccm_cu118.py --format docker
"""
# ruff: noqa: F821 - hpccm runs a recipe with Stage0, baseimage, nccl... in scope

Stage0 += baseimage(image='nvidia/cuda:11.8.0-devel-ubuntu22.04', _as='build')
Stage0 += python(python2=False)
Stage0 += gnu()
Stage0 += nccl(cuda='11.8.0', version='2.16.5-1')
Stage0 += shell(commands=['python3 -m venv /opt/venv'])
Stage0 += pip(pip='/opt/venv/bin/pip', ospackages=[],
              packages=['torch==2.1.2', 'deepspeed==0.12.6'])

Stage1 += baseimage(image='nvidia/cuda:11.8.0-runtime-ubuntu22.04')
Stage1 += python(python2=False, devel=False)
Stage1 += Stage0.runtime()
Stage1 += copy(_from='build', src='/opt/venv', dest='/opt/venv')
Stage1 += environment(variables={'PATH': '/opt/venv/bin:$PATH'})
