"""Build and smoke benchmarks for the cpu target (ratios, not asserts), and the size of the
CUDA images the test suite builds (`python benchmarks/build.py --sizes`: image size, /opt/venv,
what the base and envbuilder add beyond the Python stack, and every layer), and what the RDMA
user space adds to the runtime stage (`python benchmarks/build.py --rdma`), and what BuildKit
cache mounts for pip and apt save on a warm rebuild of a bake (`--cache-mounts`).

Needs the test engine and inputs: `eval "$(bash scripts/test-services.sh)"` first.
Prints: cold build, warm rebuild and their ratio (aim: warm < 1/10 of cold); the rebuild after
changing only the DeepSpeed pin; the image size against a naive single-stage build of the same
packages; the smoke job's time against bare torchrun of the same script in the same image (the
harness's overhead; aim: under 20%).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import docker

from envbuilder.api import make_spec
from envbuilder.run.build import BuildOptions, build_target
from envbuilder.run.smoke import run_smoke_container

CPU = "cpu-torch2.13-debian12"
BASE = os.environ.get("ENVBUILDER_TEST_BASE_IMAGE", "envbuilder-test/debian:12")
WHEELS = Path(os.environ.get("ENVBUILDER_TEST_WHEELHOUSE",
                             Path.home() / ".cache/envbuilder-test/wheelhouse"))

NAIVE = """FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv \\
 && python3.11 -m venv /opt/venv
