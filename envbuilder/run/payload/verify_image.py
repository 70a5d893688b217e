"""What an image really holds, read from inside it: envbuilder's verification payload.

Run with the image's own Python (no GPU needed):

    python verify_image.py [--ds-ops fused_adam,cpu_adam] [--out FILE]

It imports torch (and Horovod, DeepSpeed and the requested DeepSpeed ops where installed), then
reports as JSON what the process actually loaded: torch's version, CUDA and NCCL as torch reports
them, every libnccl / libcudnn / libcudart file the dynamic loader mapped (from
/proc/self/maps, with the version each library reports about itself through ctypes), which
libnccl Horovod's extension resolves (``ldd``), and the NVIDIA container variables. It judges
nothing: envbuilder compares these facts with the image's labels on the host
(envbuilder/run/verify.py). Standard library only, Python 3.8+, so it runs in any image.
"""

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import traceback

MARKER = "ENVBUILDER_VERIFY_FACTS"
LIBS = {"nccl": r"libnccl\.so", "cudnn": r"libcudnn\.so", "cudart": r"libcudart\.so"}
ENV_NAMES = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
             "LD_LIBRARY_PATH", "CUDA_VERSION", "NCCL_DEBUG")


def _err(exc):
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-500:]


def _lib_version(kind, path):
    """The version a loaded library reports about itself."""
    try:
        lib = ctypes.CDLL(path)
        v = ctypes.c_int(0)
        if kind == "nccl":
            if lib.ncclGetVersion(ctypes.byref(v)) != 0:
                return None
            n = v.value  # 2.21.5 -> 22105 (>= 2.9: major*10000 + minor*100 + patch)
            if n >= 10000:
                return "%d.%d.%d" % (n // 10000, (n % 10000) // 100, n % 100)
            return "%d.%d.%d" % (n // 1000, (n % 1000) // 100, n % 100)
        if kind == "cudnn":
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            n = int(lib.cudnnGetVersion())  # 9.1.0 -> 90100; 8.9.2 -> 8902
            if n >= 90000:
                return "%d.%d.%d" % (n // 10000, (n % 10000) // 100, n % 100)
            return "%d.%d.%d" % (n // 1000, (n % 1000) // 100, n % 100)
        if kind == "cudart":
            if lib.cudaRuntimeGetVersion(ctypes.byref(v)) != 0:
                return None
            return "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
    except (OSError, AttributeError) as exc:
        return "unknown (%s)" % _err(exc)[:120]
    return None


def loaded_libraries():
    """{kind: [{path, realpath, version}]}: each distinct file the process mapped."""
    out = {k: [] for k in LIBS}
    seen = set()
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        base = os.path.basename(path)
        for kind, rx in LIBS.items():
            if re.match(rx, base):
                real = os.path.realpath(path)
                if (kind, real) in seen:
                    continue
                seen.add((kind, real))
                out[kind].append({"path": path, "realpath": real,
                                  "version": _lib_version(kind, path)})
    return out


RELEVANT = re.compile(r"lib(nccl|cudnn|cudart|cublas|torch|c10)")


def ldd(path):
    """{soname: resolved path or None} from ldd, for the CUDA and torch libraries."""
    try:
        text = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": _err(exc)}
    res = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
        if m and RELEVANT.match(m.group(1)):
            res[m.group(1)] = None if m.group(2) == "not found" else m.group(3)
    return res


def torch_facts():
    facts = {}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report, never crash
        return {"error": "import torch: " + _err(exc)}
    facts["version"] = torch.__version__
    facts["cuda"] = getattr(torch.version, "cuda", None)
    facts["file"] = torch.__file__
    try:
        v = torch.cuda.nccl.version()
        facts["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception as exc:  # noqa: BLE001 - CPU builds have no NCCL
        facts["nccl"] = None
        facts["nccl_error"] = _err(exc)
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    cand = [p for p in ("libtorch_cuda.so", "libtorch_cpu.so") if os.path.exists(os.path.join(lib, p))]
    if cand:
        facts["ldd"] = {"file": os.path.join(lib, cand[0]), "resolves": ldd(os.path.join(lib, cand[0]))}
    return facts


def horovod_facts():
    try:
        import horovod
    except ImportError:
        return None
    facts = {"version": getattr(horovod, "__version__", None)}
    try:
        import horovod.torch as hvd
        facts["nccl_built"] = int(hvd.nccl_built())
        facts["gloo_built"] = bool(hvd.gloo_built())
        facts["mpi_built"] = bool(hvd.mpi_built())
        files = sorted(glob.glob(os.path.join(os.path.dirname(hvd.__file__), "mpi_lib_v2*.so")))
        if files:
            facts["extension"] = files[0]
            facts["ldd"] = ldd(files[0])
    except Exception as exc:  # noqa: BLE001
        facts["error"] = _err(exc)
    return facts


def march_flags(path):
    """The -march values GCC recorded in a shared object (DW_AT_producer keeps the compile
    flags of objects built with -g): what CPU the compiled code assumes."""
    if not path:
        return []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    return sorted({m.decode() for m in re.findall(rb"-march=([A-Za-z0-9_.-]+)", data)})


def deepspeed_facts(ops):
    try:
        import deepspeed
    except Exception as exc:  # noqa: BLE001
        if "deepspeed" in str(exc) and isinstance(exc, ImportError) and not ops:
            return None
        return {"error": "import deepspeed: " + _err(exc)}
    import shutil
    facts = {"version": getattr(deepspeed, "__version__", None), "ops": {},
             # what DeepSpeed's JIT would build an op with (torch.utils.cpp_extension: c++, nvcc)
             "compilers": {"c++": shutil.which("c++") or shutil.which("g++"),
                           "nvcc": shutil.which("nvcc")}}
    try:
        from deepspeed.git_version_info import installed_ops
        facts["installed_ops"] = {k: bool(v) for k, v in dict(installed_ops).items()}
    except Exception as exc:  # noqa: BLE001
        facts["installed_ops_error"] = _err(exc)
    import importlib
    for op, module in ops:
        rec = {"module": module}
        try:
            mod = importlib.import_module(module)
            rec["loaded"] = True
            rec["file"] = getattr(mod, "__file__", None)
            rec["march"] = march_flags(rec["file"])
        except Exception as exc:  # noqa: BLE001
            rec["loaded"] = False
            rec["error"] = _err(exc)
        facts["ops"][op] = rec
    return facts


# what NCCL's IB transport dlopens (src/misc/ibvwrap.cc: libibverbs.so, then
# libibverbs.so.1; the RDMA connection manager librdmacm.so.1): the exact sonames, as it would
RDMA_SONAMES = ("libibverbs.so.1", "librdmacm.so.1")
OFI_NCCL_GLOB = "/opt/amazon/ofi-nccl/lib/libnccl-net*.so"
NO_DEVICE = ("No IB devices found", "Failed to get IB devices list")


def rdma_facts():
    """Whether the RDMA user space loads (no HCA needed): each soname NCCL opens, the verbs
    device list it returns, the verbs providers installed, and ibv_devinfo's own report."""
    facts = {"libs": {}, "providers": sorted(os.path.basename(p) for p in
                                             glob.glob("/usr/lib/*/libibverbs/lib*-rdmav*.so"))}
    for so in RDMA_SONAMES:
        rec = {}
        try:
            lib = ctypes.CDLL(so)
            rec["loaded"] = True
            if so.startswith("libibverbs"):
                n = ctypes.c_int(0)
                get = lib.ibv_get_device_list
                get.restype = ctypes.c_void_p
                get.argtypes = [ctypes.POINTER(ctypes.c_int)]
                devs = get(ctypes.byref(n))
                rec["devices"] = n.value
                if devs:
                    lib.ibv_free_device_list.argtypes = [ctypes.c_void_p]
                    lib.ibv_free_device_list(devs)
        except (OSError, AttributeError) as exc:
            rec = {"loaded": False, "error": _err(exc)}
        facts["libs"][so] = rec
    maps = _maps_paths()
    for so, rec in facts["libs"].items():
        stem = so.split(".so")[0] + ".so"
        rec["path"] = next((m for m in maps if os.path.basename(m).startswith(stem)), None)
    import shutil
    exe = shutil.which("ibv_devinfo")
    if exe is None:
        facts["ibv_devinfo"] = {"found": False}
    else:
        try:
            r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=60)
            out = r.stdout.decode("utf-8", "replace")
            facts["ibv_devinfo"] = {"found": True, "path": exe, "exit": r.returncode,
                                    "output": out.strip()[-600:],
                                    "no_devices": any(t in out for t in NO_DEVICE),
                                    "hca": re.findall(r"hca_id:\s*(\S+)", out)}
        except (OSError, subprocess.SubprocessError) as exc:
            facts["ibv_devinfo"] = {"found": True, "path": exe, "error": _err(exc)}
    facts["ofi_nccl"] = sorted(glob.glob(OFI_NCCL_GLOB))
    return facts


def ldd_r(path, lib_dirs):
    """``ldd -r`` of a compiled extension with the folders of the libraries this process
    loaded (torch's lib first) on the loader's path: torch extensions carry no rpath, so they
    resolve libc10/libtorch/libcudart to what importing torch already loaded. It reports
    where each torch/c10 library resolves, what is not found, and the undefined symbols
    besides the Python C API (the interpreter provides those)."""
    env = dict(os.environ)
    dirs = [d for d in lib_dirs if d]
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join(dirs + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    try:
        text = subprocess.run(["ldd", "-r", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60, env=env).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": _err(exc)}
    res = {"torch_libs": {}, "not_found": [], "undefined": []}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+))", line)
        if m and m.group(2) == "not found":
            res["not_found"].append(m.group(1))
        elif m and re.match(r"lib(torch|c10)", m.group(1)):
            res["torch_libs"][m.group(1)] = m.group(3)
        u = re.match(r"\s*undefined symbol: (\S+)", line)
        if u and not re.match(r"_?Py", u.group(1)):
            res["undefined"].append(u.group(1))
    res["undefined"] = res["undefined"][:20]
    return res


def _distribution(name):
    from importlib import metadata
    for n in (name, name.replace("-", "_")):
        try:
            return metadata.distribution(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def compiled_facts(names):
    """For each of a team's compiled packages: its version, its top-level modules and whether
    each imports, and every shared object it installed (present, ``ldd -r`` against torch)."""
    import importlib
    if not names:
        return None
    try:
        import torch
        lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    except Exception:  # noqa: BLE001 - torch_facts reports it
        lib_dir = None
    out = {}
    for name in names:
        dist = _distribution(name)
        if dist is None:
            out[name] = {"error": "not installed"}
            continue
        files = [f for f in (dist.files or ()) if ".dist-info/" not in str(f) and "__pycache__" not in str(f)]
        tops = (dist.read_text("top_level.txt") or "").split()
        if not tops:
            tops = sorted({str(f).split("/")[0].split(".")[0] for f in files
                           if str(f).endswith((".py", ".so")) and not str(f).startswith("..")})
        rec = {"version": dist.version, "modules": tops, "imports": {}, "extensions": []}
        for m in tops:
            try:
                importlib.import_module(m)
                rec["imports"][m] = None
            except Exception as exc:  # noqa: BLE001 - report, never crash
                rec["imports"][m] = _err(exc)
        loaded = [lib_dir] + sorted({os.path.dirname(p) for p in _maps_paths() if ".so" in os.path.basename(p)})
        for f in files:
            if re.search(r"\.so(\.|$)", str(f)):
                path = str(dist.locate_file(f))
                ext = {"file": path, "exists": os.path.exists(path)}
                if ext["exists"]:
                    ext.update(ldd_r(path, loaded))
                rec["extensions"].append(ext)
        out[name] = rec
    return out


def _maps_paths():
    try:
        with open("/proc/self/maps") as f:
            return sorted({ln.split()[-1] for ln in f if ln.count(" ") >= 5 and "/" in ln})
    except OSError:
        return []


def collect(ds_ops, compiled=()):
    facts = {"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
             "env": {k: os.environ.get(k) for k in ENV_NAMES}}
    facts["torch"] = torch_facts()
    facts["horovod"] = horovod_facts()
    facts["deepspeed"] = deepspeed_facts(ds_ops)
    facts["compiled"] = compiled_facts(list(compiled))
    facts["libs"] = loaded_libraries()  # after every import above
    facts["rdma"] = rdma_facts()
    return facts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ds-op", action="append", default=[], metavar="NAME=MODULE",
                    help="a DeepSpeed op and the module that loads it (repeatable)")
    ap.add_argument("--compiled", action="append", default=[], metavar="DIST",
                    help="a team's compiled package (distribution name) to import and ldd (repeatable)")
    ap.add_argument("--out", help="also write the facts to this file")
    args = ap.parse_args(argv)
    ops = []
    for item in args.ds_op:
        name, _, module = item.partition("=")
        ops.append((name, module))
    facts = collect(ops, args.compiled)
    text = json.dumps(facts, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(MARKER + " " + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
