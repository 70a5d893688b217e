"""Issue 41: job files an admin can submit for real training. The smoke files and the
``train-*`` files are two runs with their own settings; the training keys of ``[jobs]`` (time,
cpu, memory, shm, mounts, workdir, secrets, restart...) reach every Kubernetes and Slurm file of
the team's command and never the smoke files; the Trainer v2 runtime is rendered from the
target and the TrainJobs reference it; controller versions are stated per file and checked.

Validated against published schemas (tests/data, each with its source): Kubeflow Trainer
v2.3.0's TrainJob and ClusterTrainingRuntime CRDs, JobSet v0.12.0's, Kueue v0.19.2's LocalQueue,
and the official ``kubernetes`` client models for what those CRD files prune (PodSpec, Volume).
The sbatch files: shellcheck, and (tests/test_slurm.py) a real Slurm 22.05.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hostile_helpers import assert_clean_failure, cli
from test_jobs import _crd, _errors, assert_model, docs

DATA = Path(__file__).parent / "data"
DIGEST = "registry.example.com:5000/ml/train@sha256:" + "0123456789abcdef" * 4

# issue 41's "Done when" project: every key it names, and a few more
DONE_WHEN = """\
registry = "registry.example.com/ml"
repository = "train"
layouts = ["2x6", "3x4"]

[jobs]
command = "torchrun train.py --config configs/a.yaml"
kubernetes = ["trainjob", "jobset", "indexed-job", "legacy"]
queue = "team-a"
cluster_queue = "gpu-cluster"
time = "72:00:00"
cpu = 64
memory = "400Gi"
shm = "64Gi"
mounts = [{ pvc = "team-data", path = "/data", read_only = true, slurm = "/lustre/team-data" },
          { host = "/scratch/team", path = "/scratch" },
          { nfs = "nfs.example.com:/exports/ds", path = "/datasets", read_only = true },
          { configmap = "train-config", path = "/config" }]
workdir = "/workspace"
service_account = "trainer"
pod_labels = { team = "vision" }
pod_annotations = { "k8s.v1.cni.cncf.io/networks" = "ib-net" }
env = { NCCL_DEBUG = "WARN" }
env_from_secrets = ["wandb"]
secret_env = { HF_TOKEN = { secret = "hf", key = "token" } }
restart = { max_restarts = 2, fail_on = ["PodFailurePolicy"] }
topology = { level = "cloud.provider.com/topology-block", slice_level = "cloud.provider.com/topology-rack", slice_size = 1 }
controllers = { trainer = "2.3", jobset = "0.12", kueue = "0.19", enroot = "4.0" }

