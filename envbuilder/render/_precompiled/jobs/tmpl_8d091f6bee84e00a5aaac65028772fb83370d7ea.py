from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/training-runtime.yaml.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_runtime_kind = resolve('runtime_kind')
    l_0_runtime_name = resolve('runtime_name')
    l_0_target = resolve('target')
    l_0_tag = resolve('tag')
    l_0_pull_note = resolve('pull_note')
    l_0_runtime_namespace = resolve('runtime_namespace')
    l_0_file = resolve('file')
    l_0_needs = resolve('needs')
    l_0_image = resolve('image')
    l_0_max_restarts = resolve('max_restarts')
    l_0_fail_on = resolve('fail_on')
    l_0_priority_class = resolve('priority_class')
    l_0_host_network = resolve('host_network')
    l_0_pull_policy = resolve('pull_policy')
    l_0_workdir = resolve('workdir')
    l_0_env_from = resolve('env_from')
    try:
        t_1 = environment.filters['lower']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'lower' found.")
    try:
        t_2 = environment.filters['q']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'q' found.")
    pass
    yield '# Rendered by envbuilder '
    yield escape(environment.finalize((undefined(name='version') if l_0_version is missing else l_0_version)))
    yield ': the Kubeflow Trainer v2 '
    yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
    yield ' '
    yield escape(environment.finalize(t_2((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name))))
    yield '\n# for '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' ('
    yield escape(environment.finalize((undefined(name='tag') if l_0_tag is missing else l_0_tag)))
    yield '); every trainjob-*.yaml and train-trainjob-*.yaml names it (runtimeRef).\n# Its trainer container is the image the job files run: '
    yield escape(environment.finalize((undefined(name='pull_note') if l_0_pull_note is missing else l_0_pull_note)))
    yield '.\n# A platform admin applies it once'
    if (undefined(name='runtime_namespace') if l_0_runtime_namespace is missing else l_0_runtime_namespace):
        pass
        yield ' in the namespace '
        yield escape(environment.finalize(t_2((undefined(name='runtime_namespace') if l_0_runtime_namespace is missing else l_0_runtime_namespace))))
        yield ' (a TrainingRuntime serves the\n# TrainJobs of its own namespace)'
    yield ':\n#   kubectl apply -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# It carries what a TrainJob cannot patch ([jobs] workdir, env_from_secrets, host_network,\n# priority_class, restart); the TrainJobs set the nodes, ranks, resources and command.\n'
    for l_1_n in (undefined(name='needs') if l_0_needs is missing else l_0_needs):
        _loop_vars = {}
        pass
        yield '# Needs:   '
        yield escape(environment.finalize(l_1_n))
        yield '\n'
    l_1_n = missing
    yield 'apiVersion: trainer.kubeflow.org/v1alpha1\nkind: '
    yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
    yield '\nmetadata:\n  name: '
    yield escape(environment.finalize(t_2((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name))))
    yield '\n'
    if (undefined(name='runtime_namespace') if l_0_runtime_namespace is missing else l_0_runtime_namespace):
        pass
        yield '  namespace: '
        yield escape(environment.finalize(t_2((undefined(name='runtime_namespace') if l_0_runtime_namespace is missing else l_0_runtime_namespace))))
        yield '\n'
    yield '  labels:\n    "trainer.kubeflow.org/framework": "torch"\n    "app.kubernetes.io/part-of": "envbuilder"\n    "envbuilder.io/tag": '
    yield escape(environment.finalize(t_2((undefined(name='tag') if l_0_tag is missing else l_0_tag))))
    yield '\n  annotations:\n    "envbuilder.io/target": '
    yield escape(environment.finalize(t_2((undefined(name='target') if l_0_target is missing else l_0_target))))
    yield '\n    "envbuilder.io/image": '
    yield escape(environment.finalize(t_2((undefined(name='image') if l_0_image is missing else l_0_image))))
    yield '\nspec:\n  mlPolicy:\n    numNodes: 1\n    torch: {}\n  template:\n    spec:\n'
    if (undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts):
        pass
        yield '      # [jobs] restart: a failed node restarts the whole JobSet (a fresh torchrun group), up to '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield ' times\n      failurePolicy:\n        maxRestarts: '
        yield escape(environment.finalize((undefined(name='max_restarts') if l_0_max_restarts is missing else l_0_max_restarts)))
        yield '\n'
        if (undefined(name='fail_on') if l_0_fail_on is missing else l_0_fail_on):
            pass
            yield '        rules:\n'
            for l_1_reason in (undefined(name='fail_on') if l_0_fail_on is missing else l_0_fail_on):
                _loop_vars = {}
                pass
                yield '        - name: '
                yield escape(environment.finalize(t_2(markup_join(('fail-on-', t_1(l_1_reason), )))))
                yield '\n          action: FailJobSet\n          onJobFailureReasons:\n          - '
                yield escape(environment.finalize(t_2(l_1_reason)))
                yield '\n'
            l_1_reason = missing
    else:
        pass
        yield '      # fail, do not retry: a restarted node cannot rejoin a running torchrun group\n      failurePolicy:\n        maxRestarts: 0\n'
    yield '      replicatedJobs:\n      - name: node\n        template:\n          metadata:\n            labels:\n              "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"\n          spec:\n            template:\n              spec:\n'
    if (undefined(name='priority_class') if l_0_priority_class is missing else l_0_priority_class):
        pass
        yield '                priorityClassName: '
        yield escape(environment.finalize(t_2((undefined(name='priority_class') if l_0_priority_class is missing else l_0_priority_class))))
        yield '\n'
    if (undefined(name='host_network') if l_0_host_network is missing else l_0_host_network):
        pass
        yield "                # host networking (jobs.host_network): NCCL/RDMA use the node's interfaces; cluster DNS stays\n                hostNetwork: true\n                dnsPolicy: ClusterFirstWithHostNet\n"
    yield '                containers:\n                - name: node\n                  image: '
    yield escape(environment.finalize(t_2((undefined(name='image') if l_0_image is missing else l_0_image))))
    yield '\n                  imagePullPolicy: '
    yield escape(environment.finalize((undefined(name='pull_policy') if l_0_pull_policy is missing else l_0_pull_policy)))
    yield '\n'
    if (undefined(name='workdir') if l_0_workdir is missing else l_0_workdir):
        pass
        yield '                  workingDir: '
        yield escape(environment.finalize(t_2((undefined(name='workdir') if l_0_workdir is missing else l_0_workdir))))
        yield '\n'
    if (undefined(name='env_from') if l_0_env_from is missing else l_0_env_from):
        pass
        yield '                  envFrom:\n'
        for l_1_s in (undefined(name='env_from') if l_0_env_from is missing else l_0_env_from):
            _loop_vars = {}
            pass
            yield '                  - secretRef:\n                      name: '
            yield escape(environment.finalize(t_2(l_1_s)))
            yield '\n'
        l_1_s = missing

blocks = {}
debug_info = '1=41&2=47&3=51&4=53&6=59&9=61&10=65&13=69&15=71&16=73&17=76&22=79&24=81&25=83&32=85&33=88&35=90&36=92&38=95&39=99&42=101&59=108&60=111&62=113&69=117&70=119&71=121&72=124&74=126&76=129&78=133'