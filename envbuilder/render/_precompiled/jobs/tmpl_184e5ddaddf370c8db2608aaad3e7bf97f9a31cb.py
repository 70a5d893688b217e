from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/pytorchjob.yaml.j2'

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
    l_0_file = resolve('file')
    l_0_name = resolve('name')
    l_0_pull_note = resolve('pull_note')
    l_0_needs = resolve('needs')
    l_0_is_smoke = resolve('is_smoke')
    l_0_image = resolve('image')
    l_0_max_restarts = resolve('max_restarts')
    l_0_job_labels = resolve('job_labels')
    l_0_layout = resolve('layout')
    l_0_deadline = resolve('deadline')
    l_0_pod = missing
    try:
        t_1 = environment.filters['indent']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'indent' found.")
    try:
        t_2 = environment.filters['q']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'q' found.")
    try:
        t_3 = environment.filters['string']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'string' found.")
    pass
    included_template = environment.get_template('jobs/_pod.yaml.j2', 'jobs/pytorchjob.yaml.j2').make_module(context.get_all(), True, {'pod': l_0_pod})
    l_0_pod = getattr(included_template, 'pod', missing)
    if l_0_pod is missing:
        l_0_pod = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/pytorchjob.yaml.j2') does not export the requested name 'pod'", name='pod')
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
    yield ' process(es), a Kubeflow PyTorchJob (training operator, kubeflow.org/v1):\n# legacy (jobs.kubernetes = ["legacy"]); Kubeflow Trainer v2\'s TrainJob is the current API.\n# Submit:  kubectl apply -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# Watch:   kubectl get pytorchjob '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield ' -w; kubectl logs '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-master-0 | grep ENVBUILDER_SMOKE_SUMMARY\n# Image:   '
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
        yield '# Metrics: kubectl logs '
        yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
        yield '-master-0 | envbuilder smoke --records - --pushgateway http://PUSHGATEWAY:9091 --label target='
        yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
        yield ' --label image='
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield "\n#          (see monitoring/README.md; DCGM's GPU series carry this job's pod names)\n"
    if (undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts):
        pass
        yield '# restartPolicy Never, backoffLimit '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield ' ([jobs] restart): the operator replaces a failed pod.\n'
    else:
        pass
        yield "# restartPolicy Never and backoffLimit 0: a smoke job must fail, not retry. torchrun's static\n# rendezvous cannot readmit a restarted node, so a restart would only hide the first error.\n"
    yield 'apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: '
    yield escape(environment.finalize(t_2((undefined(name='name') if l_0_name is missing else l_0_name))))
    yield '\n  labels:\n'
    for (l_1_k, l_1_v) in context.call(environment.getattr((undefined(name='job_labels') if l_0_job_labels is missing else l_0_job_labels), 'items')):
        _loop_vars = {}
        pass
        yield '    '
        yield escape(environment.finalize(t_2(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_2(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    yield '  annotations:\n    "envbuilder.io/target": '
    yield escape(environment.finalize(t_2((undefined(name='target') if l_0_target is missing else l_0_target))))
    yield '\n    "envbuilder.io/layout": '
    yield escape(environment.finalize(t_2((undefined(name='layout') if l_0_layout is missing else l_0_layout))))
    yield '\nspec:\n  nprocPerNode: '
    yield escape(environment.finalize(t_2(t_3((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))))
    yield '\n  runPolicy:\n    backoffLimit: '
    yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
    yield '\n    # Running: stop pods still running (a hung rank) when the job ends; finished pods and their\n    # logs stay until the TTL\n    cleanPodPolicy: Running\n'
    if (undefined(name='deadline') if l_0_deadline is missing else l_0_deadline):
        pass
        yield '    activeDeadlineSeconds: '
        yield escape(environment.finalize((undefined(name='deadline') if l_0_deadline is missing else l_0_deadline)))
        yield '\n'
    yield '    ttlSecondsAfterFinished: 86400\n  pytorchReplicaSpecs:\n'
    for (l_1_rtype, l_1_replicas) in ([('Master', 1)] + ([('Worker', ((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes) - 1))] if ((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes) > 1) else [])):
        l_1_ptj_args = resolve('ptj_args')
        l_1_master_port = resolve('master_port')
        _loop_vars = {}
        pass
        yield '    '
        yield escape(environment.finalize(l_1_rtype))
        yield ':\n      replicas: '
        yield escape(environment.finalize(l_1_replicas))
        yield '\n      restartPolicy: Never\n      template:\n        '
        yield escape(environment.finalize(t_1(context.call((undefined(name='pod') if l_0_pod is missing else l_0_pod), (undefined(name='ptj_args') if l_1_ptj_args is missing else l_1_ptj_args), [('pytorchjob-port', (undefined(name='master_port') if l_1_master_port is missing else l_1_master_port))], _loop_vars=_loop_vars), 8)))
        yield '\n'
    l_1_rtype = l_1_replicas = l_1_ptj_args = l_1_master_port = missing

blocks = {}
debug_info = '1=46&2=53&3=61&5=65&6=67&7=71&8=73&9=77&11=80&12=83&15=89&16=92&24=98&26=100&27=104&30=110&31=112&33=114&35=116&39=118&40=121&44=124&45=130&46=132&49=134'