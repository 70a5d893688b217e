from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/trainjob.yaml.j2'

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
    l_0_runtime_kind = resolve('runtime_kind')
    l_0_runtime_name = resolve('runtime_name')
    l_0_queue = resolve('queue')
    l_0_file = resolve('file')
    l_0_name = resolve('name')
    l_0_pull_note = resolve('pull_note')
    l_0_needs = resolve('needs')
    l_0_is_smoke = resolve('is_smoke')
    l_0_image = resolve('image')
    l_0_host_network = resolve('host_network')
    l_0_trainjob_labels = resolve('trainjob_labels')
    l_0_layout = resolve('layout')
    l_0_deadline = resolve('deadline')
    l_0_trainjob_args = resolve('trainjob_args')
    l_0_cpus = resolve('cpus')
    l_0_memory = resolve('memory')
    l_0_gpus = resolve('gpus')
    l_0_extra_resources = resolve('extra_resources')
    l_0_env_pairs = resolve('env_pairs')
    l_0_secret_env = resolve('secret_env')
    l_0_pod_labels = resolve('pod_labels')
    l_0_pod_annotations = resolve('pod_annotations')
    l_0_node_selector = resolve('node_selector')
    l_0_tolerations = resolve('tolerations')
    l_0_image_pull_secrets = resolve('image_pull_secrets')
    l_0_service_account = resolve('service_account')
    l_0_uid = resolve('uid')
    l_0_infiniband = resolve('infiniband')
    l_0_pod_tailoring = l_0_volume_mounts = l_0_volumes = missing
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
    try:
        t_4 = environment.filters['string']
    except KeyError:
        @internalcode
        def t_4(*unused):
            raise TemplateRuntimeError("No filter named 'string' found.")
    try:
        t_5 = environment.filters['trim']
    except KeyError:
        @internalcode
        def t_5(*unused):
            raise TemplateRuntimeError("No filter named 'trim' found.")
    pass
    included_template = environment.get_template('jobs/_pod.yaml.j2', 'jobs/trainjob.yaml.j2').make_module(context.get_all(), True, {'pod_tailoring': l_0_pod_tailoring, 'volume_mounts': l_0_volume_mounts, 'volumes': l_0_volumes})
    l_0_pod_tailoring = getattr(included_template, 'pod_tailoring', missing)
    if l_0_pod_tailoring is missing:
        l_0_pod_tailoring = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/trainjob.yaml.j2') does not export the requested name 'pod_tailoring'", name='pod_tailoring')
    l_0_volume_mounts = getattr(included_template, 'volume_mounts', missing)
    if l_0_volume_mounts is missing:
        l_0_volume_mounts = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/trainjob.yaml.j2') does not export the requested name 'volume_mounts'", name='volume_mounts')
    l_0_volumes = getattr(included_template, 'volumes', missing)
    if l_0_volumes is missing:
        l_0_volumes = undefined(f"the template {included_template.__name__!r} (imported on line 1 in 'jobs/trainjob.yaml.j2') does not export the requested name 'volumes'", name='volumes')
    context.vars.update({'pod_tailoring': l_0_pod_tailoring, 'volume_mounts': l_0_volume_mounts, 'volumes': l_0_volumes})
    context.exported_vars.difference_update(('pod_tailoring', 'volume_mounts', 'volumes'))
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
    yield ' process(es), a Kubeflow Trainer v2 TrainJob\n# (trainer.kubeflow.org/v1alpha1) on the '
    yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
    yield ' '
    yield escape(environment.finalize(t_3((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name))))
    yield ' ('
    yield escape(environment.finalize(t_2((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind))))
    yield '.yaml): the runtime\n# makes a JobSet of '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' pods and gives each torchrun PET_NNODES, PET_NPROC_PER_NODE,\n# PET_NODE_RANK and PET_MASTER_ADDR/PORT (a static rendezvous on node 0).\n'
    if (undefined(name='queue') if l_0_queue is missing else l_0_queue):
        pass
        yield '# Queued by Kueue: the LocalQueue '
        yield escape(environment.finalize(t_3((undefined(name='queue') if l_0_queue is missing else l_0_queue))))
        yield ' admits all '
        yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
        yield ' pods at once (gang admission).\n'
    yield '# Submit:  kubectl apply -f '
    yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
    yield '\n# Watch:   kubectl get trainjob '
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield ' -w; kubectl logs -l jobset.sigs.k8s.io/jobset-name='
    yield escape(environment.finalize((undefined(name='name') if l_0_name is missing else l_0_name)))
    yield ',batch.kubernetes.io/job-completion-index=0\n# Image:   '
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
        yield ',batch.kubernetes.io/job-completion-index=0 | envbuilder smoke --records - --pushgateway http://PUSHGATEWAY:9091 --label target='
        yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
        yield ' --label image='
        yield escape(environment.finalize((undefined(name='image') if l_0_image is missing else l_0_image)))
        yield '\n'
    if (undefined(name='host_network') if l_0_host_network is missing else l_0_host_network):
        pass
        yield "# host_network: a TrainJob's runtime patch cannot set hostNetwork: the "
        yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
        yield '\n# '
        yield escape(environment.finalize(t_3((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name))))
        yield ' sets it ('
        yield escape(environment.finalize(t_2((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind))))
        yield '.yaml)\n'
    yield 'apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: '
    yield escape(environment.finalize(t_3((undefined(name='name') if l_0_name is missing else l_0_name))))
    yield '\n  labels:\n'
    for (l_1_k, l_1_v) in context.call(environment.getattr((undefined(name='trainjob_labels') if l_0_trainjob_labels is missing else l_0_trainjob_labels), 'items')):
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
    yield '\nspec:\n  runtimeRef:\n    apiGroup: trainer.kubeflow.org\n    kind: '
    yield escape(environment.finalize((undefined(name='runtime_kind') if l_0_runtime_kind is missing else l_0_runtime_kind)))
    yield '\n    name: '
    yield escape(environment.finalize(t_3((undefined(name='runtime_name') if l_0_runtime_name is missing else l_0_runtime_name))))
    yield '\n'
    if (undefined(name='deadline') if l_0_deadline is missing else l_0_deadline):
        pass
        yield '  activeDeadlineSeconds: '
        yield escape(environment.finalize((undefined(name='deadline') if l_0_deadline is missing else l_0_deadline)))
        yield '\n'
    yield '  trainer:\n    image: '
    yield escape(environment.finalize(t_3((undefined(name='image') if l_0_image is missing else l_0_image))))
    yield "\n    # the image's entrypoint (NCCL/Gloo interface defaults) runs first: command replaces ENTRYPOINT\n    command:\n"
    for l_1_a in (undefined(name='trainjob_args') if l_0_trainjob_args is missing else l_0_trainjob_args):
        _loop_vars = {}
        pass
        yield '    - '
        yield escape(environment.finalize(t_3(l_1_a)))
        yield '\n'
    l_1_a = missing
    yield '    numNodes: '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield '\n    numProcPerNode: '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield '\n    resourcesPerNode:\n      requests:\n        cpu: '
    yield escape(environment.finalize(t_3(t_4((undefined(name='cpus') if l_0_cpus is missing else l_0_cpus)))))
    yield '\n        memory: '
    yield escape(environment.finalize(t_3((undefined(name='memory') if l_0_memory is missing else l_0_memory))))
    yield '\n'
    if (undefined(name='gpus') if l_0_gpus is missing else l_0_gpus):
        pass
        yield '        nvidia.com/gpu: '
        yield escape(environment.finalize(t_3(t_4((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))))
        yield '\n'
    for (l_1_k, l_1_v) in (undefined(name='extra_resources') if l_0_extra_resources is missing else l_0_extra_resources):
        _loop_vars = {}
        pass
        yield '        '
        yield escape(environment.finalize(t_3(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_3(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    yield '      limits:\n        memory: '
    yield escape(environment.finalize(t_3((undefined(name='memory') if l_0_memory is missing else l_0_memory))))
    yield '\n'
    if (undefined(name='gpus') if l_0_gpus is missing else l_0_gpus):
        pass
        yield '        nvidia.com/gpu: '
        yield escape(environment.finalize(t_3(t_4((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))))
        yield '\n'
    for (l_1_k, l_1_v) in (undefined(name='extra_resources') if l_0_extra_resources is missing else l_0_extra_resources):
        _loop_vars = {}
        pass
        yield '        '
        yield escape(environment.finalize(t_3(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_3(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    if ((undefined(name='env_pairs') if l_0_env_pairs is missing else l_0_env_pairs) or (undefined(name='secret_env') if l_0_secret_env is missing else l_0_secret_env)):
        pass
        yield '    env:\n'
        for (l_1_k, l_1_v) in (undefined(name='env_pairs') if l_0_env_pairs is missing else l_0_env_pairs):
            _loop_vars = {}
            pass
            yield '    - name: '
            yield escape(environment.finalize(t_3(l_1_k)))
            yield '\n      value: '
            yield escape(environment.finalize(t_3(l_1_v)))
            yield '\n'
        l_1_k = l_1_v = missing
        for (l_1_k, l_1_ref) in (undefined(name='secret_env') if l_0_secret_env is missing else l_0_secret_env):
            _loop_vars = {}
            pass
            yield '    - name: '
            yield escape(environment.finalize(t_3(l_1_k)))
            yield '\n      valueFrom:\n        secretKeyRef:\n          name: '
            yield escape(environment.finalize(t_3(environment.getattr(l_1_ref, 'secret'))))
            yield '\n          key: '
            yield escape(environment.finalize(t_3(environment.getattr(l_1_ref, 'key'))))
            yield '\n'
        l_1_k = l_1_ref = missing
    yield "  # the pod settings the runtime does not carry: envbuilder's own patch (one manager entry)\n  runtimePatches:\n  - manager: envbuilder.io/envbuilder\n    trainingRuntimeSpec:\n      template:\n        spec:\n          replicatedJobs:\n          - name: node\n            template:\n              spec:\n                template:\n                  metadata:\n                    labels:\n"
    for (l_1_k, l_1_v) in context.call(environment.getattr((undefined(name='pod_labels') if l_0_pod_labels is missing else l_0_pod_labels), 'items')):
        _loop_vars = {}
        pass
        yield '                      '
        yield escape(environment.finalize(t_3(l_1_k)))
        yield ': '
        yield escape(environment.finalize(t_3(l_1_v)))
        yield '\n'
    l_1_k = l_1_v = missing
    if (undefined(name='pod_annotations') if l_0_pod_annotations is missing else l_0_pod_annotations):
        pass
        yield '                    annotations:\n'
        for (l_1_k, l_1_v) in (undefined(name='pod_annotations') if l_0_pod_annotations is missing else l_0_pod_annotations):
            _loop_vars = {}
            pass
            yield '                      '
            yield escape(environment.finalize(t_3(l_1_k)))
            yield ': '
            yield escape(environment.finalize(t_3(l_1_v)))
            yield '\n'
        l_1_k = l_1_v = missing
    yield '                  spec:\n'
    if ((((undefined(name='node_selector') if l_0_node_selector is missing else l_0_node_selector) or (undefined(name='tolerations') if l_0_tolerations is missing else l_0_tolerations)) or (undefined(name='image_pull_secrets') if l_0_image_pull_secrets is missing else l_0_image_pull_secrets)) or (undefined(name='service_account') if l_0_service_account is missing else l_0_service_account)):
        pass
        yield '                    '
        yield escape(environment.finalize(t_1(t_5(context.call((undefined(name='pod_tailoring') if l_0_pod_tailoring is missing else l_0_pod_tailoring), priority=False, host=False)), 20)))
        yield '\n'
    yield '                    securityContext:\n                      runAsUser: '
    yield escape(environment.finalize((undefined(name='uid') if l_0_uid is missing else l_0_uid)))
    yield '\n                      runAsGroup: '
    yield escape(environment.finalize((undefined(name='uid') if l_0_uid is missing else l_0_uid)))
    yield '\n                      runAsNonRoot: true\n                    containers:\n                    - name: node\n                      securityContext:\n                        allowPrivilegeEscalation: false\n'
    if (undefined(name='infiniband') if l_0_infiniband is missing else l_0_infiniband):
        pass
        yield '                        capabilities:\n                          add:\n                          - IPC_LOCK\n'
    yield '                      volumeMounts:\n                      '
    yield escape(environment.finalize(t_1(t_5(context.call((undefined(name='volume_mounts') if l_0_volume_mounts is missing else l_0_volume_mounts))), 22)))
    yield '\n                    volumes:\n                    '
    yield escape(environment.finalize(t_1(t_5(context.call((undefined(name='volumes') if l_0_volumes is missing else l_0_volumes))), 20)))
    yield '\n'

blocks = {}
debug_info = '1=76&2=89&3=97&4=101&5=107&7=109&8=112&10=117&11=119&12=123&13=125&14=129&16=132&17=135&19=141&20=144&21=146&26=151&28=153&29=157&32=163&33=165&37=167&38=169&39=171&40=174&43=177&46=179&47=183&49=187&50=189&53=191&54=193&55=195&56=198&58=200&59=204&62=210&63=212&64=215&66=217&67=221&69=226&71=229&72=233&73=235&75=238&76=242&79=244&80=246&96=250&97=254&99=259&101=262&102=266&106=272&107=275&110=278&111=280&117=282&123=286&125=288'