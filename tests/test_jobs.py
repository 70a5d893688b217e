"""envbuilder.jobs: the cluster job files for the smoke job.

Validated against published schemas, not against our own idea of them:
* PyTorchJob: the training operator's CRD openAPIV3Schema (tests/data/pytorchjob-crd-v1.yaml, its
  source and commit in its header), with jsonschema Draft 7 after dropping x-kubernetes-* keys;
  plus the operator's webhook rules the CRD does not encode (replica types, one Master, a
  container named "pytorch", the restart policies it accepts).
* Job, Service and the PodTemplateSpec in each PyTorchJob replica: the official `kubernetes`
  client models (deserialize, then serialize back: a field the model does not know, or a
  wrongly typed one, does not survive the round trip; a missing required field raises).
* Slurm scripts: shellcheck.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from envbuilder.api import Pins, resolve_target
from envbuilder.core.jobs import KINDS, JobsConfig
from envbuilder.errors import InputError
from envbuilder.render.jobs import DEFAULT_LAYOUTS, job_name, render_jobs
from envbuilder.render.plan import PlanOptions, make_plan
from hostile_helpers import assert_clean_failure, cli

DATA = Path(__file__).parent / "data"
DIGEST = "registry.example.com:5000/ml/envbuilder@sha256:" + "0123456789abcdef" * 4


# --fabric none: the job files without RDMA settings (the default, ib, adds IPC_LOCK: test_training)
NO_FABRIC = Pins(fabric="none")
# every Kubernetes kind, the legacy PyTorchJob included ([jobs] kubernetes)
ALL_KINDS = JobsConfig(kubernetes=KINDS)


@pytest.fixture(scope="module")
def plan():
    return make_plan(resolve_target("cu121", pins=NO_FABRIC))


@pytest.fixture(scope="module")
def files(plan):
    return render_jobs(plan, image=DIGEST, jobs=ALL_KINDS)


@pytest.fixture(scope="module")
def by_world(files):
    """The job files of 12 (default layouts), 16 (render --layout 1x16,2x8,4x4) and 8 ranks
    (render --nproc 8: the default layouts of 8)."""
    p16 = make_plan(resolve_target("cu121", pins=NO_FABRIC), PlanOptions.of(smoke_nproc=16))
    p8 = make_plan(resolve_target("cu121", pins=NO_FABRIC), PlanOptions.of(smoke_nproc=8))
    return {12: files, 16: render_jobs(p16, image=DIGEST, layouts=((1, 16), (2, 8), (4, 4)),
                                       jobs=ALL_KINDS),
            8: render_jobs(p8, image=DIGEST, jobs=ALL_KINDS)}


# (world size, nodes, ranks per node) of every rendered layout the per-file checks run on
CASES = [(12, n, p) for n, p in DEFAULT_LAYOUTS] + [(16, 1, 16), (16, 2, 8), (16, 4, 4),
                                                     (8, 1, 8), (8, 2, 4)]


@pytest.fixture(scope="module")
def files_ib_cpu():
    plan = make_plan(resolve_target("cu121"))  # --fabric ib (the default): RDMA in the image
    return render_jobs(plan, image="envbuilder:cu121", gpus=False, infiniband=True,
                       apptainer_image="/shared/images/cu121.sif", jobs=ALL_KINDS)


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def strip_x(node):
    if isinstance(node, dict):
        return {k: strip_x(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if isinstance(node, list):
        return [strip_x(v) for v in node]
    return node


@pytest.fixture(scope="module")
def crd_validator():
    jsonschema = pytest.importorskip("jsonschema")
    raw = (DATA / "pytorchjob-crd-v1.yaml").read_text()
    assert "c20bf65e03b85543c0b2ff25b14c7e335cce34f9" in raw.split("\ntype:", 1)[0]
    schema = strip_x(yaml.safe_load(raw))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


# -- kubernetes client models --------------------------------------------------------------

def k8s_roundtrip(obj: dict, klass: str) -> dict:
    """Deserialize into the official model and serialize back."""
    client = pytest.importorskip("kubernetes.client")
    api = client.ApiClient()
    model = api._ApiClient__deserialize(copy.deepcopy(obj), klass)
    return api.sanitize_for_serialization(model)


def _norm(node):
    """Leaves as strings: the models carry quantities (nvidia.com/gpu: 6) as strings."""
    if isinstance(node, dict):
        return {k: _norm(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_norm(v) for v in node]
    return str(node)


def assert_model(obj: dict, klass: str) -> None:
    back = k8s_roundtrip(obj, klass)
    assert _norm(back) == _norm(obj), f"{klass}: fields lost or changed in the round trip"


def test_k8s_roundtrip_catches_unknown_and_missing_fields():
    good = {"metadata": {"name": "x"},
            "spec": {"containers": [{"name": "pytorch", "image": "i"}]}}
    assert_model(good, "V1PodTemplateSpec")
    bad = copy.deepcopy(good)
    bad["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # a typo
    with pytest.raises(AssertionError):
        assert_model(bad, "V1PodTemplateSpec")
    with pytest.raises(ValueError):  # containers[].name is required
        k8s_roundtrip({"spec": {"containers": [{"image": "i"}]}}, "V1PodTemplateSpec")


# -- the files -----------------------------------------------------------------------------

def _file_set(yamls: tuple[str, ...]) -> set[str]:
    expected = {"jobs/README.md", "jobs/layouts.json"}
    if "trainjob" in yamls:  # the runtime the TrainJobs reference, rendered from the target
        expected.add("jobs/clustertrainingruntime.yaml")
    for n, p in DEFAULT_LAYOUTS:
        for kind in yamls:
            expected.add(f"jobs/{kind}-{n}x{p}.yaml")
        for kind in ("slurm-apptainer", "slurm-pyxis", "slurm-host"):
            expected.add(f"jobs/{kind}-{n}x{p}.sbatch")
    return expected


def test_file_set(files, plan):
    assert set(files) == _file_set(("trainjob", "jobset", "indexed-job", "pytorchjob"))
    # without [jobs] kubernetes: Trainer v2, JobSet and the indexed Job; PyTorchJob only as legacy
    assert set(render_jobs(plan, image=DIGEST)) == _file_set(("trainjob", "jobset", "indexed-job"))


@pytest.mark.parametrize("world,n,p", CASES)
def test_pytorchjob(by_world, crd_validator, plan, world, n, p):
    files = by_world[world]
    (job,) = docs(files[f"jobs/pytorchjob-{n}x{p}.yaml"])
    errors = sorted(crd_validator.iter_errors(job), key=str)
    assert not errors, [e.message for e in errors]
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    spec = job["spec"]
    assert "elasticPolicy" not in spec
    assert spec["nprocPerNode"] == str(p)  # a string in the v1 CRD
    reps = spec["pytorchReplicaSpecs"]
    # the operator's webhook: Master and Worker only, exactly one Master
    assert set(reps) == ({"Master", "Worker"} if n > 1 else {"Master"})
    assert reps["Master"]["replicas"] == 1
    assert sum(r["replicas"] for r in reps.values()) == n
    assert sum(r["replicas"] for r in reps.values()) * int(spec["nprocPerNode"]) == world
    assert spec["runPolicy"]["backoffLimit"] == 0
    assert spec["runPolicy"]["cleanPodPolicy"] in ("None", "Running", "All")
    assert job["metadata"]["labels"]["envbuilder.io/tag"] == plan.stack.tag
    name = job["metadata"]["name"]
    assert name == job_name("cu121", n, p) and len(name + "-worker-99") <= 63
    for rep in reps.values():
        assert rep["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
        assert rep["restartPolicy"] == "Never"
        tpl = rep["template"]
        assert_model(tpl, "V1PodTemplateSpec")
        (c,) = tpl["spec"]["containers"]
        assert c["name"] == "pytorch"
        assert c["image"] == DIGEST
        assert "command" not in c  # keep the image's ENTRYPOINT
        args = c["args"]
        assert args[0] == "torchrun"
        assert f"--nnodes={n}" in args and f"--nproc_per_node={p}" in args
        assert "--node_rank=$(RANK)" in args and "--max_restarts=0" in args
        assert "--master_addr=$(MASTER_ADDR)" in args and "--master_port=$(MASTER_PORT)" in args
        assert f"{plan.home}/smoke/ddp_smoke.py" in args
        i = args.index(f"{plan.home}/smoke/ddp_smoke.py")
        assert args[i + 1:i + 3] == ["--backend", "auto"]
        assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in c["ports"]
        _pod_checks(tpl, p, gpus=True, ib=False)


def _pod_checks(tpl: dict, p: int, *, gpus: bool, ib: bool) -> None:
    spec = tpl["spec"]
    (c,) = spec["containers"]
    vols = {v["name"]: v for v in spec["volumes"]}
    shm = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(shm) == 1
    assert vols[shm[0]["name"]]["emptyDir"]["medium"] == "Memory"
    assert re.fullmatch(r"[0-9]+Gi", vols[shm[0]["name"]]["emptyDir"]["sizeLimit"])
    limits = (c.get("resources") or {}).get("limits") or {}
    requests = (c.get("resources") or {}).get("requests") or {}
    if gpus:
        assert limits["nvidia.com/gpu"] == str(p)  # a quantity, as a string
    else:
        assert "nvidia.com/gpu" not in limits
    # Burstable QoS, not BestEffort: CPUs for the ranks, memory for the ranks plus the
    # memory-backed /dev/shm (which counts against the pod's memory), limited to the same
    from envbuilder.render.jobs import quantity_bytes

    shm_bytes = quantity_bytes(vols[shm[0]["name"]]["emptyDir"]["sizeLimit"])
    assert int(requests["cpu"]) >= p
    assert quantity_bytes(requests["memory"]) >= shm_bytes + p * 2**30
    assert limits["memory"] == requests["memory"] and "cpu" not in limits
    caps = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
    assert (caps == ["IPC_LOCK"]) if ib else (caps == [])
    assert spec["securityContext"]["runAsUser"] == 1000


@pytest.mark.parametrize("world,n,p", CASES)
def test_indexed_job(by_world, plan, world, n, p):
    files = by_world[world]
    svc, job = docs(files[f"jobs/indexed-job-{n}x{p}.yaml"])
    assert (svc["kind"], job["kind"]) == ("Service", "Job")
    assert_model(svc, "V1Service")
    assert_model(job, "V1Job")
    name = job["metadata"]["name"]
    assert svc["metadata"]["name"] == name and len(f"{name}-{n - 1}") <= 63
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    s = job["spec"]
    assert s["completionMode"] == "Indexed"
    assert s["completions"] == s["parallelism"] == n
    assert s["backoffLimit"] == 0
    assert s["completions"] * p == world
    tpl = s["template"]
    assert tpl["spec"]["subdomain"] == svc["metadata"]["name"]
    assert tpl["spec"]["restartPolicy"] == "Never"
    (c,) = tpl["spec"]["containers"]
    args = c["args"]
    assert "--rdzv_backend=c10d" in args
    assert f"--rdzv_endpoint={name}-0.{name}:29400" in args
    assert f"--rdzv_id={name}" in args
    assert "--node_rank=$(JOB_COMPLETION_INDEX)" in args
    assert f"--nnodes={n}" in args and f"--nproc_per_node={p}" in args
    assert any(pt["containerPort"] == 29400 for pt in c["ports"])
    assert svc["spec"]["ports"][0]["port"] == 29400
    _pod_checks(tpl, p, gpus=True, ib=False)


def test_infiniband_and_cpu(files_ib_cpu, crd_validator):
    for n, p in DEFAULT_LAYOUTS:
        (ptj,) = docs(files_ib_cpu[f"jobs/pytorchjob-{n}x{p}.yaml"])
        assert not list(crd_validator.iter_errors(ptj))
        for rep in ptj["spec"]["pytorchReplicaSpecs"].values():
            assert_model(rep["template"], "V1PodTemplateSpec")
            _pod_checks(rep["template"], p, gpus=False, ib=True)
            args = rep["template"]["spec"]["containers"][0]["args"]
            assert args[args.index("--backend") + 1] == "gloo"
        svc, job = docs(files_ib_cpu[f"jobs/indexed-job-{n}x{p}.yaml"])
        assert_model(job, "V1Job")
        _pod_checks(job["spec"]["template"], p, gpus=False, ib=True)
        for kind in ("apptainer", "pyxis"):
            text = files_ib_cpu[f"jobs/slurm-{kind}-{n}x{p}.sbatch"]
            assert "--gpus-per-node" not in text and "--nv" not in text
            assert "--backend gloo" in text
    assert "/shared/images/cu121.sif" in files_ib_cpu["jobs/slurm-apptainer-2x6.sbatch"]
    assert "IPC_LOCK" in files_ib_cpu["jobs/README.md"]


@pytest.mark.parametrize("world,n,p", CASES)
@pytest.mark.parametrize("kind", ["apptainer", "pyxis"])
def test_slurm(by_world, plan, kind, world, n, p):
    files = by_world[world]
    text = files[f"jobs/slurm-{kind}-{n}x{p}.sbatch"]
    sb = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, re.M))
    assert sb["nodes"] == str(n) and sb["ntasks-per-node"] == "1"
    assert sb["gpus-per-node"] == str(p)
    assert "exclusive" in sb and int(sb["cpus-per-task"]) >= p
    assert int(sb["nodes"]) * int(sb["gpus-per-node"]) == world
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in text
    assert '--nnodes="$nnodes"' in text and 'nnodes="${SLURM_NNODES:?' in text
    assert f"--nproc_per_node={p}" in text
    assert "--rdzv_backend=c10d" in text and '--rdzv_endpoint="$head_node:29400"' in text
    assert '--rdzv_id="$SLURM_JOB_ID"' in text and "--max_restarts=0" in text
    assert f"{plan.home}/bin/entrypoint.sh" in text
    assert f"{plan.home}/smoke/ddp_smoke.py --backend auto" in text
    if kind == "apptainer":
        assert "apptainer exec --nv" in text and f"{plan.stack.tag}.sif" in text
    else:
        # pyxis/enroot separate the registry host with '#'
        assert "--container-image=\"$image\"" in text
        assert "registry.example.com:5000#ml/envbuilder@sha256:" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck(files, files_ib_cpu, tmp_path):
    paths = []
    for i, fs in enumerate((files, files_ib_cpu)):
        for rel, text in fs.items():
            if rel.endswith(".sbatch"):
                p = tmp_path / str(i) / Path(rel).name
                p.parent.mkdir(exist_ok=True)
                p.write_text(text)
                paths.append(str(p))
    assert len(paths) == 18
    r = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", *paths],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme(files):
    text = files["jobs/README.md"]
    assert "kubectl apply -f" in text and "sbatch " in text
    for n, p in DEFAULT_LAYOUTS:
        assert f"pytorchjob-{n}x{p}.yaml" in text and f"slurm-pyxis-{n}x{p}.sbatch" in text


def test_other_targets_render():
    for target in ("cpu", "cu118-hvd", "cu121-ds"):
        plan = make_plan(resolve_target(target))
        fs = render_jobs(plan, image=f"envbuilder:{target}", gpus=target != "cpu", jobs=ALL_KINDS)
        (job,) = docs(fs["jobs/pytorchjob-3x4.yaml"])
        assert job["metadata"]["labels"]["envbuilder.io/tag"] == plan.stack.tag
        assert job["metadata"]["name"] == job_name(target, 3, 4)


@pytest.mark.parametrize("kw,match", [
    ({"image": "bad image; rm -rf /"}, "image"),
    ({"image": "x:1", "layouts": ((2, 5),)}, "10 ranks"),
    ({"image": "x:1", "layouts": ((0, 12),)}, "1..1024"),
    ({"image": "x:1", "layouts": ((1, 65),)}, "1..64"),
    ({"image": "x:1", "layouts": ((1, 12), (1, 12))}, "twice"),
    ({"image": "x:1", "shm_size": "8G; x"}, "quantity"),
    ({"image": "x:1", "apptainer_image": "a b.sif"}, "apptainer"),
    ({"image": "x:1", "apptainer_image": "$(id).sif"}, "apptainer"),
    ({"image": "x:1", "timeout": 1}, "timeout"),
])
def test_rejects(plan, kw, match):
    with pytest.raises(InputError, match=re.escape(match)):
        render_jobs(plan, **kw)


def test_job_name_sanitises():
    assert job_name("cu121-torch2.1-py310", 2, 6) == "smoke-cu121-torch2-1-py310-2x6"
    assert len(job_name("x" * 200, 12, 1)) <= 40


# -- layouts for any GPU count (render --layout / --nproc) -----------------------------------

def test_parse_layout():
    from envbuilder.core.layouts import MAX_NODES, MAX_PER_NODE, parse_layout, parse_layouts

    assert parse_layout("2x8") == (2, 8) and parse_layout(" 4X4 ") == (4, 4)
    assert parse_layout(f"{MAX_NODES}x{MAX_PER_NODE}") == (MAX_NODES, MAX_PER_NODE)
    assert parse_layouts(["1x16,2x8", "4x4"]) == ((1, 16), (2, 8), (4, 4))
    for bad, match in (("0x8", "nodes must be 1..1024"), ("2x0", "ranks per node must be 1..64"),
                       ("2x", "'2x' is not NNODES x NPROC_PER_NODE"), ("a;b", "'a;b'"),
                       ("2x8;id", "'2x8;id'"), ("", "e.g. 2x8"), ("-1x4", "'-1x4'"),
                       (f"{MAX_NODES + 1}x1", "nodes must be"), ("1x65", "ranks per node"),
                       ("2*8", "e.g. 2x8"), ("1e1x2", "'1e1x2'")):
        with pytest.raises(InputError, match=re.escape(match)):
            parse_layout(bad)
    with pytest.raises(InputError, match="different world sizes"):
        parse_layouts(["1x8", "2x8"])
    with pytest.raises(InputError, match="twice"):
        parse_layouts(["2x8,2x8"])


@pytest.mark.parametrize("world,expected", [
    (12, ((1, 12), (2, 6), (3, 4))),  # the default job files: one node, 8-GPU and 4-GPU nodes
    (16, ((1, 16), (2, 8), (4, 4))),
    (8, ((1, 8), (2, 4))),
    (24, ((1, 24), (3, 8), (6, 4))),
    (4, ((1, 4),)),
    (128, ((16, 8), (32, 4))),  # more than a node carries: no 1x128
])
def test_default_layouts(world, expected):
    from envbuilder.core.layouts import default_layouts

    assert default_layouts(world) == expected
    assert all(n * p == world for n, p in expected)


def test_default_layouts_are_the_12_rank_defaults():
    from envbuilder.core.layouts import default_layouts

    assert default_layouts(12) == DEFAULT_LAYOUTS
    plan = make_plan(resolve_target("cu121"))
    assert render_jobs(plan, image=DIGEST) == render_jobs(plan, image=DIGEST, layouts=DEFAULT_LAYOUTS)


def test_layout_index_and_readme(by_world):
    import json

    idx = json.loads(by_world[16]["jobs/layouts.json"])
    assert idx["world_size"] == 16
    assert [e["layout"] for e in idx["layouts"]] == ["1x16", "2x8", "4x4"]
    for e in idx["layouts"]:
        assert e["nnodes"] * e["nproc"] == 16 and e["name"] == job_name("cu121", e["nnodes"], e["nproc"])
        assert all(f in by_world[16] for f in e["files"]) and len(e["files"]) == 7
    readme = by_world[16]["jobs/README.md"]
    assert "16-rank" in readme and "kubectl apply -f pytorchjob-2x8.yaml" in readme
    assert "| 2 x 8 | 8, 16-GPU nodes |" in readme
    default = by_world[12]["jobs/README.md"]
    assert "kubectl apply -f pytorchjob-2x6.yaml" in default and "| 2 x 6 | 8, 16-GPU nodes |" in default
    assert f"kubectl get trainjob {job_name('cu121', 2, 6)} -w" in default
    assert "kubectl apply -f jobset-2x6.yaml" in default


def _cli_render(tmp_path, *args):
    out = tmp_path / "out"
    return out, cli("render", "cu121", "-o", str(out), *args)


def test_cli_render_2x8_writes_16_rank_job_files(tmp_path):
    import json

    out, p = _cli_render(tmp_path, "--layout", "2x8", "--json")
    assert p.returncode == 0, p.stderr
    jobs = sorted(x.name for x in (out / "jobs").iterdir())
    assert jobs == ["README.md", "clustertrainingruntime.yaml", "indexed-job-2x8.yaml",
                    "jobset-2x8.yaml", "layouts.json",
                    "slurm-apptainer-2x8.sbatch", "slurm-host-2x8.sbatch",
                    "slurm-pyxis-2x8.sbatch", "trainjob-2x8.yaml"]
    (job,) = docs((out / "jobs/trainjob-2x8.yaml").read_text())
    assert job["spec"]["trainer"]["numNodes"] == 2 and job["spec"]["trainer"]["numProcPerNode"] == 8
    (js,) = docs((out / "jobs/jobset-2x8.yaml").read_text())
    args = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--nnodes=2" in args and "--nproc_per_node=8" in args
    assert json.loads((out / "stack.json").read_text())["smoke"] == {
        "world_size": 16, "layouts": ["2x8"], "jobs": "jobs/layouts.json"}
    # the single-host smoke job runs one node of the layout (8 GPUs), not the 16-rank world
    assert 'NPROC:-8' in (out / "smoke/run.sh").read_text()


def test_cli_render_several_layouts_and_nproc(tmp_path):
    import json

    out, p = _cli_render(tmp_path, "--layout", "1x16,2x8", "--layout", "4x4", "--nproc", "16")
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "stack.json").read_text())["smoke"]["layouts"] == ["1x16", "2x8", "4x4"]
    out8, p = _cli_render(tmp_path / "8", "--nproc", "8")
    assert p.returncode == 0, p.stderr
    assert json.loads((out8 / "stack.json").read_text())["smoke"]["layouts"] == ["1x8", "2x4"]
    assert (out8 / "jobs/slurm-pyxis-1x8.sbatch").is_file()


def test_cli_render_default_records_the_12_rank_layouts(tmp_path):
    import json

    out, p = _cli_render(tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "stack.json").read_text())["smoke"]["layouts"] == ["1x12", "2x6", "3x4"]
    names = {x.name for x in (out / "jobs").iterdir()}
    assert {"trainjob-1x12.yaml", "trainjob-2x6.yaml", "trainjob-3x4.yaml"} <= names
    assert not any(n.startswith("pytorchjob-") for n in names)  # legacy only when asked
    assert 'NPROC:-12' in (out / "smoke/run.sh").read_text()


@pytest.mark.parametrize("args,needles", [
    (("--layout", "0x8"), ("--layout 0x8", "e.g. 2x8")),
    (("--layout", "2x"), ("--layout '2x'", "e.g. 2x8")),
    (("--layout", "a;b"), ("--layout 'a;b'", "e.g. 2x8")),
    (("--layout", "1x8", "--layout", "2x8"), ("different world sizes", "1x8=8", "2x8=16")),
    (("--layout", "2x8", "--nproc", "12"), ("--nproc 12", "2x8")),
    (("--layout", "2x8,2x8"), ("twice",)),
])
def test_cli_render_refuses_bad_layouts(tmp_path, args, needles):
    out, p = _cli_render(tmp_path, *args)
    assert_clean_failure(p, 2, *needles)
    assert not out.exists()


@pytest.mark.parametrize("layout,nproc,nnodes,expected", [
    (None, None, None, (12, 1, None)),  # the smoke job's default stays 12 ranks on one node
    ("2x2", None, None, (2, 2, None)),
    ("2x2", 2, 2, (2, 2, None)),
    ("1x4", None, None, (4, 1, None)),
    ("7,5", None, None, (12, 2, [7, 5])),  # the uneven split still works, nodes from the counts
    ("7,5", None, 2, (12, 2, [7, 5])),
    (None, 4, 3, (4, 3, None)),
])
def test_smoke_layout_options(layout, nproc, nnodes, expected):
    from envbuilder.api.smoketest import _smoke_layout

    assert _smoke_layout(layout, nproc, nnodes, False) == expected


# -- Kubernetes' current APIs: Trainer v2 TrainJob, JobSet, Kueue; tailored from [jobs] ---------

TAILORED = {
    "command": "torchrun train.py --config configs/a.yaml",
    "queue": "team-a", "cluster_queue": "gpu-cluster", "priority_class": "high",
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "image_pull_secrets": ["regcred"], "resources": {"rdma/ib": 1}, "host_network": True,
    "env": {"NCCL_IB_HCA": "mlx5"},
    "slurm": {"partition": "gpu", "account": "ml", "qos": "normal", "time": "02:00:00",
              "constraint": "h100&ib"},
}


def _crd(name: str, tag: str):
    jsonschema = pytest.importorskip("jsonschema")
    raw = (DATA / name).read_text()
    head = raw.split("\ntype:", 1)[0]
    assert f"tag {tag}, commit " in head and "Source: https://github.com/" in head
    schema = strip_x(yaml.safe_load(raw))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def trainjob_crd():
    return _crd("trainjob-crd-v1alpha1.yaml", "v2.3.0")


@pytest.fixture(scope="module")
def jobset_crd():
    return _crd("jobset-crd-v1alpha2.yaml", "v0.12.0")


@pytest.fixture(scope="module")
def localqueue_crd():
    return _crd("kueue-localqueue-crd-v1beta2.yaml", "v0.19.2")


@pytest.fixture(scope="module")
def tailored():
    """A 4x8 project's job files (32 ranks), every [jobs] key set."""
    from envbuilder.core.jobs import parse

    plan = make_plan(resolve_target("cu121", pins=NO_FABRIC), PlanOptions.of(smoke_nproc=32))
    return render_jobs(plan, image=DIGEST, layouts=((4, 8),), jobs=parse(TAILORED),
                       name="train-a")


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=str)]


