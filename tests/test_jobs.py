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
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from envbuilder.api import Pins, resolve_target
from envbuilder.errors import InputError
from envbuilder.render.jobs import DEFAULT_LAYOUTS, job_name, render_jobs
from envbuilder.render.plan import make_plan
from hostile_helpers import assert_clean_failure, cli

DATA = Path(__file__).parent / "data"
DIGEST = "registry.example.com:5000/ml/envbuilder@sha256:" + "0123456789abcdef" * 4


# --fabric none: the job files without RDMA settings (the default, ib, adds IPC_LOCK: test_training)
NO_FABRIC = Pins(fabric="none")


@pytest.fixture(scope="module")
def plan():
    return make_plan(resolve_target("cu121", pins=NO_FABRIC))


@pytest.fixture(scope="module")
def files(plan):
    return render_jobs(plan, image=DIGEST)


@pytest.fixture(scope="module")
def by_world(files):
    """The job files of 12 (default layouts), 16 (render --layout 1x16,2x8,4x4) and 8 ranks
    (render --nproc 8: the default layouts of 8)."""
    p16 = make_plan(resolve_target("cu121", pins=NO_FABRIC), smoke_nproc=16)
    p8 = make_plan(resolve_target("cu121", pins=NO_FABRIC), smoke_nproc=8)
    return {12: files, 16: render_jobs(p16, image=DIGEST, layouts=((1, 16), (2, 8), (4, 4))),
            8: render_jobs(p8, image=DIGEST)}


# (world size, nodes, ranks per node) of every rendered layout the per-file checks run on
CASES = [(12, n, p) for n, p in DEFAULT_LAYOUTS] + [(16, 1, 16), (16, 2, 8), (16, 4, 4),
                                                     (8, 1, 8), (8, 2, 4)]


@pytest.fixture(scope="module")
def files_ib_cpu():
    plan = make_plan(resolve_target("cu121"))  # --fabric ib (the default): RDMA in the image
    return render_jobs(plan, image="envbuilder:cu121", gpus=False, infiniband=True,
                       apptainer_image="/shared/images/cu121.sif")


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

def test_file_set(files):
    expected = {"jobs/README.md", "jobs/layouts.json"}
    for n, p in DEFAULT_LAYOUTS:
        for kind in ("pytorchjob", "indexed-job"):
            expected.add(f"jobs/{kind}-{n}x{p}.yaml")
        for kind in ("slurm-apptainer", "slurm-pyxis"):
            expected.add(f"jobs/{kind}-{n}x{p}.sbatch")
    assert set(files) == expected


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
    assert len(paths) == 12
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
        fs = render_jobs(plan, image=f"envbuilder:{target}", gpus=target != "cpu")
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
        assert all(f in by_world[16] for f in e["files"]) and len(e["files"]) == 4
    readme = by_world[16]["jobs/README.md"]
    assert "16-rank" in readme and "kubectl apply -f pytorchjob-2x8.yaml" in readme
    assert "| 2 x 8 | 8, 16-GPU nodes |" in readme
    default = by_world[12]["jobs/README.md"]
    assert "kubectl apply -f pytorchjob-2x6.yaml" in default and "| 2 x 6 | 8, 16-GPU nodes |" in default
    assert f"kubectl get pytorchjob {job_name('cu121', 2, 6)} -w" in default


def _cli_render(tmp_path, *args):
    out = tmp_path / "out"
    return out, cli("render", "cu121", "-o", str(out), *args)


def test_cli_render_2x8_writes_16_rank_job_files(tmp_path):
    import json

    out, p = _cli_render(tmp_path, "--layout", "2x8", "--json")
    assert p.returncode == 0, p.stderr
    jobs = sorted(x.name for x in (out / "jobs").iterdir())
    assert jobs == ["README.md", "indexed-job-2x8.yaml", "layouts.json", "pytorchjob-2x8.yaml",
                    "slurm-apptainer-2x8.sbatch", "slurm-pyxis-2x8.sbatch"]
    (job,) = docs((out / "jobs/pytorchjob-2x8.yaml").read_text())
    reps = job["spec"]["pytorchReplicaSpecs"]
    assert job["spec"]["nprocPerNode"] == "8" and sum(r["replicas"] for r in reps.values()) == 2
    args = reps["Master"]["template"]["spec"]["containers"][0]["args"]
    assert "--nnodes=2" in args and "--nproc_per_node=8" in args
    assert json.loads((out / "stack.json").read_text())["smoke"] == {
        "world_size": 16, "layouts": ["2x8"], "jobs": "jobs/layouts.json"}
    assert 'NPROC:-16' in (out / "smoke/run.sh").read_text()


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
    assert {"pytorchjob-1x12.yaml", "pytorchjob-2x6.yaml", "pytorchjob-3x4.yaml"} <= {
        x.name for x in (out / "jobs").iterdir()}


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
    from envbuilder.api import _smoke_layout

    assert _smoke_layout(layout, nproc, nnodes, False) == expected