COPY wheels/ /tmp/wheels/
RUN /opt/venv/bin/pip install --no-index --find-links /tmp/wheels torch==2.13.0 numpy
"""


def timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


def main() -> None:
    client = docker.from_env(timeout=1800)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)

        def build(target: str, ctx: str, nocache: bool = False):
            return build_target(make_spec(target, base_image=BASE),
                                BuildOptions(wheelhouse=WHEELS, smoke=False, context=d / ctx,
                                             nocache=nocache), client=client)

        cold, t_cold = timed(lambda: build(CPU, "cold", nocache=True))
        build(CPU, "prime")  # a normal build fills the cache (a --no-cache build may not)
        _, t_warm = timed(lambda: build(CPU, "warm"))
        print(f"cold build            {t_cold:8.1f} s")
        print(f"warm rebuild          {t_warm:8.1f} s   warm/cold = {t_warm / t_cold:.3f}")

        build(f"{CPU}-ds0.19.7", "ds1")
        _, t_ds = timed(lambda: build(f"{CPU}-ds0.19.8", "ds2"))
        print(f"DeepSpeed-only change {t_ds:8.1f} s   (rebuilds the DeepSpeed layer only) ds/cold = {t_ds / t_cold:.3f}")

        naive_ctx = d / "naive"
        (naive_ctx / "wheels").mkdir(parents=True)
        for p in WHEELS.iterdir():
            if p.suffix == ".whl":
                os.link(p, naive_ctx / "wheels" / p.name)
        (naive_ctx / "Dockerfile").write_text(NAIVE.format(base=BASE))
        naive, _ = client.images.build(path=str(naive_ctx), tag="envbuilder-bench:naive", rm=True)
        ours = client.images.get(cold.image_id)
        print(f"image size            {ours.attrs['Size'] / 1e9:8.2f} GB   naive single-stage "
              f"{naive.attrs['Size'] / 1e9:.2f} GB   ratio = {ours.attrs['Size'] / naive.attrs['Size']:.3f}")

        result, t_smoke = timed(lambda: run_smoke_container(client, cold.image_id, nproc=12, timeout=60))
        bare_cmd = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "12",
                    "/opt/envbuilder/smoke/ddp_smoke.py", "--out", "/tmp/out", "--backend", "gloo"]
        _, t_bare = timed(lambda: client.containers.run(cold.image_id, bare_cmd, remove=True,
                                                        shm_size="2g"))
        print(f"smoke job (12 ranks)  {t_smoke:8.1f} s   bare torchrun {t_bare:.1f} s   "
              f"overhead = {(t_smoke - t_bare) / t_bare:+.1%}   ok={result.ok}")
        client.images.remove("envbuilder-bench:naive", force=True)


def sizes() -> None:
    """The CUDA test images (tests/test_cuda_images.py's cache tags): what each layer weighs."""
    client = docker.from_env(timeout=600)
    images = [i for i in client.images.list(name="envbuilder-test/cuda")]
    if not images:
        print("no envbuilder-test/cuda images: run pytest tests/test_cuda_images.py first")
        return
    for img in images:
        venv = int(client.containers.run(img.id, ["du", "-sb", "/opt/venv"], remove=True,
                                         entrypoint=[]).decode().split()[0])
        size = img.attrs["Size"]
        print(f"{img.tags[0]}  flavour={img.labels.get('io.envbuilder.flavour')}  "
              f"base={img.labels.get('org.opencontainers.image.base.name')}")
        print(f"  image {size / 1e9:6.2f} GB   /opt/venv {venv / 1e9:6.2f} GB   "
              f"beyond the venv {(size - venv) / 1e6:7.0f} MB   venv/image = {venv / size:.3f}")
        for h in img.history():
            if h.get("Size"):
                cmd = " ".join((h.get("CreatedBy") or "").split())[:90]
                print(f"    {h['Size'] / 1e6:9.1f} MB  {cmd}")


RDMA_DOCKERFILE = """FROM {base}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 {extra} \\
 && rm -rf /var/lib/apt/lists/*
"""


def rdma_size() -> None:
    """What the RDMA user space (--fabric ib, the default of CUDA images) adds to the runtime
    stage: the runtime's apt layer built with and without it, on the test base image."""
    from envbuilder.render.plan import EFA_APT_RUNTIME, RDMA_APT

    client = docker.from_env(timeout=1800)
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as d:
        for name, extra in (("none", ()), ("ib", RDMA_APT), ("efa", RDMA_APT + EFA_APT_RUNTIME)):
            ctx = Path(d) / name
            ctx.mkdir()
            (ctx / "Dockerfile").write_text(RDMA_DOCKERFILE.format(base=BASE, extra=" ".join(extra)))
            tag = f"envbuilder-bench:rdma-{name}"
            img, _ = client.images.build(path=str(ctx), tag=tag, rm=True)
            sizes[name] = img.attrs["Size"]
            client.images.remove(tag, force=True)
    print(f"runtime apt layer without RDMA  {sizes['none'] / 1e6:8.1f} MB (image)")
    print(f"RDMA user space (--fabric ib)   {(sizes['ib'] - sizes['none']) / 1e6:+8.1f} MB   "
          f"({' '.join(RDMA_APT)}) ib/none = {sizes['ib'] / sizes['none']:.3f}")
    print(f"  + libfabric (--fabric efa)    {(sizes['efa'] - sizes['none']) / 1e6:+8.1f} MB   "
          f"(without the OFI NCCL plugin, built in the builder stage)")


CACHE_PROJECT = '[[targets]]\nname = "cpu-ds"\ntarget = "cpu-torch2.13-ds0.19.8-debian12"\n'


def cache_mounts() -> None:
    """`python benchmarks/build.py --cache-mounts`: the bake file of the DeepSpeed CPU target
    (offline, --docker-driver) built by `docker buildx bake` with and without `--cache-mounts`;
    each cold, then rebuilt after a change to the DeepSpeed layer's requirements file only (the
    warm rebuild a pin bump costs: pip builds DeepSpeed's wheel again, or takes it from the cache
    mount). Needs `docker buildx` (scripts/test-services.sh)."""
    import subprocess
    import sys

    def run(*args: str, cwd: Path) -> float:
        t = time.monotonic()
        subprocess.run(list(args), cwd=cwd, check=True, capture_output=True)
        return time.monotonic() - t

    times = {}
    for mounts in (False, True):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            (root / "envbuilder.toml").write_text(CACHE_PROJECT)
            run(sys.executable, "-m", "envbuilder", "bake", "--docker-driver", "--base-image", BASE,
                "--wheelhouse", str(WHEELS), "--ca-cert", "/etc/ssl/certs/ca-certificates.crt", "--registry", f"eb-bench-{'mounts' if mounts else 'plain'}/envbuilder",
                *(["--cache-mounts"] if mounts else []), "-o", str(root / "out"), cwd=root)
            cold = run("docker", "buildx", "bake", "-f", "docker-bake.hcl", cwd=root / "out")
            req = root / "out" / "cpu-ds" / "requirements" / "deepspeed.txt"
            req.write_text(req.read_text() + f"# rebuilt {time.time()}\n")
            warm = run("docker", "buildx", "bake", "-f", "docker-bake.hcl", cwd=root / "out")
            times[mounts] = (cold, warm)
            for t in ("cpu-torch2.13.0-py311-ds0.19.8-debian12",):  # the bench's own tags
                subprocess.run(["docker", "image", "rm", f"eb-bench-{'mounts' if mounts else 'plain'}/envbuilder:{t}"],
                               capture_output=True)
            print(f"cache mounts {'on ' if mounts else 'off'}: cold {cold:7.1f} s, rebuild of the DeepSpeed "
                  f"layer {warm:7.1f} s")
    print(f"rebuild with/without cache mounts: {times[True][1] / times[False][1]:.2f}")


if __name__ == "__main__":
    import sys

    if "--sizes" in sys.argv[1:]:
        sizes()
    elif "--cache-mounts" in sys.argv[1:]:
        cache_mounts()
    elif "--rdma" in sys.argv[1:]:
        rdma_size()
    else:
        main()
