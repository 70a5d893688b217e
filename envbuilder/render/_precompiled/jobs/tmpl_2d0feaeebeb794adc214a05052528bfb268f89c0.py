from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/indexed-job.yaml.j2'

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
    l_0_service = resolve('service')
    l_0_rdzv_port = resolve('rdzv_port')
    l_0_file = resolve('file')
    l_0_pull_note = resolve('pull_note')
    l_0_needs = resolve('needs')
    l_0_is_smoke = resolve('is_smoke')
    l_0_image = resolve('image')
    l_0_labels = resolve('labels')
    l_0_job_labels = resolve('job_labels')
    l_0_layout = resolve('layout')
    l_0_max_restarts = resolve('max_restarts')
    l_0_deadline = resolve('deadline')
    l_0_job_args = resolve('job_args')
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
    pass
    included_template = environment.get_template('jobs/_pod.yaml.j2', 'jobs/indexed-job.yaml.j2').make_module(context.get_all(), True, {'pod': l_0_pod})
    l_0_pod = getattr(included_template, 'pod', missing)
    if l_0_pod is missing:
        l_0_pod = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/indexed-job.yaml.j2') does not export the requested name 'pod'", name='pod')
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
    yield ' process(es), an indexed Job (batch/v1, no operator needed).\n# Pod i is '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-i, reachable as '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '-i.'
    yield escape(environment.finalize((undefined(name='service') if l_0_service is missing else l_0_service)))
    yield " through the headless Service below;\n# torchrun's c10d rendezvous runs on pod 0, port "
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield '.\n# Submit:  kubectl apply -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# Watch:   kubectl logs -f job/'
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield '; delete with kubectl delete -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# Image:   '
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
        yield '# Metrics: kubectl logs -l job-name='
        yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
        yield ',batch.kubernetes.io/job-completion-index=0 | envbuilder smoke --records - --pushgateway http://PUSHGATEWAY:9091 --label target='
        yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
        yield ' --label image='
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield "\n#          (pod index 0 holds rank 0's summary; see monitoring/README.md)\n"
    yield 'apiVersion: v1\nkind: Service\nmetadata:\n  name: '
    yield escape(environment.finalize(t_2((undefined(name='service') if l_0_service is missing else l_0_service))))
    yield '\n  labels:\n'
    for (l_1_k, l_1_v) in context.call(environment.getattr((undefined(name='labels') if l_0_labels is missing else l_0_labels), 'items')):
        _loop_vars = {}
        pass
        yield '    '
        yield escape(environment.finalize(t_2(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_2(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    yield 'spec:\n  clusterIP: None\n  # DNS records before readiness: every pod resolves pod 0 while the rendezvous starts\n  publishNotReadyAddresses: true\n  selector:\n    "app.kubernetes.io/instance": '
    yield escape(environment.finalize(t_2((undefined(name='name') if l_0_name is missing else l_0_name))))
    yield '\n  ports:\n  - name: c10d\n    port: '
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield '\n    targetPort: '
    yield escape(environment.finalize((undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port)))
    yield '\n    protocol: TCP\n---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: '
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
    yield '\nspec:\n  completionMode: Indexed\n  completions: '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield '\n  parallelism: '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield '\n'
    if (undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts):
        pass
        yield '  # a failed pod is replaced up to '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield " times ([jobs] restart): torchrun's c10d\n  # rendezvous (--max_restarts="
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield ') takes the new pod into the group\n  backoffLimit: '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield '\n'
    else:
        pass
        yield '  # fail, do not retry: one failed pod fails the job (a restarted pod cannot rejoin the group)\n  backoffLimit: 0\n'
    if (undefined(name='deadline') if l_0_deadline is missing else l_0_deadline):
        pass
        yield '  activeDeadlineSeconds: '
        yield escape(environment.finalize((undefined(name='deadline') if l_0_deadline is missing else l_0_deadline)))
        yield '\n'
    yield '  ttlSecondsAfterFinished: 86400\n  template:\n    '
    yield escape(environment.finalize(t_1(context.call((undefined(name='pod') if l_0_pod is missing else l_0_pod), (undefined(name='job_args') if l_0_job_args is missing else l_0_job_args), [('c10d', (undefined(name='rdzv_port') if l_0_rdzv_port is missing else l_0_rdzv_port))], subdomain=(undefined(name='service') if l_0_service is missing else l_0_service), restart='Never'), 4)))
    yield '\n'

blocks = {}
debug_info = '1=44&2=51&3=59&4=63&5=69&6=71&7=73&8=77&9=79&10=83&12=86&13=89&19=96&21=98&22=102&29=108&32=110&33=112&39=114&41=116&42=120&45=126&46=128&49=130&50=132&51=134&52=137&53=139&54=141&59=146&60=149&64=152'