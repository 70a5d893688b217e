#!/usr/bin/env bash
# The GPU half that no CI machine here can run, on a real NVIDIA host with torch installed
# (no Docker engine needed): doctor on the live driver (recorded with --record, the folder
# tests/fixtures/hosts/ replays), and the smoke job's NCCL path through the product's own
# host runner (envbuilder.run.smoke.run_smoke_host):
#   nccl-1    one rank on GPU 0, NCCL_DEBUG=INFO (NCCL's init, the GPU checks, nccl-tests' busbw)
#   nccl-N    as many ranks as GPUs (the real multi-GPU path; skipped on a one-GPU host)
#   nccl-dup  two ranks on a one-GPU host: the real failure NCCL gives two ranks on one device,
#             then `envbuilder explain` on its log
#   gloo-12   the 12-rank gloo job on the host's CPUs
#   Each run is judged as `envbuilder smoke` judges it (issue 40): the transport NCCL used (its own
#   INFO lines, captured per rank: intra- and inter-node peers, NCCL version, net plugin) and, on
#   GPUs, the all-reduce sweep up to large messages (bounded by free GPU memory) against the
#   published floor of matrices/bandwidth.yaml for this GPU and layout (the percentage, or why
#   none applies); nccl-N also runs with ENVBUILDER_SMOKE_PROGRESSIVE=1 (2, 4, 8 ... ranks
#   inside the job), and each log goes through `envbuilder smoke --records LOG --fabric socket`
#   fault-*   one NCCL rank, each with a setting that breaks it as users break it: an interface
#             that does not exist (NCCL_SOCKET_IFNAME), the IB transport forced on a host without
#             InfiniBand (NCCL_NET=IB), a GPU index the container does not have
#             (CUDA_VISIBLE_DEVICES): the real messages of this NCCL and torch, for explain
# Everything lands in one archive, DEST/gpu-host-check.tgz (DEST: $1, else $OUT, else ./gpu-host-check).
# Run from the repository root: PYTHONPATH must reach envbuilder (set below).
set -uo pipefail
DEST=${1:-${OUT:-gpu-host-check}}
R=$(mktemp -d)/r
mkdir -p "$R" "$DEST"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
step() { echo "== $* ($(date -u +%T))"; }
{
  step "host"
  uname -a; nvidia-smi; nvidia-smi -L; nvidia-smi topo -m
  "$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(),
      "gpus", torch.cuda.device_count(),
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
EOF
  step "doctor --record"
  "$PY" -m envbuilder doctor --record "$R/host" --json >"$R/doctor.json"; echo "doctor exit $?"
  for t in cu128 cu130; do
    "$PY" -m envbuilder doctor --target "$t" --nproc 1 --json >"$R/doctor-$t.json"
    echo "doctor --target $t exit $?"
  done
  step "smoke"
  R="$R" "$PY" - <<'EOF'
import json, os, time
import torch
from envbuilder.run.smoke import judge, run_smoke_host
from envbuilder.ui.output import proof_lines
R = os.environ["R"]
gpus = torch.cuda.device_count()
runs = [("nccl-1", 1, "nccl", {"NCCL_DEBUG": "INFO"})]
if gpus > 1:
    runs.append((f"nccl-{gpus}", gpus, "nccl", {"NCCL_DEBUG": "WARN"}))
    runs.append((f"nccl-{gpus}-progressive", gpus, "nccl",
                 {"NCCL_DEBUG": "WARN", "ENVBUILDER_SMOKE_PROGRESSIVE": "1"}))
else:
    runs.append(("nccl-dup", 2, "nccl", {"NCCL_DEBUG": "WARN"}))
runs.append(("gloo-12", 12, "gloo", {}))
runs += [("fault-ifname", 1, "nccl", {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "envb0"}),
         ("fault-net-ib", 1, "nccl", {"NCCL_DEBUG": "INFO", "NCCL_NET": "IB"}),
         ("fault-cvd", 1, "nccl", {"NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": str(gpus)})]
for name, n, backend, env in runs:
    t0 = time.monotonic()
    try:
        r = run_smoke_host(nproc=n, backend=backend, timeout=60, env=env)
        r = judge(r, fabric=None, min_busbw="auto" if backend == "nccl" else None)
    except Exception as e:  # record and go on: each run is its own finding
        print(f"{name}: {type(e).__name__}: {e}")
        continue
    with open(f"{R}/smoke-{name}.log", "w") as f:
        f.write(r.log)
    d = r.to_dict()
    d.pop("log")
    with open(f"{R}/smoke-{name}.json", "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    print(f"{name}: ok={r.ok} exit={r.exit_code} failed={r.failed} "
          f"max busbw={r.max_busbw_gbps} GB/s ({time.monotonic() - t0:.0f} s)")
    print(r.bandwidth_table())
    print("".join(proof_lines(r)))
EOF
  step "smoke --records (the logs through the command line)"
  for f in "$R"/smoke-*.log; do
    "$PY" -m envbuilder smoke --records "$f" --fabric socket --json >"${f%.log}.records.json"
    echo "smoke --records $(basename "$f") --fabric socket exit $?"
  done
  step "explain"
  for f in "$R"/smoke-*.log; do
    "$PY" -m envbuilder explain "$f" --json >"${f%.log}.explain.json"; rc=$?; echo "explain $(basename "$f") exit $rc"
  done
  step "done"
} 2>&1 | tee "$R/log.txt"
tar czf "$DEST/gpu-host-check.tgz" -C "$(dirname "$R")" r && echo "wrote $DEST/gpu-host-check.tgz"
