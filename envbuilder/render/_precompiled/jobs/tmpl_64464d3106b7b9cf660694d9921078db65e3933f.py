from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/README.md.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_target = resolve('target')
    l_0_tag = resolve('tag')
    l_0_version = resolve('version')
    l_0_world = resolve('world')
    l_0_smoke = resolve('smoke')
    l_0_image = resolve('image')
    l_0_command = resolve('command')
    l_0_pull_note = resolve('pull_note')
    l_0_columns = resolve('columns')
    l_0_layouts = resolve('layouts')
    l_0_other_example = resolve('other_example')
    l_0_gpus = resolve('gpus')
    l_0_train = resolve('train')
    l_0_smoke_settings = resolve('smoke_settings')
    l_0_example = resolve('example')
    l_0_needs = resolve('needs')
    l_0_kinds = resolve('kinds')
    l_0_runtime_kind = resolve('runtime_kind')
    l_0_runtime_name = resolve('runtime_name')
    l_0_rdzv_port = resolve('rdzv_port')
    l_0_queue = resolve('queue')
    l_0_uid = resolve('uid')
    l_0_shm_size = resolve('shm_size')
    l_0_infiniband = resolve('infiniband')
    l_0_sif = resolve('sif')
    l_0_pyxis_image = resolve('pyxis_image')
    l_0_registry_host = resolve('registry_host')
    l_0_launchers = resolve('launchers')
    try:
        t_1 = environment.filters['lower']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'lower' found.")
    pass
    yield '# Jobs for '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' ('
    yield escape(environment.finalize((undefined(name='tag') if l_0_tag is missing else l_0_tag)))
    yield ')\n\nRendered by envbuilder '
    yield escape(environment.finalize((undefined(name='version') if l_0_version is missing else l_0_version)))
    yield '. Every `*-NxM` file runs the same '
    yield escape(environment.finalize((undefined(name='world') if l_0_world is missing else l_0_world)))
    yield '-rank DDP smoke job\n(`'
    yield escape(environment.finalize((undefined(name='smoke') if l_0_smoke is missing else l_0_smoke)))
    yield '`) from the image `'
    yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
    yield '`, laid out as NNODES x NPROC_PER_NODE'
    if (undefined(name='command') if l_0_command is missing else l_0_command):
        pass
        yield ";\nevery `train-*` file runs the team's command (`[jobs] command`: `"
        yield escape(environment.finalize((undefined(name='command') if l_0_command is missing else l_0_command)))
        yield "`) with the same\nlayout's torchrun and rendezvous settings"
    yield '.\n\nImage: '
    yield escape(environment.finalize((undefined(name='pull_note') if l_0_pull_note is missing else l_0_pull_note)))
    yield '.\n\n| layout | fits |'
    for l_1_k in (undefined(name='columns') if l_0_columns is missing else l_0_columns):
        _loop_vars = {}
        pass
        yield ' '
        yield escape(environment.finalize(environment.getattr(l_1_k, 'title')))
        yield ' |'
    l_1_k = missing
    yield '\n| --- | --- |'
    for l_1_k in (undefined(name='columns') if l_0_columns is missing else l_0_columns):
        _loop_vars = {}
        pass
        yield ' --- |'
    l_1_k = missing
    yield '\n'
    for l_1_l in (undefined(name='layouts') if l_0_layouts is missing else l_0_layouts):
        _loop_vars = {}
        pass
        yield '| '
        yield escape(environment.finalize(environment.getattr(l_1_l, 'nnodes')))
        yield ' x '
        yield escape(environment.finalize(environment.getattr(l_1_l, 'nproc')))
        yield ' | '
        yield escape(environment.finalize(environment.getattr(l_1_l, 'fits')))
        yield ' |'
        for l_2_k in (undefined(name='columns') if l_0_columns is missing else l_0_columns):
            _loop_vars = {}
            pass
            yield ' `'
            yield escape(environment.finalize(environment.getattr(l_2_k, 'stem')))
            yield '-'
            yield escape(environment.finalize(environment.getattr(l_1_l, 'layout')))
            yield escape(environment.finalize(environment.getattr(l_2_k, 'suffix')))
            yield '` |'
        l_2_k = missing
        yield '\n'
    l_1_l = missing
    yield '\nA layout needs NPROC_PER_NODE free GPUs on each of its NNODES nodes, so it fits any node with at\nleast that many (a 2 x 6 job uses six GPUs of each of two 8-GPU nodes). `layouts.json` lists the\nsame files for scripts. Other layouts of '
    yield escape(environment.finalize((undefined(name='world') if l_0_world is missing else l_0_world)))
    yield ' ranks: `envbuilder render TARGET --layout NxM`\n(any N x M = '
    yield escape(environment.finalize((undefined(name='world') if l_0_world is missing else l_0_world)))
    yield '; several at once: `--layout '
    yield escape(environment.finalize((undefined(name='other_example') if l_0_other_example is missing else l_0_other_example)))
    yield "`). Another world size is\nanother smoke job: `envbuilder render TARGET --nproc N` (or `--layout` of N ranks). The job files\nrun even layouts only (each launcher starts the same number of ranks on every node); an uneven\nsplit such as 8,4 runs with `envbuilder smoke IMAGE --layout 8,4`.\n\nRank 0 prints one line `ENVBUILDER_SMOKE_SUMMARY {json}`; a rank exits non-zero when one of its\nchecks failed, so the job's own status is the verdict.\n"
    if (undefined(name='gpus') if l_0_gpus is missing else l_0_gpus):
        pass
        yield 'Each node requests its NPROC_PER_NODE GPUs; the backend is chosen by the job (NCCL with GPUs).'
    else:
        pass
        yield 'The jobs request no GPUs and run the gloo backend.'
    yield '\n'
    if (undefined(name='train') if l_0_train is missing else l_0_train):
        pass
        yield 'The `train-*` files run with the training settings of `[jobs]`, the smoke files keep their own\nshort limits and small footprint (`[jobs] smoke_time` sets their limit):\n\n| | smoke files | `train-*` files |\n| --- | --- | --- |\n| time limit (Kubernetes `activeDeadlineSeconds`, Slurm `--time`) | '
        yield escape(environment.finalize(environment.getattr((undefined(name='smoke_settings') if l_0_smoke_settings is missing else l_0_smoke_settings), 'deadline')))
        yield ' s, `'
        yield escape(environment.finalize(environment.getattr((undefined(name='smoke_settings') if l_0_smoke_settings is missing else l_0_smoke_settings), 'slurm_time')))
        yield '` | '
        if environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'deadline'):
            pass
            yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'deadline')))
            yield ' s'
        else:
            pass
            yield 'none'
        yield ', '
        if environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'slurm_time'):
            pass
            yield '`'
            yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'slurm_time')))
            yield '`'
        else:
            pass
            yield "the partition's"
        yield ' (`[jobs] time`) |\n| CPUs / memory / `/dev/shm` per node ('
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield ') | '
        yield escape(environment.finalize(environment.getattr((undefined(name='smoke_settings') if l_0_smoke_settings is missing else l_0_smoke_settings), 'cpus')))
        yield ' / '
        yield escape(environment.finalize(environment.getattr((undefined(name='smoke_settings') if l_0_smoke_settings is missing else l_0_smoke_settings), 'memory')))
        yield ' / '
        yield escape(environment.finalize(environment.getattr((undefined(name='smoke_settings') if l_0_smoke_settings is missing else l_0_smoke_settings), 'shm')))
        yield ' | '
        yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'cpus')))
        yield ' / '
        yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'memory')))
        yield ' / '
        yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'shm')))
        yield ' (`[jobs] cpu`, `memory`, `shm`) |\n| mounts | the records folder | '
        l_1_loop = missing
        t_2 = 1
        for l_1_m, l_1_loop in LoopContext(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'mounts'), undefined):
            _loop_vars = {}
            pass
            yield '`'
            yield escape(environment.finalize(environment.getattr(l_1_m, 'path')))
            yield '` ('
            yield escape(environment.finalize(environment.getattr(l_1_m, 'source')))
            if (not environment.getattr(l_1_m, 'host_path')):
                pass
                yield '; not on Slurm'
            yield ')'
            if (not environment.getattr(l_1_loop, 'last')):
                pass
                yield ', '
            t_2 = 0
        l_1_loop = l_1_m = missing
        if t_2:
            pass
            yield 'none'
        yield " (`[jobs] mounts`) |\n| working directory | the image's | "
        if environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'workdir'):
            pass
            yield '`'
            yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'workdir')))
            yield '`'
        else:
            pass
            yield "the image's"
        yield ' (`[jobs] workdir`) |\n| restarts | none | '
        yield escape(environment.finalize(environment.getattr((undefined(name='train') if l_0_train is missing else l_0_train), 'max_restarts')))
        yield ' (`[jobs] restart`) |\n\n'
    yield "Job names carry the target's name ("
    yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'name')))
    yield '), so two targets of one CUDA line never\nshare a name. Tailor the files in the project file\'s `[jobs]` table (or a target\'s own `jobs`\ntable), not by hand: envbuilder never overwrites a file you edited, and its refusal names the\n`[jobs]` key that expresses your edit (see docs/user-guide.md, "Jobs").\n\n## Minimum versions\n\nWhat these files need of the cluster (`[jobs] controllers` states yours: a file that needs more\nis refused when it is rendered):\n\n| file | needs | source |\n| --- | --- | --- |\n'
    for (l_1_pattern, l_1_r) in (undefined(name='needs') if l_0_needs is missing else l_0_needs):
        _loop_vars = {}
        pass
        yield '| `'
        yield escape(environment.finalize(l_1_pattern))
        yield '` | '
        yield escape(environment.finalize(context.call(environment.getattr(l_1_r, 'line'), _loop_vars=_loop_vars)))
        yield ' | <'
        yield escape(environment.finalize(environment.getattr(l_1_r, 'source')))
        yield '> |\n'
    l_1_pattern = l_1_r = missing
    yield '\n## Kubernetes\n\n'
    if ('trainjob' in (undefined(name='kinds') if l_0_kinds is missing else l_0_kinds)):
        pass
        yield 'Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1` TrainJob on the '
        yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
        yield '\n`'
        yield escape(environment.finalize((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name)))
        yield '`, `[jobs] runtime`): `'
        yield escape(environment.finalize(t_1((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind))))
        yield '.yaml` is that runtime, rendered\nfrom this target with its trainer container pinned to the image ('
        yield escape(environment.finalize((undefined(name='pull_note') if l_0_pull_note is missing else l_0_pull_note)))
        yield '); a platform\nadmin applies it once and users submit TrainJobs that name it. The runtime makes a JobSet and\ngives torchrun its PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK and PET_MASTER_ADDR/PORT:\n\n    kubectl apply -f '
        yield escape(environment.finalize(t_1((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind))))
        yield '.yaml        # once, by the platform team\n    kubectl apply -f trainjob-'
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield '.yaml\n    kubectl get trainjob '
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'name')))
        yield " -w\n\nThe pod settings that differ per job (security context, `/dev/shm`, node selector,\ntolerations, pull secrets, service account, pod labels and annotations, the training's mounts)\ntravel in the TrainJob's own `runtimePatches` entry (manager `envbuilder.io/envbuilder`). What a\nTrainJob cannot patch (`hostNetwork`, `priorityClassName`, the working directory, `envFrom`, the\nJobSet's failure policy) is in the runtime; with a queue, the priority also goes to Kueue's\n`kueue.x-k8s.io/priority-class` label (a WorkloadPriorityClass).\n\n"
    if ('jobset' in (undefined(name='kinds') if l_0_kinds is missing else l_0_kinds)):
        pass
        yield 'Without the trainer, the JobSet (`jobset.x-k8s.io/v1alpha2`, JobSet controller 0.6+): one Job per\nnode, pod i resolves as `<job>-node-i-0.<job>`, every pod joins a c10d rendezvous on the first\n(port '
        yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
        yield '); `failurePolicy.maxRestarts: 0`:\n\n    kubectl apply -f jobset-'
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield '.yaml\n    kubectl get jobset '
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'name')))
        yield ' -w\n\n'
    if ('indexed-job' in (undefined(name='kinds') if l_0_kinds is missing else l_0_kinds)):
        pass
        yield 'With no operator at all, the indexed Job (Kubernetes 1.24+): it creates a headless Service so pod\n`<job>-<i>` resolves as `<job>-<i>.<job>`, and every pod joins a c10d rendezvous hosted by pod 0\non port '
        yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
        yield ':\n\n    kubectl apply -f indexed-job-'
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield '.yaml\n    kubectl logs -f job/<job>          # pod 0 carries the summary\n    kubectl delete -f indexed-job-'
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield '.yaml\n\n'
    if ('legacy' in (undefined(name='kinds') if l_0_kinds is missing else l_0_kinds)):
        pass
        yield "Legacy: the Kubeflow training operator's `kubeflow.org/v1` PyTorchJob (`[jobs] kubernetes`\nnames `legacy`; the v1 operator is deprecated in favour of Trainer v2):\n\n    kubectl apply -f pytorchjob-"
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield '.yaml\n    kubectl logs <job>-master-0 | grep ENVBUILDER_SMOKE_SUMMARY\n\n'
    if (undefined(name='queue') if l_0_queue is missing else l_0_queue):
        pass
        yield 'Kueue: every job carries `kueue.x-k8s.io/queue-name: '
        yield escape(environment.finalize((undefined(name='queue') if l_0_queue is missing else l_0_queue)))
        yield "`; Kueue admits all of a job's pods\nat once (gang admission: "
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'nnodes')))
        yield ' pods of '
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'nproc')))
        yield ' GPUs never half-schedule).\n'
    yield 'All use `restartPolicy: Never`; the smoke files never retry: a smoke job reports the first\nfailure instead of retrying (a restarted node cannot rejoin a running torchrun group). Pods run as uid '
    yield escape(environment.finalize((undefined(name='uid') if l_0_uid is missing else l_0_uid)))
    yield ', mount a\nmemory-backed `/dev/shm` of '
    yield escape(environment.finalize((undefined(name='shm_size') if l_0_shm_size is missing else l_0_shm_size)))
    yield " (it counts against the pod's memory) and keep the\nimage's ENTRYPOINT.\n"
    if (undefined(name='infiniband') if l_0_infiniband is missing else l_0_infiniband):
        pass
        yield 'InfiniBand: the containers add the `IPC_LOCK` capability. It is effective for root; as uid\n'
        yield escape(environment.finalize((undefined(name='uid') if l_0_uid is missing else l_0_uid)))
        yield ' the node\'s runtime must give an unlimited memlock ulimit (containerd\'s default). Request\nyour cluster\'s RDMA device resource with `[jobs] resources` (e.g. `{ "rdma/ib" = 1 }`).\n'
    yield '\n## Slurm\n\n    sbatch slurm-apptainer-'
    yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
    yield '.sbatch     # ENVBUILDER_SIF=/path/'
    yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
    yield ' to choose the image file\n    sbatch slurm-pyxis-'
    yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
    yield '.sbatch         # ENVBUILDER_IMAGE=... to override the image\n    sbatch slurm-host-'
    yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
    yield '.sbatch          # nodes whose slurmd runs in this image\n\nOne task per node (`--ntasks-per-node=1`, `--exclusive`, and `srun --cpus-per-task` repeated:\nSlurm 22.05 to 23.02 does not pass sbatch\'s on); torchrun starts NPROC_PER_NODE ranks on each and\nmeets the others through a c10d rendezvous on the first host of the allocation\n(`scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`, port '
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield ") with the Slurm job\nid as the rendezvous id and `--max_restarts=0`. Records go to `ENVBUILDER_SMOKE_OUT` (default\n`./envbuilder-smoke-JOBID`), which must be on a filesystem all nodes share. Partition, account,\nQoS and constraint come from `[jobs] slurm`; the `train-*` files' `--time`, `--mem`, `--exclusive`,\nmounts and working directory from `[jobs]` (`time`, `memory`, `exclusive`, `mounts`, `workdir`).\n\nApptainer: build the SIF from this folder's definition first, `apptainer build "
    yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
    yield ' envbuilder.def`\n(or `envbuilder build TARGET --runtime apptainer --sif '
    yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
    yield '`: it builds, verifies and runs the\nsmoke job in it), and smoke-test it on one node: `apptainer exec --nv '
    yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
    yield ' sh /opt/envbuilder/smoke/run.sh`.\nPyxis/enroot take `[REGISTRY#]IMAGE[:TAG]`: the registry host is separated by `#`\n(`'
    yield escape(environment.finalize((undefined(name='pyxis_image') if l_0_pyxis_image is missing else l_0_pyxis_image)))
    yield '`). enroot pulls `IMAGE@sha256:...` from 4.0 on (3.4 and 3.5 parse a tag only):\n'
    if ('@sha256:' in (undefined(name='image') if l_0_image is missing else l_0_image)):
        pass
        yield 'on an older enroot run `slurm-pyxis-tag-NxM.sbatch` where it is written (the tag the digest\nwas pushed under; `envbuilder build --push` writes it), or give `--image REPO:TAG`.'
    else:
        pass
        yield 'these\nfiles pull by tag.'
    yield ' A private\nregistry needs enroot credentials on every node, in `$ENROOT_CONFIG_PATH/.credentials`\n(default `~/.config/enroot/.credentials`), one netrc line per registry:\n`machine '
    yield escape(environment.finalize((undefined(name='registry_host') if l_0_registry_host is missing else l_0_registry_host)))
    yield ' login USER password TOKEN`.\n'
    if ('horovodrun' in (undefined(name='launchers') if l_0_launchers is missing else l_0_launchers)):
        pass
        yield '\n## Horovod\n\n`horovodrun-NxM.sh` launches '
        if (undefined(name='command') if l_0_command is missing else l_0_command):
            pass
            yield "the team's command"
        else:
            pass
            yield 'a training command (its arguments)'
        yield " with Horovod's own\nlauncher over Gloo (`horovodrun --gloo -np N -H host1:M,...`; this image's Horovod is built with\nGloo, without MPI): run it in the image on the first node, `HOSTS=node1,node2 sh horovodrun-"
        yield escape(environment.finalize(environment.getattr((undefined(name='example') if l_0_example is missing else l_0_example), 'layout')))
        yield ".sh`\n(inside a Slurm allocation the hosts come from it). horovodrun starts the other hosts' ranks over\nssh, so the nodes need passwordless ssh between them; one host needs none.\n"

blocks = {}
debug_info = '1=46&3=50&4=54&5=61&8=64&10=66&12=74&14=80&15=84&21=103&22=105&29=109&31=116&37=119&38=140&39=156&40=176&41=185&44=188&56=190&57=194&62=202&63=205&64=207&65=211&69=213&70=215&71=217&81=219&84=222&86=224&87=226&90=228&93=231&95=233&97=235&100=237&104=240&108=242&109=245&110=247&113=252&114=254&116=256&118=259&124=262&125=266&126=268&131=270&137=272&138=274&139=276&141=278&142=280&147=287&148=289&152=292&154=299'