def test_crd_validators_catch_wrong_fields(trainjob_crd, jobset_crd, localqueue_crd):
    assert _errors(trainjob_crd, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                  "spec": {"runtimeRef": {}}})  # runtimeRef.name is required
    assert _errors(trainjob_crd, {"spec": {"runtimeRef": {"name": "x"},
                                           "trainer": {"numNodes": "4"}}})  # an integer
    assert _errors(jobset_crd, {"spec": {"replicatedJobs": [{"name": "node"}]}})  # template
    assert _errors(localqueue_crd, {"spec": {"clusterQueue": "Not_A_Name"}})


@pytest.mark.parametrize("world,n,p", CASES)
def test_trainjob(by_world, trainjob_crd, plan, world, n, p):
    (job,) = docs(by_world[world][f"jobs/trainjob-{n}x{p}.yaml"])
    assert not _errors(trainjob_crd, job)
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    # the runtime rendered from the target (jobs/clustertrainingruntime.yaml), not torch-distributed
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime", "name": "envbuilder-cu121"}
    tr = job["spec"]["trainer"]
    assert tr["numNodes"] == n and tr["numProcPerNode"] == p and tr["image"] == DIGEST
    # the runtime gives torchrun PET_NNODES/PET_NPROC_PER_NODE/PET_NODE_RANK/PET_MASTER_*
    assert tr["command"][:3] == [f"{plan.home}/bin/entrypoint.sh", "torchrun", "--max_restarts=0"]
    assert not any(a.startswith("--nnodes") for a in tr["command"])
    assert tr["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == str(p)
    (patch,) = job["spec"]["runtimePatches"]
    (rj,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node"  # the torch-distributed runtime's replicated job and container
    pod = rj["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["name"] == "node"
    for v in pod["volumes"]:
        assert_model(v, "V1Volume")  # the CRD file prunes the inlined Volume schema


@pytest.mark.parametrize("world,n,p", CASES)
def test_jobset(by_world, jobset_crd, plan, world, n, p):
    (js,) = docs(by_world[world][f"jobs/jobset-{n}x{p}.yaml"])
    assert not _errors(jobset_crd, js)
    assert (js["apiVersion"], js["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    name = js["metadata"]["name"]
    assert name == job_name("cu121", n, p) and js["spec"]["network"]["enableDNSHostnames"]
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 0
    (rj,) = js["spec"]["replicatedJobs"]
    assert rj["replicas"] == n and rj["template"]["spec"]["backoffLimit"] == 0
    tpl = rj["template"]["spec"]["template"]
    assert_model(tpl, "V1PodTemplateSpec")  # the CRD file prunes the inlined PodSpec
    assert_model(rj["template"], "V1JobTemplateSpec")
    args = tpl["spec"]["containers"][0]["args"]
    # pod 0 of the set: <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain = jobset>
    assert f"--rdzv_endpoint={name}-node-0-0.{name}:29400" in args
    assert f"--nnodes={n}" in args and f"--nproc_per_node={p}" in args
    assert len(f"{name}-node-{n - 1}-0") <= 63
    _pod_checks(tpl, p, gpus=True, ib=False)


def test_tailored_trainjob_and_jobset(tailored, trainjob_crd, jobset_crd, localqueue_crd):
    """Every [jobs] key reaches the Kubernetes files, and they still validate."""
    for prefix, name in (("", "smoke-train-a-4x8"), ("train-", "train-a-4x8")):
        (tj,) = docs(tailored[f"jobs/{prefix}trainjob-4x8.yaml"])
        (js,) = docs(tailored[f"jobs/{prefix}jobset-4x8.yaml"])
        assert not _errors(trainjob_crd, tj) and not _errors(jobset_crd, js)
        for doc in (tj, js):
            assert doc["metadata"]["name"] == name
            assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        # TrainJob: Kueue's priority label; node selector, tolerations, pull secrets by patch
        assert tj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
        assert tj["spec"]["trainer"]["resourcesPerNode"]["limits"]["rdma/ib"] == "1"
        assert tj["spec"]["trainer"]["env"] == [{"name": "NCCL_IB_HCA", "value": "mlx5"}]
        pod = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == TAILORED["node_selector"]
        assert pod["tolerations"] == TAILORED["tolerations"]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        # JobSet: the whole pod spec
        tpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        assert_model(tpl, "V1PodTemplateSpec")
        spec = tpl["spec"]
        assert spec["priorityClassName"] == "high" and spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert spec["nodeSelector"] == TAILORED["node_selector"]
        assert spec["tolerations"] == TAILORED["tolerations"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        (c,) = spec["containers"]
        assert c["resources"]["limits"]["rdma/ib"] == "1" and c["env"] == [
            {"name": "NCCL_IB_HCA", "value": "mlx5"}]
        assert c["imagePullPolicy"] == "IfNotPresent"  # pinned by digest
    svc, job = docs(tailored["jobs/indexed-job-4x8.yaml"])
    assert_model(job, "V1Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "high"
    (lq,) = docs(tailored["jobs/kueue-localqueue.yaml"])
    assert not _errors(localqueue_crd, lq)
    assert (lq["kind"], lq["metadata"]["name"], lq["spec"]["clusterQueue"]) == (
        "LocalQueue", "team-a", "gpu-cluster")
    assert not any(k.startswith("jobs/pytorchjob") for k in tailored)


def test_command_runs_with_the_layouts_rendezvous(tailored):
    (js,) = docs(tailored["jobs/train-jobset-4x8.yaml"])
    args = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["torchrun", "--nnodes=4", "--nproc_per_node=8", "--rdzv_backend=c10d",
                    "--rdzv_endpoint=train-a-4x8-node-0-0.train-a-4x8:29400",
                    "--rdzv_id=train-a-4x8", "--max_restarts=0",
                    "train.py", "--config", "configs/a.yaml"]
    (tj,) = docs(tailored["jobs/train-trainjob-4x8.yaml"])
    assert tj["spec"]["trainer"]["command"][1:] == ["torchrun", "--max_restarts=0", "train.py",
                                                    "--config", "configs/a.yaml"]
    svc, job = docs(tailored["jobs/train-indexed-job-4x8.yaml"])
    jargs = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--node_rank=$(JOB_COMPLETION_INDEX)" in jargs and jargs[-3:] == [
        "train.py", "--config", "configs/a.yaml"]
    sb = tailored["jobs/train-slurm-pyxis-4x8.sbatch"]
    assert '--rdzv_endpoint="$head_node:29400"' in sb and "--nproc_per_node=8" in sb
    assert "  train.py --config configs/a.yaml || rc=$?" in sb
    assert "ENVBUILDER_SMOKE_SUMMARY" not in sb and "ddp_smoke.py" not in sb
    idx = __import__("json").loads(tailored["jobs/layouts.json"])
    assert idx["layouts"][0]["train_name"] == "train-a-4x8" and idx["pinned"] is True
    assert "train-trainjob-4x8.yaml" in " ".join(idx["layouts"][0]["train_files"])


@pytest.mark.parametrize("command,program", [
    ("torchrun train.py --lr 1e-3", ["train.py", "--lr", "1e-3"]),
    ("torchrun --max_restarts=2 train.py", ["--max_restarts=2", "train.py"]),
    ("python train.py", ["train.py"]),
    ("python3 -m mypkg.train --x 'a b'", ["-m", "mypkg.train", "--x", "a b"]),
    ("bash run.sh", ["--no_python", "bash", "run.sh"]),
])
def test_train_program(command, program):
    from envbuilder.render.jobs import train_program

    assert train_program(command) == program


def test_slurm_keys_and_cpus_per_task(tailored):
    for kind, lead in [(k, lead) for k in ("apptainer", "pyxis", "host") for lead in ("", "train-")]:
        text = tailored[f"jobs/{lead}slurm-{kind}-4x8.sbatch"]
        sb = re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, re.M)
        d = dict(sb)
        # slurm.time is the training files' --time; the smoke files keep their own 30 minutes
        assert (d["partition"], d["account"], d["qos"], d["time"], d["constraint"]) == (
            "gpu", "ml", "normal", "02:00:00" if lead else "00:30:00", "h100&ib")
        assert [k for k, _ in sb].count("time") == 1
        # srun repeats --cpus-per-task (Slurm 22.05-23.02 do not pass sbatch's on)
        assert re.search(r'^srun .*--cpus-per-task="\$cpus_per_task"', text, re.M)
        assert 'cpus_per_task="${SLURM_CPUS_PER_TASK:-32}"' in text
        assert "export NCCL_IB_HCA=mlx5" in text
    assert "machine registry.example.com:5000 login USER password TOKEN" in \
        tailored["jobs/slurm-pyxis-4x8.sbatch"]
    host = tailored["jobs/slurm-host-4x8.sbatch"]
    assert "apptainer" not in host and "--container-image" not in host
    assert '--out "$out"' in host


def test_horovod_target_gets_a_horovodrun_launcher(tmp_path):
    plan = make_plan(resolve_target("cu118-hvd", pins=NO_FABRIC))
    fs = render_jobs(plan, image="envbuilder:x")
    text = fs["jobs/horovodrun-2x6.sh"]
    assert 'horovodrun --gloo -np "$np" -H "$slots"' in text and "np=12" in text and '"$@"' in text
    assert "Horovod" in fs["jobs/README.md"] and "horovodrun-2x6.sh" in fs["jobs/README.md"]
    fs = render_jobs(plan, image="envbuilder:x", jobs=JobsConfig(command="python train.py --e 1"))
    text = fs["jobs/horovodrun-2x6.sh"]
    assert "python train.py --e 1" in text and '"$@"' not in text
    assert "jobs/horovodrun-2x6.sh" not in render_jobs(make_plan(resolve_target("cu121")),
                                                       image="envbuilder:x")
    if shutil.which("shellcheck"):
        p = tmp_path / "h.sh"
        p.write_text(text)
        r = subprocess.run(["shellcheck", "--shell=sh", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


def test_pull_by_tag_says_so():
    plan = make_plan(resolve_target("cu121", pins=NO_FABRIC))
    fs = render_jobs(plan, image="registry.example.com/ml:cu121")
    (js,) = docs(fs["jobs/jobset-2x6.yaml"])
    c = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert c["imagePullPolicy"] == "Always"  # a moving tag: no node keeps a stale copy
    assert "by tag (no digest known yet)" in fs["jobs/trainjob-2x6.yaml"]
    assert "build --push" in fs["jobs/README.md"]
    assert __import__("json").loads(fs["jobs/layouts.json"])["pinned"] is False


# -- the project's [jobs] table, through the CLI ----------------------------------------------

PROJECT_4X8 = """\
layouts = ["4x8"]
registry = "registry.example.com/ml"
repository = "train"

[jobs]
command = "torchrun train.py --config configs/a.yaml"
queue = "team-a"
priority_class = "high"
node_selector = { "nvidia.com/gpu.product" = "NVIDIA-H100-80GB-HBM3" }
tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
image_pull_secrets = ["regcred"]
resources = { "rdma/ib" = 1 }
env = { NCCL_IB_HCA = "mlx5" }
slurm = { partition = "gpu", account = "ml", qos = "normal", time = "02:00:00" }

[[targets]]
name = "train-a"
target = "cu124"

[[targets]]
name = "train-b"
target = "cu124"
requirements = ["einops"]
jobs = { queue = "team-b", kubernetes = ["trainjob", "legacy"], slurm = { partition = "big" } }
"""


@pytest.fixture(scope="module")
def project_4x8(tmp_path_factory):
    root = tmp_path_factory.mktemp("proj")
    (root / "envbuilder.toml").write_text(PROJECT_4X8)
    p = cli("render", "-q", cwd=root)
    assert p.returncode == 0, p.stderr
    return root


def _yaml(path: Path) -> dict:
    (doc,) = docs(path.read_text())
    return doc


def test_two_targets_of_one_cuda_line_get_their_own_names_and_tags(project_4x8):
    import json

    a, b = (project_4x8 / "build" / n for n in ("train-a", "train-b"))
    ja, jb = _yaml(a / "jobs/trainjob-4x8.yaml"), _yaml(b / "jobs/trainjob-4x8.yaml")
    assert ja["metadata"]["name"] == "smoke-train-a-4x8" and jb["metadata"]["name"] == "smoke-train-b-4x8"
    ta, tb = (json.loads((f / "stack.json").read_text()) for f in (a, b))
    assert ta["tag"] == tb["tag"]  # one stack ...
    assert ta["image_tag"] == f"train-a-{ta['tag']}" and tb["image_tag"] == f"train-b-{tb['tag']}"
    assert ja["spec"]["trainer"]["image"] == f"registry.example.com/ml/train:{ta['image_tag']}"
    assert jb["spec"]["trainer"]["image"] == f"registry.example.com/ml/train:{tb['image_tag']}"
    sa = (a / "jobs/slurm-pyxis-4x8.sbatch").read_text()
    sb = (b / "jobs/slurm-pyxis-4x8.sbatch").read_text()
    assert "#SBATCH --job-name=smoke-train-a-4x8" in sa and "#SBATCH --job-name=smoke-train-b-4x8" in sb
    # bake pushes the tags the job files pull
    p = cli("bake", cwd=project_4x8)
    assert p.returncode == 0, p.stderr
    hcl = (project_4x8 / "build/docker-bake.hcl").read_text()
    assert f'"registry.example.com/ml/train:{ta["image_tag"]}"' in hcl
    assert f'"registry.example.com/ml/train:{tb["image_tag"]}"' in hcl


def test_a_targets_jobs_table_overrides_the_projects_key_by_key(project_4x8):
    a, b = (project_4x8 / "build" / n / "jobs" for n in ("train-a", "train-b"))
    assert _yaml(a / "trainjob-4x8.yaml")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    jb = _yaml(b / "trainjob-4x8.yaml")
    assert jb["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-b"
    assert jb["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"  # the project's
    assert (b / "pytorchjob-4x8.yaml").is_file() and not (b / "jobset-4x8.yaml").exists()
    assert not (a / "pytorchjob-4x8.yaml").exists() and (a / "jobset-4x8.yaml").is_file()
    text = (b / "slurm-apptainer-4x8.sbatch").read_text()
    assert "#SBATCH --partition=big" in text and "#SBATCH --account=ml" in text  # merged
    assert (b / "train-trainjob-4x8.yaml").is_file()  # the project's command


def test_single_host_smoke_of_a_4x8_project_starts_8_ranks(project_4x8):
    run = (project_4x8 / "build/train-a/smoke/run.sh").read_text()
    assert '--nproc_per_node="${NPROC:-8}"' in run and "8 ranks with torchrun on this node" in run
    from envbuilder.api import make_spec, resolve_spec
    from envbuilder.assemble import folder_files
    from envbuilder.core.project import load_project

    spec = make_spec("train-a", project=load_project(project_4x8))
    plan, _ = folder_files(spec, resolve_spec(spec))
    assert plan.host_nproc == 8 and plan.smoke_nproc == 32  # build's smoke job: one node


def test_command_option_wins_over_the_projects(project_4x8, tmp_path):
    out = tmp_path / "o"
    p = cli("render", "train-a", "-o", str(out), "-q", "--command", "python -m team.train --x 1",
            cwd=project_4x8)
    assert p.returncode == 0, p.stderr
    args = _yaml(out / "jobs/train-jobset-4x8.yaml")["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-4:] == ["-m", "team.train", "--x", "1"] and "--nnodes=4" in args


@pytest.mark.parametrize("jobs,needles", [
    ('queue = "Team A"', ("jobs.queue", "Kubernetes name")),
    ('node_selector = { "a b" = "x" }', ("jobs.node_selector.a b", "label key")),
    ('tolerations = [{ key = "k", operator = "Maybe" }]', ("tolerations[0].operator", "Exists")),
    ('tolerations = [{ key = "k", effects = "NoSchedule" }]', ("tolerations[0].effects",)),
    ('resources = { "nvidia.com/gpu" = 2 }', ("jobs.resources.nvidia.com/gpu", "layout")),
    ('resources = { "rdma/ib" = "1; rm -rf /" }', ("jobs.resources.rdma/ib",)),
    ('env = { PET_NNODES = "2" }', ("jobs.env.PET_NNODES", "launcher")),
    ('env = { "A-B" = "x" }', ("jobs.env.A-B",)),
    ('slurm = { time = "two hours" }', ("jobs.slurm.time", "HH:MM:SS")),
    ('slurm = { partition = "gpu\\nx" }', ("jobs.slurm.partition",)),
    ('slurm = { partiton = "gpu" }', ("unknown key", "partiton")),
    ('command = "torchrun --nproc_per_node=8 train.py"', ("jobs.command", "--nproc_per_node")),
    ('command = "torchrun \'train.py"', ("jobs.command", "cannot be split")),
    ('kubernetes = ["pytorchjob"]', ("jobs.kubernetes",)),
    ('image_pull_secrets = ["Reg Cred"]', ("jobs.image_pull_secrets[0]",)),
    ('nodeSelector = { a = "b" }', ("unknown key", "nodeSelector")),
])
def test_bad_jobs_keys_are_refused_naming_the_key(tmp_path, jobs, needles):
    (tmp_path / "envbuilder.toml").write_text(
        f'[jobs]\n{jobs}\n\n[[targets]]\nname = "t"\ntarget = "cpu"\n')
    assert_clean_failure(cli("render", "-q", cwd=tmp_path), 2, *needles)
    assert not (tmp_path / "build").exists()


def test_a_hand_edited_job_file_names_the_key_and_take_jobs_takes_the_new_version(tmp_path):
    (tmp_path / "envbuilder.toml").write_text('[[targets]]\nname = "t"\ntarget = "cpu"\n')
    assert cli("render", "-q", cwd=tmp_path).returncode == 0
    f = tmp_path / "build/t/jobs/jobset-2x6.yaml"
    text = f.read_text()
    edited = text.replace("          spec:\n            restartPolicy: Never\n",
                          "          spec:\n            restartPolicy: Never\n            nodeSelector:\n"
                          "              pool: gpu\n")
    assert edited != text
    f.write_text(edited)
    sb = tmp_path / "build/t/jobs/slurm-pyxis-2x6.sbatch"
    sb.write_text(sb.read_text().replace("#SBATCH --exclusive", "#SBATCH --exclusive\n#SBATCH --qos=high"))
    first = assert_clean_failure(cli("render", "-q", cwd=tmp_path), 2, "jobset-2x6.yaml",
                                 "changed since envbuilder wrote it", "jobs.node_selector",
                                 "--take-jobs")
    assert "never overwrites" in first
    assert f.read_text() == edited  # nothing written
    (tmp_path / "envbuilder.toml").write_text(
        '[jobs]\nnode_selector = { pool = "gpu" }\nslurm = { qos = "high" }\n\n'
        '[[targets]]\nname = "t"\ntarget = "cpu"\n')
    p = cli("render", "-q", "--take-jobs", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (f.parent / "jobset-2x6.yaml.edited").read_text() == edited  # the user's file kept
    new = _yaml(f)
    assert new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "nodeSelector"] == {"pool": "gpu"}
    assert "#SBATCH --qos=high" in sb.read_text() and (sb.parent / "slurm-pyxis-2x6.sbatch.edited").is_file()
    assert cli("render", "-q", cwd=tmp_path).returncode == 0  # and the next render is clean


def test_build_push_pins_the_kept_job_files_to_the_digest(tmp_path):
    """run.build.pin_job_files: the hook build --push --context runs once the digest is known."""
    from envbuilder.api import make_spec, resolve_spec, render
    from envbuilder.run.build import BuildOptions, pin_job_files

    spec = make_spec("cpu", registry="registry.example.com/ml")
    render([spec], tmp_path / "ctx", single=True)
    ref = "registry.example.com/ml@sha256:" + "ab" * 32
    before = (tmp_path / "ctx/Dockerfile").read_text()
    pin_job_files(spec, resolve_spec(spec), BuildOptions(), tmp_path / "ctx", ref)
    for f in (tmp_path / "ctx/jobs").glob("*.yaml"):
        text = f.read_text()
        assert ref in text and "registry.example.com/ml:" not in text, f.name
        assert "imagePullPolicy: Always" not in text
    sb = (tmp_path / "ctx/jobs/slurm-pyxis-2x6.sbatch").read_text()
    assert "registry.example.com#ml@sha256:" in sb
    assert (tmp_path / "ctx/Dockerfile").read_text() == before
    assert '"pinned": true' in (tmp_path / "ctx/jobs/layouts.json").read_text()


# -- ci --github: an installable envbuilder, and a header that says what it builds ------------

@pytest.mark.parametrize("direct_url,own,expected", [
    (None, False, "torch-envbuilder[lock]==0.1.0"),  # from an index: that version exists there
    (None, True, ".[lock]"),  # the workflow goes into envbuilder's own checkout
    ({"url": "https://github.com/acme/envbuilder.git",
      "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}, False,
     "torch-envbuilder[lock] @ git+https://github.com/acme/envbuilder.git@0123abc"),
    ({"url": "https://files.example.com/torch_envbuilder-0.1.0-py3-none-any.whl",
      "archive_info": {}}, False,
     "torch-envbuilder[lock] @ https://files.example.com/torch_envbuilder-0.1.0-py3-none-any.whl"),
])
def test_ci_installs_a_version_that_exists(direct_url, own, expected):
    from envbuilder.render.ci import install_spec

    assert install_spec(direct_url, "0.1.0", repo_is_envbuilder=own) == expected


def test_ci_install_option_and_header(tmp_path):
    from envbuilder.render.ci import install_spec

    from envbuilder.render.ci import local_install

    local = {"url": "file:///work/main", "dir_info": {"editable": True}}
    assert install_spec(local, "0.1.0") == "torch-envbuilder[lock]==0.1.0" and local_install(local)
    assert not local_install(None)
    (tmp_path / "envbuilder.toml").write_text('registry = "ghcr.io/acme"\nrepository = "train"\n\n[[targets]]\n'
                                              'name = "a"\ntarget = "cpu"\n')
    p = cli("ci", "--github", "--install", "torch-envbuilder[lock] @ git+https://github.com/acme/eb@v1",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / ".github/workflows/envbuilder.yml").read_text()
    head = text.split("\nname:", 1)[0]
    assert "the project's targets (a)" in head and "push it to $REGISTRY" in head
    assert "installed from: torch-envbuilder[lock] @ git+https://github.com/acme/eb@v1" in head
    wf = yaml.safe_load(text)
    assert wf["env"]["ENVBUILDER_INSTALL"] == "torch-envbuilder[lock] @ git+https://github.com/acme/eb@v1"
    # --install given: nothing for the user to change, nothing on stderr
    assert "warning" not in p.stderr


def test_ci_from_a_checkout_warns_on_stderr_that_its_version_may_be_unpublished(tmp_path):
    """The suite runs envbuilder from this checkout: the workflow's default install is the
    checkout's version, which CI may not find; ci says so on stderr (one line, also under
    --json, whose stdout stays one document), not only in the workflow's comment."""
    from envbuilder.render.ci import running_from_checkout

    checkout = running_from_checkout()
    assert checkout is not None  # the tests import envbuilder from its source tree
    repo = tmp_path / "team"
    repo.mkdir()
    p = cli("ci", "--github", "--registry", "ghcr.io/acme/train", "--json", cwd=repo)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    warned = [ln for ln in p.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warned) == 1, p.stderr
    assert "torch-envbuilder[lock]==" in warned[0] and str(checkout) in warned[0]
    assert "--install SPEC" in warned[0]
    assert doc["warnings"] == [warned[0].removeprefix("warning: ")]
    assert doc["install"].startswith("torch-envbuilder[lock]==")
    head = (repo / ".github/workflows/envbuilder.yml").read_text().split("\nname:", 1)[0]
    assert "CI cannot install" in head  # and the comment stays
    # written into envbuilder's own repository, the workflow installs the checkout: no warning
    own = tmp_path / "own"
    own.mkdir()
    (own / "pyproject.toml").write_text('[project]\nname = "torch-envbuilder"\n')
    p = cli("ci", "--github", "--registry", "ghcr.io/acme/train", "-o", str(own), cwd=tmp_path)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    assert "ENVBUILDER_INSTALL: .[lock]" in (own / ".github/workflows/envbuilder.yml").read_text()


@pytest.mark.docker
@pytest.mark.registry
def test_build_push_rewrites_the_kept_job_files_by_digest(cpu_build, docker_client, base_image,
                                                         wheelhouse, ca_bundle, registry, tmp_path):
    """envbuilder build --push REPO --context DIR of a project target: its own tag is tagged
    and pushed, and DIR/jobs/ pull REPO@<the pushed digest>."""
    from conftest import CPU_TARGET
    from envbuilder.api import make_spec
    from envbuilder.core.project import load_project
    from envbuilder.run.build import BuildOptions, build_target

    (tmp_path / "envbuilder.toml").write_text(f'[[targets]]\nname = "team"\ntarget = "{CPU_TARGET}"\n')
    repo = f"{registry.address}/ml/jobs"
    ctx = tmp_path / "ctx"
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle, smoke=False, verify=False,
                        push=repo, context=ctx)
    spec = make_spec("team", project=load_project(tmp_path), base_image=base_image)
    r = build_target(spec, opts, client=docker_client)
    from envbuilder.core.naming import project_repository

    # the project's own tag only (<target>-<stack tag>; never the generic stack tag, which another
    # target on the same stack would overwrite), locally under the project's repository
    own = f"team-{r.tag}"
    assert [p["tag"] for p in r.pushed] == [own], r.pushed
    assert f"{project_repository((tmp_path / 'envbuilder.toml').absolute())}:{own}" in r.local_tags
    ref = r.pushed[0]["ref"]
    assert ref == f"{repo}@{r.pushed[0]['digest']}"
    (tj,) = docs((ctx / "jobs/trainjob-2x6.yaml").read_text())
    assert tj["spec"]["trainer"]["image"] == ref and tj["metadata"]["name"] == "smoke-team-2x6"
    assert f"{registry.address}#ml/jobs@sha256:" in (ctx / "jobs/slurm-pyxis-2x6.sbatch").read_text()
    assert f"docker://{ref}" in (ctx / "jobs/slurm-apptainer-2x6.sbatch").read_text()


def test_a_hostile_command_stays_one_argument_list(tmp_path):
    """A command's words reach YAML JSON-quoted and scripts shell-quoted: nothing runs."""
    plan = make_plan(resolve_target("cu121", pins=NO_FABRIC))
    cmd = "python train.py --name '$(id); rm -rf / `x`' \"a\\\"b\""
    fs = render_jobs(plan, image=DIGEST, jobs=JobsConfig(command=cmd))
    (js,) = docs(fs["jobs/train-jobset-2x6.yaml"])
    args = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-4:] == ["train.py", "--name", "$(id); rm -rf / `x`", 'a"b']
    text = fs["jobs/train-slurm-pyxis-2x6.sbatch"]
    assert "train.py --name '$(id); rm -rf / `x`' 'a\"b' || rc=$?" in text
    if shutil.which("shellcheck"):
        p = tmp_path / "t.sbatch"
        p.write_text(text)
        r = subprocess.run(["shellcheck", "--shell=bash", "--severity=warning", str(p)],
                           capture_output=True, text=True)  # SC2016 (info) says: literal
        assert r.returncode == 0, r.stdout
    for bad in ("train.py\nrm -rf /", "x" * 5000, "   "):
        with pytest.raises(InputError, match="--command"):
            JobsConfig().with_command(bad)


def test_the_user_guides_jobs_example_is_a_working_project(tmp_path):
    """docs/user-guide.md's [jobs] example, as written, renders."""
    guide = (Path(__file__).parent.parent / "docs/user-guide.md").read_text()
    section = guide.split("## Jobs", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "envbuilder.toml").write_text(block)
    p = cli("render", "-q", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    jobs = tmp_path / "build/train/jobs"
    (tj,) = docs((jobs / "trainjob-1x12.yaml").read_text())
    assert tj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-b"
    assert "#SBATCH --partition=big" in (jobs / "slurm-pyxis-2x6.sbatch").read_text()
    assert (jobs / "train-jobset-2x6.yaml").is_file() and (jobs / "kueue-localqueue.yaml").is_file()