[[targets]]
name = "train"
target = "cu124"
"""


@pytest.fixture(scope="module")
def done_when(tmp_path_factory):
    root = tmp_path_factory.mktemp("done-when")
    (root / "envbuilder.toml").write_text(DONE_WHEN)
    p = cli("render", "-q", cwd=root)
    assert p.returncode == 0, p.stderr
    return root / "build" / "train" / "jobs"


@pytest.fixture(scope="module")
def crds():
    return {"trainjob": _crd("trainjob-crd-v1alpha1.yaml", "v2.3.0"),
            "runtime": _crd("clustertrainingruntime-crd-v1alpha1.yaml", "v2.3.0"),
            "jobset": _crd("jobset-crd-v1alpha2.yaml", "v0.12.0"),
            "localqueue": _crd("kueue-localqueue-crd-v1beta2.yaml", "v0.19.2")}


def _one(path: Path) -> dict:
    (doc,) = docs(path.read_text())
    return doc


def _pod_templates(doc: dict) -> list[dict]:
    """Every PodTemplateSpec of a Kubernetes job file."""
    kind = doc["kind"]
    if kind == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in doc["spec"]["replicatedJobs"]]
    if kind == "Job":
        return [doc["spec"]["template"]]
    if kind == "PyTorchJob":
        return [r["template"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
    return []


def _deadline(doc: dict) -> int | None:
    spec = doc["spec"]
    if doc["kind"] == "JobSet":
        (rj,) = spec["replicatedJobs"]
        return rj["template"]["spec"].get("activeDeadlineSeconds")
    if doc["kind"] == "PyTorchJob":
        return spec["runPolicy"].get("activeDeadlineSeconds")
    return spec.get("activeDeadlineSeconds")


def test_every_train_kubernetes_file_has_the_72_hour_limit_resources_mounts_and_workdir(done_when, crds):
    files = sorted(done_when.glob("train-*.yaml"))
    assert len(files) == 8  # 4 kinds x 2 layouts
    for f in files:
        doc = [d for d in docs(f.read_text()) if d["kind"] != "Service"][0]
        assert _deadline(doc) == 72 * 3600, f.name
        if doc["kind"] == "TrainJob":
            assert not _errors(crds["trainjob"], doc), f.name
            tr = doc["spec"]["trainer"]
            assert tr["resourcesPerNode"]["requests"]["cpu"] == "64"
            assert tr["resourcesPerNode"]["requests"]["memory"] == "400Gi"
            assert tr["resourcesPerNode"]["limits"]["memory"] == "400Gi"
            assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in tr["env"]
            (patch,) = doc["spec"]["runtimePatches"]
            (rj,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            tpl = rj["template"]["spec"]["template"]
            pod = tpl["spec"]
            for v in pod["volumes"]:
                assert_model(v, "V1Volume")
            mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
            _check_mounts(pod["volumes"], mounts, shm="64Gi")
            assert pod["serviceAccountName"] == "trainer"
            assert tpl["metadata"]["labels"]["team"] == "vision"
            _check_annotations(tpl["metadata"]["annotations"])
            # the workdir and envFrom a TrainJob cannot patch are the runtime's it references
            assert doc["spec"]["runtimeRef"]["name"] == "envbuilder-train"
            continue
        if doc["kind"] == "JobSet":
            assert not _errors(crds["jobset"], doc), f.name
            assert doc["spec"]["failurePolicy"] == {"maxRestarts": 2, "rules": [
                {"name": "fail-on-podfailurepolicy", "action": "FailJobSet",
                 "onJobFailureReasons": ["PodFailurePolicy"]}]}
        for tpl in _pod_templates(doc):
            assert_model(tpl, "V1PodTemplateSpec")
            (c,) = tpl["spec"]["containers"]
            assert c["workingDir"] == "/workspace"
            assert c["resources"]["requests"] == {"cpu": "64", "memory": "400Gi"}
            assert c["resources"]["limits"]["memory"] == "400Gi"
            assert c["envFrom"] == [{"secretRef": {"name": "wandb"}}]
            assert {"name": "NCCL_DEBUG", "value": "WARN"} in c["env"]
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            _check_mounts(tpl["spec"]["volumes"], mounts, shm="64Gi")
            assert tpl["spec"]["serviceAccountName"] == "trainer"
            _check_annotations(tpl["metadata"]["annotations"])
            args = c["args"]
            assert "--max_restarts=2" in args and args[-3:] == ["train.py", "--config", "configs/a.yaml"]


def _check_mounts(volumes: list[dict], mounts: dict, *, shm: str) -> None:
    vols = {v["name"]: v for v in volumes}
    assert set(mounts) == {"/dev/shm", "/data", "/scratch", "/datasets", "/config"}  # no smoke-out
    assert vols[mounts["/dev/shm"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
    assert vols[mounts["/data"]["name"]]["persistentVolumeClaim"] == {"claimName": "team-data",
                                                                       "readOnly": True}
    assert mounts["/data"]["readOnly"] is True
    assert vols[mounts["/scratch"]["name"]]["hostPath"] == {"path": "/scratch/team", "type": "Directory"}
    assert vols[mounts["/datasets"]["name"]]["nfs"] == {"server": "nfs.example.com",
                                                        "path": "/exports/ds", "readOnly": True}
    assert vols[mounts["/config"]["name"]]["configMap"] == {"name": "train-config"}


def _check_annotations(ann: dict) -> None:
    assert ann["k8s.v1.cni.cncf.io/networks"] == "ib-net"
    assert ann["kueue.x-k8s.io/podset-required-topology"] == "cloud.provider.com/topology-block"
    assert ann["kueue.x-k8s.io/podset-slice-required-topology"] == "cloud.provider.com/topology-rack"
    assert ann["kueue.x-k8s.io/podset-slice-size"] == "1"


def test_the_smoke_files_keep_their_own_short_limits_and_small_footprint(done_when, crds):
    for f in sorted(done_when.glob("*.yaml")):
        if f.name.startswith(("train-", "clustertraining", "kueue-")):
            continue
        doc = [d for d in docs(f.read_text()) if d["kind"] != "Service"][0]
        assert _deadline(doc) == 1080, f.name  # four collective timeouts + 10 minutes
        if doc["kind"] == "TrainJob":
            assert not _errors(crds["trainjob"], doc)
            tr = doc["spec"]["trainer"]
            assert tr["resourcesPerNode"]["requests"]["cpu"] in ("24", "16")
            assert "env" not in tr or all("valueFrom" not in e for e in tr["env"])
            continue
        if doc["kind"] == "JobSet":
            assert not _errors(crds["jobset"], doc)
            assert doc["spec"]["failurePolicy"] == {"maxRestarts": 0}
        for tpl in _pod_templates(doc):
            (c,) = tpl["spec"]["containers"]
            assert "workingDir" not in c and "envFrom" not in c
            assert {m["mountPath"] for m in c["volumeMounts"]} == {"/dev/shm", "/tmp/envbuilder-smoke"}
            assert quantity(c["resources"]["requests"]["memory"]) < quantity("400Gi")
            assert "--max_restarts=0" in c["args"]
            # the pods still carry the cluster's network and placement: the smoke job tests them
            _check_annotations(tpl["metadata"]["annotations"])
    for f in sorted(done_when.glob("slurm-*.sbatch")):
        text = f.read_text()
        assert "#SBATCH --time=00:30:00" in text and "--mem=" not in text
        assert "--container-workdir" not in text and "--pwd" not in text and "/scratch" not in text


def quantity(q: str) -> int:
    from envbuilder.core.jobs import quantity_bytes

    return quantity_bytes(q)


def test_the_pyxis_and_apptainer_files_mount_and_change_to_the_workdir(done_when, tmp_path):
    for lay in ("2x6", "3x4"):
        pyxis = (done_when / f"train-slurm-pyxis-{lay}.sbatch").read_text()
        assert ('--container-mounts="/lustre/team-data:/data:ro,/scratch/team:/scratch" '
                "--container-workdir=/workspace") in pyxis
        app = (done_when / f"train-slurm-apptainer-{lay}.sbatch").read_text()
        assert ('apptainer exec --nv --bind "/lustre/team-data:/data:ro" --bind '
                '"/scratch/team:/scratch" --pwd /workspace "$sif"') in app
        host = (done_when / f"train-slurm-host-{lay}.sbatch").read_text()
        assert "--chdir=/workspace" in host
        for text in (pyxis, app, host):
            sb = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, re.M))
            assert sb["time"] == "72:00:00" and sb["cpus-per-task"] == "64"
            assert sb["mem"] == f"{400 * 1024}M" and "exclusive" in sb
            assert "--max_restarts=2" in text
            # the NFS export and the config map have no path on the Slurm nodes: said, not mounted
            assert "# Not mounted here: /datasets (nfs nfs.example.com:/exports/ds" in text
            assert "# Not mounted here: /config (configmap train-config" in text
            assert "envbuilder-smoke" not in text.split("#SBATCH --output", 1)[1]
    if shutil.which("shellcheck"):
        paths = []
        for f in sorted(done_when.glob("*.sbatch")):
            (tmp_path / f.name).write_text(f.read_text())
            paths.append(str(tmp_path / f.name))
        r = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", *paths],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:]


def test_the_runtime_is_rendered_from_the_target_and_the_trainjobs_reference_it(done_when, crds):
    rt = _one(done_when / "clustertrainingruntime.yaml")
    assert not _errors(crds["runtime"], rt)
    assert (rt["apiVersion"], rt["kind"], rt["metadata"]["name"]) == (
        "trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "envbuilder-train")
    (rj,) = rt["spec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node"  # the TrainJobs' runtimePatches name it
    assert rj["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    tpl = rj["template"]["spec"]["template"]
    assert_model(tpl, "V1PodTemplateSpec")  # the CRD file prunes the inlined PodSpec
    (c,) = tpl["spec"]["containers"]
    assert c["name"] == "node" and c["workingDir"] == "/workspace"
    assert c["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    assert rt["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 2
    for f in sorted(done_when.glob("*trainjob-*.yaml")):
        tj = _one(f)
        assert tj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                            "kind": "ClusterTrainingRuntime", "name": "envbuilder-train"}
        assert tj["spec"]["trainer"]["image"] == c["image"]
    lq = _one(done_when / "kueue-localqueue.yaml")
    assert not _errors(crds["localqueue"], lq)


def test_the_runtime_is_pinned_to_the_digest_and_can_be_namespaced(crds):
    from envbuilder.api import Pins, resolve_target
    from envbuilder.core.jobs import parse
    from envbuilder.render.jobs import render_jobs
    from envbuilder.render.plan import make_plan

    plan = make_plan(resolve_target("cu121", pins=Pins(fabric="none")))
    files = render_jobs(plan, image=DIGEST, jobs=parse({"runtime": "team-torch",
                                                        "runtime_namespace": "team-a"}))
    rt = _one_text(files["jobs/trainingruntime.yaml"])
    assert not _errors(crds["runtime"], rt)  # the TrainingRuntime CRD's schema is the same
    assert (rt["kind"], rt["metadata"]["name"], rt["metadata"]["namespace"]) == (
        "TrainingRuntime", "team-torch", "team-a")
    (c,) = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert c["image"] == DIGEST and c["imagePullPolicy"] == "IfNotPresent"
    assert rt["metadata"]["annotations"]["envbuilder.io/image"] == DIGEST
    tj = _one_text(files["jobs/trainjob-2x6.yaml"])
    assert tj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                        "name": "team-torch"}
    assert "jobs/clustertrainingruntime.yaml" not in files
    # without trainjob among the kinds, no runtime
    assert not any("runtime" in k for k in render_jobs(plan, image=DIGEST, jobs=parse(
        {"kubernetes": ["jobset"]})))


def _one_text(text: str) -> dict:
    (doc,) = docs(text)
    return doc


def test_no_training_key_changes_a_smoke_file():
    """The smoke files of a project with every training key are the plain ones, byte for byte
    (apart from what every pod shares: the topology and pod annotations, service account)."""
    from envbuilder.api import Pins, resolve_target
    from envbuilder.core.jobs import parse
    from envbuilder.render.jobs import render_jobs
    from envbuilder.render.plan import make_plan

    plan = make_plan(resolve_target("cu121", pins=Pins(fabric="none")))
    training = {"time": "72:00:00", "cpu": 64, "memory": "400Gi", "shm": "64Gi", "workdir": "/w",
                "mounts": [{"pvc": "d", "path": "/data"}], "exclusive": False,
                "env_from_secrets": ["s"], "secret_env": {"T": {"secret": "s", "key": "k"}},
                "restart": {"max_restarts": 3}, "slurm": {"time": "04:00:00"}}
    plain = render_jobs(plan, image=DIGEST, jobs=parse({"command": "python t.py", "kubernetes": ["jobset", "indexed-job", "legacy"]}))
    tuned = render_jobs(plan, image=DIGEST, jobs=parse({"command": "python t.py", "kubernetes": ["jobset", "indexed-job", "legacy"], **training}))
    smoke = [k for k in plain if not k.startswith("jobs/train-") and k.endswith((".yaml", ".sbatch"))]
    assert len(smoke) == 18
    for k in smoke:
        assert plain[k] == tuned[k], k
    assert all(plain[k] != tuned[k] for k in plain if k.startswith("jobs/train-"))


@pytest.mark.parametrize("jobs,code,needles", [
    ('time = "72 hours"', 2, ("jobs.time", "Slurm's format")),
    ('time = "0"', 2, ("jobs.time", "more than 0")),
    ('smoke_time = "1:00:00; id"', 2, ("jobs.smoke_time",)),
    ('cpu = "64; rm -rf /"', 2, ("jobs.cpu", "CPU quantity")),
    ('cpu = 0', 2, ("jobs.cpu",)),
    ('memory = "lots"', 2, ("jobs.memory", "400Gi")),
    ('memory = "8Gi"\nshm = "16Gi"', 2, ("jobs.shm", "less than memory")),
    ('exclusive = "yes"', 2, ("jobs.exclusive", "user")),
    ('workdir = "relative/dir"', 2, ("jobs.workdir", "absolute path")),
    ('workdir = "/a/../etc"', 2, ("jobs.workdir", "'..'")),
    ('workdir = "/w s"', 2, ("jobs.workdir",)),
    ('mounts = [{ pvc = "d" }]', 2, ("jobs.mounts[0].path", "is needed")),
    ('mounts = [{ pvc = "d", host = "/x", path = "/d" }]', 2, ("jobs.mounts[0]", "one source")),
    ('mounts = [{ pvc = "Bad_Name", path = "/d" }]', 2, ("jobs.mounts[0].pvc", "Kubernetes name")),
    ('mounts = [{ nfs = "server", path = "/d" }]', 2, ("jobs.mounts[0].nfs", "SERVER:/EXPORT")),
    ('mounts = [{ host = "/x", path = "/dev/shm" }]', 2, ("jobs.mounts[0].path", "envbuilder")),
    ('mounts = [{ host = "/x", path = "/d" }, { host = "/y", path = "/d" }]', 2, ("jobs.mounts[1].path",)),
    ('mounts = [{ host = "/x", path = "/d", slurm = "/y" }]', 2, ("jobs.mounts[0].slurm",)),
    ('mounts = [{ pvc = "d", path = "/d", readonly = true }]', 2, ("jobs.mounts.0.readonly", "read_only")),
    ('service_account = "Not A Name"', 2, ("jobs.service_account",)),
    ('pod_labels = { "app.kubernetes.io/instance" = "x" }', 2, ("jobs.pod_labels", "set by envbuilder")),
    ('pod_annotations = { "kueue.x-k8s.io/podset-required-topology" = "x" }', 2, ("topology",)),
    ('pod_annotations = { a = "x\\ny" }', 2, ("jobs.pod_annotations.a", "one-line")),
    ('secret_env = { HF = { secret = "hf" } }', 2, ("jobs.secret_env.HF",)),
    ('secret_env = { PET_X = { secret = "hf", key = "k" } }', 2, ("jobs.secret_env.PET_X",)),
    ('env = { HF = "x" }\nsecret_env = { HF = { secret = "hf", key = "k" } }', 2, ("set it once",)),
    ('restart = { max_restarts = 1000 }', 2, ("jobs.restart.max_restarts",)),
    ('restart = { fail_on = ["OOM"] }', 2, ("jobs.restart.fail_on", "PodFailurePolicy")),
    ('topology = { mode = "required" }', 2, ("jobs.topology.level", "is needed")),
    ('queue = "q"\ntopology = { level = "rack", mode = "maybe" }', 2, ("jobs.topology.mode",)),
    ('queue = "q"\ntopology = { level = "rack", slice_size = 2 }', 2, ("slice_level and slice_size",)),
    ('topology = { level = "rack" }', 2, ("[jobs] topology", "queue")),
    ('queue = "q"\ntopology = { level = "r", slice_level = "h", slice_size = 4 }', 2, ("slice_size 4", "1x12")),
    ('controllers = { slurm = "22.05" }', 2, ("jobs.controllers.slurm",)),
    ('controllers = { kueue = "new" }', 2, ("jobs.controllers.kueue", "version")),
    ('admission = { require = ["backend"] }', 2, ("jobs.admission.require[0]", "FIELD=VALUE")),
    ('admission = { require = ["backend=nccl; x"] }', 2, ("jobs.admission.require[0]",)),
    ('admission = { issuer = "https://token.actions.githubusercontent.com" }', 2, ("go together",)),
    ('runtime_namespace = "Team A"', 2, ("jobs.runtime_namespace",)),
    ('resources = { cpu = 64 }', 2, ("jobs.resources.cpu", "[jobs] cpu")),
    # a file or field the cluster's controllers cannot take: exit 3
    ('controllers = { trainer = "2.1" }', 3, ("trainjob-NxM.yaml", "runtimePatches", "2.2", "trainer 2.1")),
    ('controllers = { jobset = "0.5.2" }', 3, ("jobset-NxM.yaml", "publishNotReadyAddresses", "0.6")),
    ('queue = "q"\ncluster_queue = "cq"\ncontrollers = { kueue = "0.14" }', 3, ("kueue-localqueue.yaml", "v1beta2", "0.15")),
    ('queue = "q"\ntopology = { level = "r" }\ncontrollers = { kueue = "0.13" }', 3, ("topology", "0.14")),
])
def test_bad_training_keys_are_refused_naming_the_key(tmp_path, jobs, code, needles):
    (tmp_path / "envbuilder.toml").write_text(
        f'[jobs]\n{jobs}\n\n[[targets]]\nname = "t"\ntarget = "cpu"\n')
    assert_clean_failure(cli("render", "-q", cwd=tmp_path), code, *needles)
    assert not (tmp_path / "build").exists()


def test_a_targets_training_keys_override_the_projects(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        '[jobs]\ncommand = "python t.py"\ntime = "72:00:00"\nworkdir = "/w"\n\n'
        '[[targets]]\nname = "a"\ntarget = "cpu"\n\n'
        '[[targets]]\nname = "b"\ntarget = "cpu"\njobs = { time = "1-00:00:00", memory = "64Gi" }\n')
    assert cli("render", "-q", cwd=tmp_path).returncode == 0
    a = (tmp_path / "build/a/jobs/train-slurm-pyxis-2x6.sbatch").read_text()
    b = (tmp_path / "build/b/jobs/train-slurm-pyxis-2x6.sbatch").read_text()
    assert "#SBATCH --time=72:00:00" in a and "--mem=" not in a
    assert "#SBATCH --time=1-00:00:00" in b and "#SBATCH --mem=65536M" in b
    assert "--container-workdir=/w" in a and "--container-workdir=/w" in b  # the project's
    js = _one(tmp_path / "build/b/jobs/train-jobset-2x6.yaml")
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] == 86400


def test_enroot_older_than_4_gets_the_tag_pinned_file_beside_the_digest_one():
    from envbuilder.api import Pins, resolve_target
    from envbuilder.core.jobs import parse
    from envbuilder.errors import IncompatibleError
    from envbuilder.render.jobs import render_jobs
    from envbuilder.render.plan import make_plan

    plan = make_plan(resolve_target("cu121", pins=Pins(fabric="none")))
    tag = "registry.example.com:5000/ml/train:cu121-x"
    files = render_jobs(plan, image=DIGEST, tag_image=tag, jobs=parse({"controllers": {"enroot": "3.5"}}))
    for lay in ("1x12", "2x6", "3x4"):
        digest_file = files[f"jobs/slurm-pyxis-{lay}.sbatch"]
        tag_file = files[f"jobs/slurm-pyxis-tag-{lay}.sbatch"]
        assert 'image="${ENVBUILDER_IMAGE:-registry.example.com:5000#ml/train@sha256:' in digest_file
        assert 'image="${ENVBUILDER_IMAGE:-registry.example.com:5000#ml/train:cu121-x}"' in tag_file
        assert "enroot older than 4.0" in tag_file and DIGEST.split("@")[1] in tag_file
    readme = files["jobs/README.md"]
    assert "| `slurm-pyxis-NxM.sbatch` | enroot 4.0+:" in readme
    assert "https://github.com/NVIDIA/enroot/blob/v4.0.0/src/docker.sh" in readme
    # no tag known: an enroot that cannot pull by digest is refused (exit 3), naming the fix
    with pytest.raises(IncompatibleError, match=r"enroot 4\.0\+.*enroot 3\.5.*REPO:TAG"):
        render_jobs(plan, image=DIGEST, jobs=parse({"controllers": {"enroot": "3.5"}}))
    # by tag, nothing to check and no tag file
    plain = render_jobs(plan, image=tag, jobs=parse({"controllers": {"enroot": "3.4"}}))
    assert not any("pyxis-tag" in k for k in plain)


def test_the_readme_states_minimum_versions_and_the_projects_nodes(tmp_path):
    p = cli("init", "--driver", "550.54.15", "--gpus-per-node", "6", "--nodes", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert cli("render", "-q", cwd=tmp_path).returncode == 0
    (readme,) = tmp_path.glob("build/*/jobs/README.md")
    text = readme.read_text()
    assert "| 2 x 6 | the project's 6-GPU nodes (all 6 GPUs each) |" in text
    assert "8, 16-GPU nodes" not in text
    for line in ("| `trainjob-NxM.yaml` | Kubeflow Trainer 2.2+: TrainJob spec.runtimePatches |",
                 "| `jobset-NxM.yaml` | JobSet 0.6+: network.publishNotReadyAddresses |",
                 "| `indexed-job-NxM.yaml` | Kubernetes 1.24+:"):
        assert line in text, line
    assert "enroot pulls `IMAGE@sha256:...` from 4.0 on" in text
    (idx,) = tmp_path.glob("build/*/jobs/layouts.json")
    assert json.loads(idx.read_text())["layouts"][0]["name"] == "smoke-train-2x6"
    assert (readme.parent / "train-2x6.yaml").exists() is False  # names, not files: see below
    # the team's command of a target named "train": no stutter
    (tmp_path / "envbuilder.toml").write_text(
        (tmp_path / "envbuilder.toml").read_text() + '\n[jobs]\ncommand = "python t.py"\n')
    assert cli("render", "-q", cwd=tmp_path).returncode == 0
    sb = (readme.parent / "train-slurm-pyxis-2x6.sbatch").read_text()
    assert "#SBATCH --job-name=train-2x6" in sb and "train-train" not in sb


@pytest.mark.registry
def test_render_image_of_another_stack_is_refused(tmp_path):
    """``render cu124 --image REG/x@DIGEST`` where the registry serves a CPU image: the image's
    labels say another stack (exit 2); the CPU target's own digest renders."""
    import hashlib
    import urllib.request

    from conftest import Registry
    from envbuilder.api import resolve_target
    from envbuilder.labels import write

    (tmp_path / "reg").mkdir()
    reg = Registry(tmp_path / "reg").start()
    try:
        labels = write(resolve_target("cpu"))
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": labels},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        cdig = "sha256:" + hashlib.sha256(config).hexdigest()
        base = f"http://{reg.address}/v2/ml/img"
        r = urllib.request.urlopen(urllib.request.Request(f"{base}/blobs/uploads/", method="POST"))
        loc = r.headers["Location"]
        sep = "&" if "?" in loc else "?"
        urllib.request.urlopen(urllib.request.Request(
            (loc if loc.startswith("http") else f"http://{reg.address}{loc}") + f"{sep}digest={cdig}",
            data=config, method="PUT", headers={"Content-Type": "application/octet-stream"}))
        manifest = json.dumps({"schemaVersion": 2,
                               "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                               "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                          "size": len(config), "digest": cdig},
                               "layers": []}).encode()
        urllib.request.urlopen(urllib.request.Request(
            f"{base}/manifests/cpu", data=manifest, method="PUT",
            headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"}))
        ref = f"{reg.address}/ml/img@sha256:{hashlib.sha256(manifest).hexdigest()}"
        p = cli("render", "cu124", "-o", str(tmp_path / "o"), "--image", ref)
        assert_clean_failure(p, 2, "--image", "io.envbuilder.cuda='cpu'", "12.4")
        assert not (tmp_path / "o").exists()
        ok = cli("render", "cpu", "-o", str(tmp_path / "c"), "--image", ref)
        assert ok.returncode == 0, ok.stderr
        assert f'"image": "{ref}"' in (tmp_path / "c/jobs/layouts.json").read_text()
    finally:
        reg.stop()
    # a registry that does not answer: render works offline, unchecked
    off = cli("render", "cu124", "-o", str(tmp_path / "off"), "--image", ref)
    assert off.returncode == 0, off.stderr


def test_emitted_yaml_of_the_done_when_project_parses_with_kubectl(done_when, tmp_path):
    """kubectl's own parser (go-yaml, through kustomize, offline) reads every file as the
    documents PyYAML reads."""
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed")
    files = sorted(done_when.glob("*.yaml"))
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "kustomization.yaml").write_text("resources:\n" + "".join(f"- {f.name}\n" for f in files))
    p = subprocess.run([exe, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = [d for d in yaml.safe_load_all(p.stdout) if d]
    want = [d for f in files for d in docs(f.read_text())]
    assert len(got) == len(want)
    def key(d: dict) -> str:
        return json.dumps(d, sort_keys=True)

    assert sorted(got, key=key) == sorted(want, key=key)
