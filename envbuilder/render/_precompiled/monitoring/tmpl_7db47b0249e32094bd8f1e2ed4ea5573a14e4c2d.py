from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'monitoring/README.md.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_target = resolve('target')
    l_0_version = resolve('version')
    l_0_floor = resolve('floor')
    l_0_dcgm_pod_port = resolve('dcgm_pod_port')
    l_0_dcgm_port = resolve('dcgm_port')
    l_0_metrics = resolve('metrics')
    l_0_dcgm_source = resolve('dcgm_source')
    l_0_job = resolve('job')
    l_0_jobs = resolve('jobs')
    try:
        t_1 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    try:
        t_2 = environment.tests['none']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No test named 'none' found.")
    pass
    yield '# Monitoring the smoke job of '
    yield str((undefined(name='target') if l_0_target is missing else l_0_target))
    yield '\n\nRendered by envbuilder '
    yield str((undefined(name='version') if l_0_version is missing else l_0_version))
    yield ". The smoke job's results become Prometheus metrics on the\nhost that ran or collected the job (`envbuilder smoke ... --metrics-file F.prom` for\nnode-exporter's textfile collector, `--pushgateway URL` for a Pushgateway); the image itself\ncarries no metrics library. Every series has the labels `target`, `image`, `image_digest`,\n`node`, `layout` and `backend`.\n\n| file | what |\n| --- | --- |\n| `dashboard.json` | Grafana dashboard (import it; pick the Prometheus data source): smoke results beside DCGM GPU panels |\n| `alerts.yml` | Prometheus alert rules: smoke failed"
    if (not t_2((undefined(name='floor') if l_0_floor is missing else l_0_floor))):
        pass
        yield ', busbw under '
        yield str((undefined(name='floor') if l_0_floor is missing else l_0_floor))
        yield ' GB/s'
    yield ", no run for 2 days, GPU XID errors |\n| `prometheusrule.yaml` | the same rules as a Prometheus Operator `PrometheusRule` |\n| `prometheus.yml` | a plain Prometheus configuration: node-exporter, Pushgateway (`honor_labels`), DCGM exporter |\n| `podmonitor-dcgm-exporter.yaml` | Prometheus Operator: scrape gpu-operator's DCGM exporter pods (container port `"
    yield str((undefined(name='dcgm_pod_port') if l_0_dcgm_pod_port is missing else l_0_dcgm_pod_port))
    yield '`, '
    yield str((undefined(name='dcgm_port') if l_0_dcgm_port is missing else l_0_dcgm_port))
    yield ') |\n| `servicemonitor-pushgateway.yaml` | Prometheus Operator: scrape the Pushgateway with `honorLabels` |\n\n## Metrics\n\n| metric | labels beyond the common ones |\n| --- | --- |\n'
    for (l_1_name, (l_1_help, l_1_extra)) in context.call(environment.getattr((undefined(name='metrics') if l_0_metrics is missing else l_0_metrics), 'items')):
        _loop_vars = {}
        pass
        yield '| `'
        yield str(l_1_name)
        yield '` | '
        yield str((t_1(context.eval_ctx, l_1_extra, ', ') if l_1_extra else ''))
        yield ' — '
        yield str(l_1_help)
        yield ' |\n'
    l_1_name = l_1_help = l_1_extra = missing
    yield "\nGPU panels and the XID rule use the counters NVIDIA's dcgm-exporter enables by default\n("
    yield str((undefined(name='dcgm_source') if l_0_dcgm_source is missing else l_0_dcgm_source))
    yield ').\n\n## Wiring\n\n- **Slurm**: the `jobs/slurm-*.sbatch` scripts run `envbuilder smoke --records` after `srun`\n  and write `${ENVBUILDER_METRICS_DIR:-/var/lib/prometheus/node-exporter}/'
    yield str((undefined(name='job') if l_0_job is missing else l_0_job))
    yield "-<job>.prom`\n  on the batch host (node-exporter's textfile directory on Debian/Ubuntu); with\n  `ENVBUILDER_PUSHGATEWAY=http://HOST:9091` set they also push. envbuilder must be on the batch\n  host's PATH (`ENVBUILDER` names another command).\n- **Kubernetes**: the smoke pods finish in a minute, so nothing scrapes them. Push their result\n  from the log rank 0 printed:\n  `kubectl logs "
    yield str((environment.getitem((undefined(name='jobs') if l_0_jobs is missing else l_0_jobs), 0) if (undefined(name='jobs') if l_0_jobs is missing else l_0_jobs) else 'JOB'))
    yield '-master-0 | envbuilder smoke --records - --pushgateway http://pushgateway:9091 --label target='
    yield str((undefined(name='target') if l_0_target is missing else l_0_target))
    yield '`.\n  The DCGM exporter (with its Kubernetes mapping on, as gpu-operator runs it) labels GPU series\n  with the smoke pod\'s `pod` and `namespace`; with `DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS=true`\n  it also copies pod labels, so the smoke pods\' `envbuilder.io/tag` and `envbuilder.io/layout`\n  reach the GPU series (flag: https://github.com/NVIDIA/dcgm-exporter/blob/d5e5f510a1b6b393f39a43293ccd9dc985defc79/pkg/cmd/app.go).\n- **Slurm GPUs**: dcgm-exporter\'s `--hpc-job-mapping-dir` adds an `hpc_job` label to the GPUs a\n  job holds when the cluster\'s prolog writes one file per GPU naming its job IDs (dcgm-exporter\'s\n  README, "How to include HPC jobs in metric labels").\n- Check the rules with `promtool check rules alerts.yml`.\n'

blocks = {}
debug_info = '1=33&3=35&12=37&15=43&22=47&23=51&27=59&32=61&38=63'