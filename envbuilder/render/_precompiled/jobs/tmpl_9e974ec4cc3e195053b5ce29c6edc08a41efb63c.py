from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/slurm.sbatch.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_what = resolve('what')
    l_0_target = resolve('target')
    l_0_tag = resolve('tag')
    l_0_nnodes = resolve('nnodes')
    l_0_nproc = resolve('nproc')
    l_0_runtime = resolve('runtime')
    l_0_file = resolve('file')
    l_0_sif = resolve('sif')
    l_0_image = resolve('image')
    l_0_entrypoint = resolve('entrypoint')
    l_0_pyxis_image = resolve('pyxis_image')
    l_0_registry_host = resolve('registry_host')
    l_0_pull_note = resolve('pull_note')
    l_0_needs = resolve('needs')
    l_0_is_smoke = resolve('is_smoke')
    l_0_metrics_job = resolve('metrics_job')
    l_0_name = resolve('name')
    l_0_rdzv_port = resolve('rdzv_port')
    l_0_max_restarts = resolve('max_restarts')
    l_0_workdir = resolve('workdir')
    l_0_slurm_mounts = resolve('slurm_mounts')
    l_0_skipped_mounts = resolve('skipped_mounts')
    l_0_gpus = resolve('gpus')
    l_0_slurm_cpus = resolve('slurm_cpus')
    l_0_slurm_memory = resolve('slurm_memory')
    l_0_exclusive_flag = resolve('exclusive_flag')
    l_0_time_limit = resolve('time_limit')
    l_0_slurm_directives = resolve('slurm_directives')
    l_0_env_pairs = resolve('env_pairs')
    l_0_smoke_out = resolve('smoke_out')
    l_0_container_args = resolve('container_args')
    l_0_program_sh = resolve('program_sh')
    try:
        t_1 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    try:
        t_2 = environment.filters['map']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'map' found.")
    try:
        t_3 = environment.filters['sh']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'sh' found.")
    pass
    yield '#!/bin/bash\n# Rendered by envbuilder '
    yield escape(environment.finalize((undefined(name='version') if l_0_version is missing else l_0_version)))
    yield ': '
    yield escape(environment.finalize((undefined(name='what') if l_0_what is missing else l_0_what)))
    yield ' for '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' ('
    yield escape(environment.finalize((undefined(name='tag') if l_0_tag is missing else l_0_tag)))
    yield ')\n# as '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' node(s) x '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield ' process(es) under Slurm, '
    yield escape(environment.finalize(environment.getitem({'apptainer': 'Apptainer', 'pyxis': 'pyxis/enroot', 'host': "in the nodes' own environment"}, (undefined(name='runtime') if l_0_runtime is missing else l_0_runtime))))
    yield '.\n# Submit:  sbatch '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n'
    if ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'apptainer'):
        pass
        yield '# Image:   ENVBUILDER_SIF (default '
        yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
        yield '); make it with\n#          apptainer build '
        yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
        yield ' docker://'
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield '\n'
    elif ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'host'):
        pass
        yield '# Image:   none: the nodes themselves run '
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield ' (slurmd in containers of this image, as\n#          Slinky or a containerised cluster does); torchrun and '
        yield escape(environment.finalize((undefined(name='entrypoint') if l_0_entrypoint is missing else l_0_entrypoint)))
        yield ' are on each node\n'
    else:
        pass
        yield '# Image:   '
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield ' (pyxis form '
        yield escape(environment.finalize((undefined(name='pyxis_image') if l_0_pyxis_image is missing else l_0_pyxis_image)))
        yield '); override with ENVBUILDER_IMAGE\n# Private registry: enroot reads credentials from $ENROOT_CONFIG_PATH/.credentials\n#          (default ~/.config/enroot/.credentials) on every node, one netrc line per registry:\n#          machine '
        yield escape(environment.finalize((undefined(name='registry_host') if l_0_registry_host is missing else l_0_registry_host)))
        yield ' login USER password TOKEN\n'
    yield '# Pinned:  '
    yield escape(environment.finalize((undefined(name='pull_note') if l_0_pull_note is missing else l_0_pull_note)))
    yield '\n'
    for l_1_n in (undefined(name='needs') if l_0_needs is missing else l_0_needs):
        _loop_vars = {}
        pass
        yield '# Needs:   '
        yield escape(environment.finalize(l_1_n))
        yield '\n'
    l_1_n = missing
    if (undefined(name='is_smoke') if l_0_is_smoke is missing else l_0_is_smoke):
        pass
        yield "# Records: ENVBUILDER_SMOKE_OUT (default ./envbuilder-smoke-JOBID, on a filesystem all nodes share)\n# Metrics: after the job, envbuilder (on this batch host's PATH, or ENVBUILDER) turns the records\n#          into ENVBUILDER_METRICS_DIR/"
        yield escape(environment.finalize((undefined(name='metrics_job') if l_0_metrics_job is missing else l_0_metrics_job)))
        yield '-'
        yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
        yield ".prom for node-exporter's textfile\n#          collector (default /var/lib/prometheus/node-exporter) and, when ENVBUILDER_PUSHGATEWAY\n#          is set (http://HOST:9091), pushes them; the job's exit status stays the smoke verdict.\n"
    yield '# One task per node; torchrun starts '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield ' ranks on each and meets the others through a c10d\n'
    if (undefined(name='is_smoke') if l_0_is_smoke is missing else l_0_is_smoke):
        pass
        yield "# rendezvous on the allocation's first host, port "
        yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
        yield '. No restarts: a smoke job fails fast.\n'
    elif (undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts):
        pass
        yield "# rendezvous on the allocation's first host, port "
        yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
        yield '; torchrun restarts the group up to\n# '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield ' times ([jobs] restart).\n'
    else:
        pass
        yield "# rendezvous on the allocation's first host, port "
        yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
        yield '. No restarts ([jobs] restart sets them).\n'
    if (undefined(name='workdir') if l_0_workdir is missing else l_0_workdir):
        pass
        yield '# Working directory: '
        yield escape(environment.finalize((undefined(name='workdir') if l_0_workdir is missing else l_0_workdir)))
        yield ' ([jobs] workdir)'
        if (undefined(name='slurm_mounts') if l_0_slurm_mounts is missing else l_0_slurm_mounts):
            pass
            yield '; mounts: '
            yield escape(environment.finalize(t_1(context.eval_ctx, t_2(context, (undefined(name='slurm_mounts') if l_0_slurm_mounts is missing else l_0_slurm_mounts), attribute='path'), ', ')))
        yield '\n'
    elif (undefined(name='slurm_mounts') if l_0_slurm_mounts is missing else l_0_slurm_mounts):
        pass
        yield '# Mounts: '
        yield escape(environment.finalize(t_1(context.eval_ctx, t_2(context, (undefined(name='slurm_mounts') if l_0_slurm_mounts is missing else l_0_slurm_mounts), attribute='path'), ', ')))
        yield ' ([jobs] mounts)\n'
    for l_1_m in (undefined(name='skipped_mounts') if l_0_skipped_mounts is missing else l_0_skipped_mounts):
        _loop_vars = {}
        pass
        yield '# Not mounted here: '
        yield escape(environment.finalize(environment.getattr(l_1_m, 'path')))
        yield ' ('
        yield escape(environment.finalize(environment.getattr(l_1_m, 'source')))
        yield ' '
        yield escape(environment.finalize(environment.getattr(l_1_m, 'ref')))
        yield '; [jobs] mounts gives it no path on the Slurm nodes: slurm = "/path")\n'
    l_1_m = missing
    yield '#SBATCH --job-name='
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '\n#SBATCH --nodes='
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield '\n#SBATCH --ntasks-per-node=1\n'
    if (undefined(name='gpus') if l_0_gpus is missing else l_0_gpus):
        pass
        yield '#SBATCH --gpus-per-node='
        yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
        yield '\n'
    yield '#SBATCH --cpus-per-task='
    yield escape(environment.finalize((undefined(name='slurm_cpus') if l_0_slurm_cpus is missing else l_0_slurm_cpus)))
    yield '\n'
    if (undefined(name='slurm_memory') if l_0_slurm_memory is missing else l_0_slurm_memory):
        pass
        yield '#SBATCH --mem='
        yield escape(environment.finalize((undefined(name='slurm_memory') if l_0_slurm_memory is missing else l_0_slurm_memory)))
        yield '\n'
    if (undefined(name='exclusive_flag') if l_0_exclusive_flag is missing else l_0_exclusive_flag):
        pass
        yield '#SBATCH '
        yield escape(environment.finalize((undefined(name='exclusive_flag') if l_0_exclusive_flag is missing else l_0_exclusive_flag)))
        yield '\n'
    if (undefined(name='time_limit') if l_0_time_limit is missing else l_0_time_limit):
        pass
        yield '#SBATCH --time='
        yield escape(environment.finalize((undefined(name='time_limit') if l_0_time_limit is missing else l_0_time_limit)))
        yield '\n'
    for (l_1_opt, l_1_v) in (undefined(name='slurm_directives') if l_0_slurm_directives is missing else l_0_slurm_directives):
        _loop_vars = {}
        pass
        yield '#SBATCH --'
        yield escape(environment.finalize(l_1_opt))
        yield '='
        yield escape(environment.finalize(l_1_v))
        yield '\n'
    l_1_opt = l_1_v = missing
    yield '#SBATCH --output='
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-%j.out\nset -euo pipefail\n# srun is given --cpus-per-task again: from Slurm 22.05 to 23.02 it does not read\n# SLURM_CPUS_PER_TASK (sbatch\'s), and torchrun and all its ranks would share one CPU\ncpus_per_task="${SLURM_CPUS_PER_TASK:-'
    yield escape(environment.finalize((undefined(name='slurm_cpus') if l_0_slurm_cpus is missing else l_0_slurm_cpus)))
    yield '}"\n'
    for (l_1_k, l_1_v) in (undefined(name='env_pairs') if l_0_env_pairs is missing else l_0_env_pairs):
        _loop_vars = {}
        pass
        yield 'export '
        yield escape(environment.finalize(l_1_k))
        yield '='
        yield escape(environment.finalize(t_3(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    yield '\nnnodes="${SLURM_NNODES:?submit this script with sbatch}"\nhead_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"\n'
    if (undefined(name='smoke_out') if l_0_smoke_out is missing else l_0_smoke_out):
        pass
        yield 'out="${ENVBUILDER_SMOKE_OUT:-$PWD/envbuilder-smoke-$SLURM_JOB_ID}"\nmkdir -p "$out"\n'
    if ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'apptainer'):
        pass
        yield 'sif="${ENVBUILDER_SIF:-'
        yield escape(environment.finalize((undefined(name='sif') if l_0_sif is missing else l_0_sif)))
        yield '}"\nif [ ! -f "$sif" ]; then\n  echo "envbuilder: $sif not found: apptainer build $sif docker://'
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield '" >&2\n  exit 2\nfi\n'
    elif ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'pyxis'):
        pass
        yield 'image="${ENVBUILDER_IMAGE:-'
        yield escape(environment.finalize((undefined(name='pyxis_image') if l_0_pyxis_image is missing else l_0_pyxis_image)))
        yield '}"\n'
    yield 'echo "envbuilder '
    yield escape(environment.finalize(('smoke' if (undefined(name='is_smoke') if l_0_is_smoke is missing else l_0_is_smoke) else 'job')))
    yield ': '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' on $nnodes node(s) x '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield ', rendezvous $head_node:'
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    if (undefined(name='smoke_out') if l_0_smoke_out is missing else l_0_smoke_out):
        pass
        yield ', records in $out'
    yield '"\n\nrc=0\n'
    if ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'apptainer'):
        pass
        yield 'srun --nodes="$nnodes" --ntasks-per-node=1 --cpus-per-task="$cpus_per_task" --kill-on-bad-exit=1 \\\n  apptainer exec '
        if (undefined(name='gpus') if l_0_gpus is missing else l_0_gpus):
            pass
            yield '--nv '
        for l_1_a in (undefined(name='container_args') if l_0_container_args is missing else l_0_container_args):
            _loop_vars = {}
            pass
            yield escape(environment.finalize(l_1_a))
            yield ' '
        l_1_a = missing
        yield '"$sif" \\\n'
    elif ((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime) == 'pyxis'):
        pass
        yield 'srun --nodes="$nnodes" --ntasks-per-node=1 --cpus-per-task="$cpus_per_task" --kill-on-bad-exit=1 \\\n  --container-image="$image"'
        for l_1_a in (undefined(name='container_args') if l_0_container_args is missing else l_0_container_args):
            _loop_vars = {}
            pass
            yield ' '
            yield escape(environment.finalize(l_1_a))
        l_1_a = missing
        yield ' \\\n'
    else:
        pass
        yield 'srun --nodes="$nnodes" --ntasks-per-node=1 --cpus-per-task="$cpus_per_task" --kill-on-bad-exit=1'
        for l_1_a in (undefined(name='container_args') if l_0_container_args is missing else l_0_container_args):
            _loop_vars = {}
            pass
            yield ' '
            yield escape(environment.finalize(l_1_a))
        l_1_a = missing
        yield ' \\\n'
    yield '  '
    yield escape(environment.finalize(t_3((undefined(name='entrypoint') if l_0_entrypoint is missing else l_0_entrypoint))))
    yield ' \\\n  torchrun --nnodes="$nnodes" --nproc_per_node='
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield ' \\\n  --rdzv_backend=c10d --rdzv_endpoint="$head_node:'
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield '" --rdzv_id="$SLURM_JOB_ID" \\\n  --max_restarts='
    yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
    yield ' \\\n  '
    yield escape(environment.finalize((undefined(name='program_sh') if l_0_program_sh is missing else l_0_program_sh)))
    yield ' || rc=$?\n'
    if (undefined(name='is_smoke') if l_0_is_smoke is missing else l_0_is_smoke):
        pass
        yield '\n# the smoke job\'s records as Prometheus metrics (made here, on the host: the image stays lean)\nenvbuilder="${ENVBUILDER:-envbuilder}"\nmetrics_dir="${ENVBUILDER_METRICS_DIR:-/var/lib/prometheus/node-exporter}"\nif command -v "$envbuilder" >/dev/null 2>&1; then\n  push=()\n  if [ -n "${ENVBUILDER_PUSHGATEWAY:-}" ]; then push=(--pushgateway "$ENVBUILDER_PUSHGATEWAY"); fi\n  "$envbuilder" smoke --records "$out" --metrics-file "$metrics_dir/'
        yield escape(environment.finalize((undefined(name='metrics_job') if l_0_metrics_job is missing else l_0_metrics_job)))
        yield '-'
        yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
        yield '.prom" \\\n    --label target='
        yield escape(environment.finalize(t_3((undefined(name='target') if l_0_target is missing else l_0_target))))
        yield ' --label image="'
        yield escape(environment.finalize(context.call(environment.getattr({'apptainer': '$sif', 'pyxis': '$image'}, 'get'), (undefined(name='runtime') if l_0_runtime is missing else l_0_runtime), (undefined(name='image') if l_0_image is missing else l_0_image))))
        yield '" \\\n    --label node="$head_node" ${push[@]+"${push[@]}"} || true  # it says on stderr what failed\nelse\n  echo "envbuilder: $envbuilder is not on PATH: no metrics written; records stay in $out" >&2\nfi\n'
    yield 'exit "$rc"\n'

blocks = {}
debug_info = '2=63&3=71&4=77&5=79&6=82&7=84&8=88&9=91&10=93&12=98&15=102&17=105&18=107&19=111&21=114&24=117&28=122&29=124&30=127&31=129&32=132&33=134&35=139&37=141&38=144&40=151&41=154&43=156&44=160&46=168&47=170&49=172&50=175&52=178&53=180&54=183&56=185&57=188&59=190&60=193&62=195&63=199&65=205&69=207&70=209&71=213&76=219&80=222&81=225&83=227&86=229&87=232&89=235&92=246&94=249&95=259&97=262&99=272&101=280&102=282&103=284&104=286&105=288&106=290&114=293&115=297'