from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/jobset.yaml.j2'

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
    l_0_name = resolve('name')
    l_0_rdzv_port = resolve('rdzv_port')
    l_0_queue = resolve('queue')
    l_0_file = resolve('file')
    l_0_pull_note = resolve('pull_note')
    l_0_needs = resolve('needs')
    l_0_is_smoke = resolve('is_smoke')
    l_0_image = resolve('image')
    l_0_job_labels = resolve('job_labels')
    l_0_layout = resolve('layout')
    l_0_max_restarts = resolve('max_restarts')
    l_0_fail_on = resolve('fail_on')
    l_0_deadline = resolve('deadline')
    l_0_jobset_args = resolve('jobset_args')
    l_0_pod = missing
    try:
        t_1 = environment.filters['indent']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'indent' found.")
    try:
        t_2 = environment.filters['lower']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'lower' found.")
    try:
        t_3 = environment.filters['q']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'q' found.")
    pass
    included_template = environment.get_template('jobs/_pod.yaml.j2', 'jobs/jobset.yaml.j2').make_module(context.get_all(), True, {'pod': l_0_pod})
    l_0_pod = getattr(included_template, 'pod', missing)
    if l_0_pod is missing:
        l_0_pod = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/jobset.yaml.j2') does not export the requested name 'pod'", name='pod')
    context.vars['pod'] = l_0_pod
    context.exported_vars.discard('pod')
    yield '# Rendered by envbuilder '
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
    yield ' process(es), a JobSet (jobset.x-k8s.io/v1alpha2) for clusters\n# without the Kubeflow trainer: one replicated Job of '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' single-pod Jobs; pod i is\n# '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-node-i-0.'
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield " (enableDNSHostnames), and torchrun's c10d rendezvous runs on the\n# first, port "
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield '.\n'
    if (undefined(name='queue') if l_0_queue is missing else l_0_queue):
        pass
        yield '# Queued by Kueue: the LocalQueue '
        yield escape(environment.finalize(t_3((undefined(name='queue') if l_0_queue is missing else l_0_queue))))
        yield ' admits all '
        yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
        yield ' pods at once (gang admission).\n'
    yield '# Submit:  kubectl apply -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# Watch:   kubectl get jobset '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield ' -w; kubectl logs '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-node-0-0-<suffix> (pod 0 carries the summary)\n# Image:   '
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
        yield '# Metrics: kubectl logs -l jobset.sigs.k8s.io/jobset-name='
        yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
        yield ',jobset.sigs.k8s.io/job-index=0 | envbuilder smoke --records - --pushgateway http://PUSHGATEWAY:9091 --label target='
        yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
        yield ' --label image='
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield '\n'
    yield 'apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: '
    yield escape(environment.finalize(t_3((undefined(name='name') if l_0_name is missing else l_0_name))))
    yield '\n  labels:\n'
    for (l_1_k, l_1_v) in context.call(environment.getattr((undefined(name='job_labels') if l_0_job_labels is missing else l_0_job_labels), 'items')):
        _loop_vars = {}
        pass
        yield '    '
        yield escape(environment.finalize(t_3(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_3(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    yield '  annotations:\n    "envbuilder.io/target": '
    yield escape(environment.finalize(t_3((undefined(name='target') if l_0_target is missing else l_0_target))))
    yield '\n    "envbuilder.io/layout": '
    yield escape(environment.finalize(t_3((undefined(name='layout') if l_0_layout is missing else l_0_layout))))
    yield '\nspec:\n  network:\n    enableDNSHostnames: true\n    publishNotReadyAddresses: true\n'
    if (undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts):
        pass
        yield '  # [jobs] restart: a failed Job restarts the whole set (every pod anew, one fresh torchrun\n  # group), up to '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield ' times'
        if (undefined(name='fail_on') if l_0_fail_on is missing else l_0_fail_on):
            pass
            yield '; these Job failures fail it at once'
        yield '\n  failurePolicy:\n    maxRestarts: '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield '\n'
        if (undefined(name='fail_on') if l_0_fail_on is missing else l_0_fail_on):
            pass
            yield '    rules:\n'
            for l_1_reason in (undefined(name='fail_on') if l_0_fail_on is missing else l_0_fail_on):
                _loop_vars = {}
                pass
                yield '    - name: '
                yield escape(environment.finalize(t_3(markup_join(('fail-on-', t_2(l_1_reason), )))))
                yield '\n      action: FailJobSet\n      onJobFailureReasons:\n      - '
                yield escape(environment.finalize(t_3(l_1_reason)))
                yield '\n'
            l_1_reason = missing
    else:
        pass
        yield '  # fail, do not retry: a restarted node cannot rejoin a running torchrun group\n  failurePolicy:\n    maxRestarts: 0\n'
    yield '  ttlSecondsAfterFinished: 86400\n  replicatedJobs:\n  - name: node\n    replicas: '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield '\n    template:\n      spec:\n        parallelism: 1\n        completions: 1\n        backoffLimit: 0\n'
    if (undefined(name='deadline') if l_0_deadline is missing else l_0_deadline):
        pass
        yield '        activeDeadlineSeconds: '
        yield escape(environment.finalize((undefined(name='deadline') if l_0_deadline is missing else l_0_deadline)))
        yield '\n'
    yield '        template:\n          '
    yield escape(environment.finalize(t_1(context.call((undefined(name='pod') if l_0_pod is missing else l_0_pod), (undefined(name='jobset_args') if l_0_jobset_args is missing else l_0_jobset_args), [('c10d', (undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port))], restart='Never'), 10)))
    yield '\n'

blocks = {}
debug_info = '1=50&2=57&3=65&4=69&5=71&6=75&7=77&8=80&10=85&11=87&12=91&13=93&14=97&16=100&17=103&22=110&24=112&25=116&28=122&29=124&34=126&36=129&39=135&40=137&42=140&43=144&46=146&57=153&63=155&64=158&67=161'