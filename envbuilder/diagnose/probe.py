"""Probes: the only code in ``envbuilder doctor`` that touches the host.

``Probe`` reads the live host (commands with a timeout, files, env, ``statvfs``, rlimits,
network interfaces, process names, NVML). ``RecordedProbe`` replays a folder recorded from a
real host (``tests/fixtures/hosts/<name>/``) so the checks can be tested without a GPU.

A missing command or one that times out is a :class:`CommandResult` with ``error`` set, never an
exception. Every method answers ``None`` (or an empty list) for "could not be read".

Layout of a recorded host folder (all optional)::

    nvidia-smi-q-x.xml          stdout of ``nvidia-smi -q -x``
    nvidia-smi-q.txt            stdout of ``nvidia-smi -q``
    nvidia-smi-topo-m.txt       stdout of ``nvidia-smi topo -m``
    <argv joined by '-'>.txt    stdout of any other command (non-alphanumerics become '-')
    env.json                    {"NAME": "value", ...}              the process environment
    shm.json                    {"total_bytes": N, "free_bytes": N} statvfs of /dev/shm
    net.json                    {"interfaces": ["lo", "eth0", ...]}
    rlimits.json                {"memlock": [soft, hard]}           -1 means unlimited
    procs.json                  {"comm": ["systemd", "nv-fabricmanage", ...]}
    sys/..., proc/..., .dockerenv, run/.containerenv      files served at /sys/..., /proc/...
    BASE                        name of a sibling folder whose files fill in what is missing

A command whose program has no recording at all (no file starting with the program name) is
"not found", as on a host without it.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

DEFAULT_TIMEOUT_S = 10.0
OUTPUT_CAP = 16 << 20  # what a probed command may print (nvidia-smi -q -x of 8 GPUs: ~0.3 MiB)
FILE_CAP = 4 << 20  # a host file read (/proc, /sys, a recorded host's files)
UNLIMITED = -1


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command. ``error`` is "not-found", "timeout" or an OS error text."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def describe(self) -> str:
        cmd = " ".join(self.argv)
        if self.error == "not-found":
            return f"`{self.argv[0]}` not found on PATH"
        if self.error == "timeout":
            return f"`{cmd}` timed out"
        if self.error:
            return f"`{cmd}` could not run: {self.error}"
        msg = (self.stderr or self.stdout).strip().splitlines()
        return f"`{cmd}` exited with {self.returncode}" + (f": {msg[0]}" if msg else "")


def _read(path: str | Path) -> str | None:
    """A host file (/proc, /sys, a recording) through the one capped reader; None when it
    cannot be read, is not a regular file or is over the cap."""
    from envbuilder.core.readfile import read_bytes_capped
    from envbuilder.errors import EnvbuilderError

    try:
        return read_bytes_capped(path, "host file", limit=FILE_CAP).decode("utf-8", "replace")
    except EnvbuilderError:
        return None


class Probe:
    """Reads the live host. Subclass and override to fake a host."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout = timeout

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list[str] | tuple[str, ...]) -> CommandResult:
        argv = tuple(argv)
        exe = shutil.which(argv[0])
        if exe is None:
            return CommandResult(argv, None, "", "", "not-found")
        from envbuilder import _child

        try:  # the one child runner: output capped, a deadline, signals forwarded
            r = _child.run([exe, *argv[1:]], timeout=self.timeout, cap=OUTPUT_CAP)
        except OSError as e:  # permission denied, exec format error, ...
            return CommandResult(argv, None, "", "", e.strerror or str(e))
        if r.timed_out:
            return CommandResult(argv, None, "", "", "timeout")
        if r.dropped:  # a command that printed without end: nothing of it is read as facts
            return CommandResult(argv, None, "", "", r.over_cap())
        return CommandResult(argv, r.returncode, r.stdout, r.stderr, None)

    # -- files ------------------------------------------------------------------------------
    def read_text(self, path: str) -> str | None:
        return _read(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    # -- process state ----------------------------------------------------------------------
    def env(self) -> Mapping[str, str]:
        return dict(os.environ)

    def statvfs(self, path: str) -> dict | None:
        """``{"total_bytes", "free_bytes"}`` of the filesystem holding ``path``."""
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return {"total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}

    def memlock(self) -> tuple[int, int] | None:
        """(soft, hard) RLIMIT_MEMLOCK in bytes; -1 means unlimited."""
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        except (OSError, ValueError):
            return None

        def norm(v: int) -> int:
            return UNLIMITED if v == resource.RLIM_INFINITY else int(v)

        return norm(soft), norm(hard)

    def interfaces(self) -> list[str]:
        names = self.listdir("/sys/class/net")
        if names:
            return names
        try:
            return sorted(name for _, name in socket.if_nameindex())
        except OSError:
            return []

    def processes(self) -> list[str] | None:
        """Command names (``/proc/<pid>/comm``, at most 15 characters) of running processes."""
        pids = self.listdir("/proc")
        if pids is None:
            return None
        out = []
        for pid in pids:
            if pid.isdigit():
                comm = self.read_text(f"/proc/{pid}/comm")
                if comm:
                    out.append(comm.strip())
        return out

    def nvml(self) -> dict | None:
        """GPU inventory through NVML (``nvidia-ml-py``), or None when unavailable.

        The shape is ``{"driver": str, "cuda": str|None, "gpus": [ {...}, ... ]}`` with the
        same GPU keys the nvidia-smi parsers in ``envbuilder.doctor`` produce.
        """
        try:
            import pynvml  # type: ignore[import-not-found]  # optional: nvidia-ml-py
        except Exception:  # noqa: BLE001 - not installed, or a broken install: nvidia-smi answers instead
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - NVMLError and its kin (no driver, no GPU): nvidia-smi answers instead
            return None
        try:
            return _nvml_inventory(pynvml)
        except Exception:  # noqa: BLE001 - any NVML call that fails: nvidia-smi answers instead
            return None
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - cleanup: the inventory is already read
                pass


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvml_inventory(nv: Any) -> dict:
    def opt(fn, *a):
        try:
            return fn(*a)
        except Exception:  # noqa: BLE001 - a query this GPU or driver does not support: the field is unknown
            return None

    driver = _s(nv.nvmlSystemGetDriverVersion())
    cuda_int = opt(nv.nvmlSystemGetCudaDriverVersion)
    cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}" if isinstance(cuda_int, int) else None
    enabled = {1: "Enabled", 0: "Disabled"}
    modes = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        cc = opt(nv.nvmlDeviceGetCudaComputeCapability, h)
        mig = opt(nv.nvmlDeviceGetMigMode, h)
        pci = opt(nv.nvmlDeviceGetPciInfo, h)
        gpus.append({
            "index": i,
            "name": _s(nv.nvmlDeviceGetName(h)),
            "uuid": _s(opt(nv.nvmlDeviceGetUUID, h) or "") or None,
            "bus_id": _s(pci.busId) if pci is not None else None,
            "compute_cap": f"{cc[0]}.{cc[1]}" if cc else None,
            "persistence": enabled.get(opt(nv.nvmlDeviceGetPersistenceMode, h)),
            "mig": enabled.get(mig[0]) if mig else None,
            "compute_mode": modes.get(opt(nv.nvmlDeviceGetComputeMode, h)),
            "architecture": None,
            "fabric_state": None,
            "fabric_status": None,
        })
    return {"driver": driver, "cuda": cuda, "gpus": gpus}


_SLUG = re.compile(r"[^A-Za-z0-9_.]+")


def command_filename(argv: list[str] | tuple[str, ...]) -> str:
    """File name a recording of ``argv`` is stored under (without extension)."""
    return _SLUG.sub("-", " ".join(argv)).strip("-")


class RecordedProbe(Probe):
    """Replays a host recorded under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"no recorded host at {self.root}")
        self._roots = [self.root]
        seen = {self.root.resolve()}
        cur = self.root
        while (cur / "BASE").is_file():
            cur = (cur.parent / (cur / "BASE").read_text().strip())
            if cur.resolve() in seen or not cur.is_dir():
                break
            seen.add(cur.resolve())
            self._roots.append(cur)

    def _find(self, rel: str) -> Path | None:
        for r in self._roots:
            p = r / rel
            if p.exists():
                return p
        return None

    def _json(self, name: str) -> Any:
        """A recorded JSON file, read capped (a FIFO, a device or a huge file reads as absent);
        one that is not JSON is bad input naming it (exit 2)."""
        p = self._find(name)
        text = _read(p) if p is not None else None
        if text is None:
            return None
        from envbuilder.errors import InputError

        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"recorded host file {p} is not JSON ({e.msg}, line {e.lineno}): "
                             f"give the folder `envbuilder doctor --record DIR` wrote") from None
        if not isinstance(data, dict):  # every recorded JSON file is one object
            raise InputError(f"recorded host file {p} is not a JSON object: give the folder "
                             f"`envbuilder doctor --record DIR` wrote")
        return data

    def run(self, argv: list[str] | tuple[str, ...]) -> CommandResult:
        argv = tuple(argv)
        stem = command_filename(argv)
        for ext in (".xml", ".txt", ".csv", ""):
            p = self._find(stem + ext)
            if p is not None and p.is_file():
                text = _read(p)
                if text is not None:
                    return CommandResult(argv, 0, text, "", None)
        prog = command_filename(argv[:1])
        known = any(f.name.startswith(prog) for r in self._roots for f in r.iterdir())
        if not known:
            return CommandResult(argv, None, "", "", "not-found")
        return CommandResult(argv, 1, "", "not recorded on this host", None)

    def _rel(self, path: str) -> str:
        return path.lstrip("/")

    def read_text(self, path: str) -> str | None:
        p = self._find(self._rel(path))
        if p is None or not p.is_file():
            return None
        return _read(p)

    def exists(self, path: str) -> bool:
        return self._find(self._rel(path)) is not None

    def listdir(self, path: str) -> list[str] | None:
        p = self._find(self._rel(path))
        if p is None or not p.is_dir():
            return None
        return sorted(x.name for x in p.iterdir())

    def env(self) -> Mapping[str, str]:
        return dict(self._json("env.json") or {})

    def statvfs(self, path: str) -> dict | None:
        data = self._json("shm.json") if path == "/dev/shm" else None
        return dict(data) if data else None

    def memlock(self) -> tuple[int, int] | None:
        data = self._json("rlimits.json") or {}
        v = data.get("memlock")
        return (int(v[0]), int(v[1])) if v else None

    def interfaces(self) -> list[str]:
        data = self._json("net.json") or {}
        return list(data.get("interfaces", []))

    def processes(self) -> list[str] | None:
        data = self._json("procs.json")
        return list(data.get("comm", [])) if data else None

    def nvml(self) -> dict | None:
        return self._json("nvml.json")


# the environment a recording keeps: what the checks read, never the rest (tokens, keys)
# (the whole name, anchored at its true end: ``$`` would also match before a final newline, and
# keep a variable named "PATH\n" with its value)
RECORDED_ENV = re.compile(r"(?:(?:NCCL|GLOO)_[A-Za-z0-9_]*|CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|"
                          r"NVIDIA_DRIVER_CAPABILITIES|PATH)\Z")
_RECORDED_BYTES = 1 << 20  # one file's cap: sysfs and procfs files are small


class RecordingProbe(Probe):
    """Reads the live host like :class:`Probe` and keeps what it read, so that
    ``RecordedProbe(folder)`` replays it (``envbuilder doctor --record DIR``).

    Kept: the stdout of each command that succeeded, each file read, the names a folder
    listing returned (an entry nothing else records becomes an empty file), the paths found to
    exist, the environment variables the checks read (``RECORDED_ENV``; no others, so no token
    leaves the host), /dev/shm's size, the memlock limit, the interfaces, the process names and
    the NVML inventory."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(timeout=timeout)
        self.files: dict[str, str] = {}
        self._listed: dict[str, list[str]] = {}
        self._exists: set[str] = set()
        self._paused = False  # reading what a JSON file records (interfaces, processes)

    def _unrecorded(self, read: Any) -> Any:
        self._paused = True
        try:
            return read()
        finally:
            self._paused = False

    def _keep(self, rel: str, text: str) -> None:
        rel = rel.strip("/")
        if rel and ".." not in rel.split("/"):
            self.files[rel] = text[:_RECORDED_BYTES]

    def _json(self, name: str, doc: Any) -> None:
        self.files[name] = json.dumps(doc, indent=2, sort_keys=True) + "\n"

    def run(self, argv: list[str] | tuple[str, ...]) -> CommandResult:
        res = super().run(argv)
        if res.ok:
            ext = ".xml" if "-x" in res.argv else ".txt"
            self._keep(command_filename(res.argv) + ext, res.stdout)
        return res

    def read_text(self, path: str) -> str | None:
        text = super().read_text(path)
        if text is not None and not self._paused:
            self._keep(path, text)
        return text

    def exists(self, path: str) -> bool:
        found = super().exists(path)
        if found and not self._paused:
            self._exists.add(path.strip("/"))
        return found

    def listdir(self, path: str) -> list[str] | None:
        names = super().listdir(path)
        if names is not None and not self._paused:
            self._listed[path.strip("/")] = list(names)
        return names

    def env(self) -> Mapping[str, str]:
        env = super().env()
        self._json("env.json", {k: v for k, v in env.items() if RECORDED_ENV.match(k)})
        return env

    def statvfs(self, path: str) -> dict | None:
        st = super().statvfs(path)
        if path == "/dev/shm" and st is not None:
            self._json("shm.json", st)
        return st

    def memlock(self) -> tuple[int, int] | None:
        lim = super().memlock()
        if lim is not None:
            self._json("rlimits.json", {"memlock": list(lim)})
        return lim

    def interfaces(self) -> list[str]:
        names: list[str] = self._unrecorded(super().interfaces)  # net.json holds them
        self._json("net.json", {"interfaces": names})
        return names

    def processes(self) -> list[str] | None:
        # procs.json holds them: the /proc/<pid>/comm files are not kept one by one
        names: list[str] | None = self._unrecorded(super().processes)
        if names is not None:
            self._json("procs.json", {"comm": sorted(set(names))})
        return names

    def nvml(self) -> dict | None:
        inv = super().nvml()
        if inv is not None:
            self._json("nvml.json", inv)
        return inv

    def recording(self) -> dict[str, str]:
        """The folder's files (relative path -> text), ready for ``RecordedProbe``."""
        out = dict(self.files)
        dirs = {str(Path(rel).parent) for rel in out} | set(self._listed)
        held = set(out) | {d for rel in out for d in _parents(rel)}
        for folder, names in self._listed.items():
            for name in names:
                rel = f"{folder}/{name}" if folder else name
                if rel not in held and rel not in dirs:
                    out[rel] = ""  # listed only: its name is what the checks read
        for rel in self._exists:
            if rel and rel not in held and rel not in out and rel not in dirs:
                out[rel] = ""
        return out


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
