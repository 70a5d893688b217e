from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/_pod.yaml.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_pod = l_0_pod_tailoring = missing
    try:
        t_1 = environment.filters['flow']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'flow' found.")
    try:
        t_2 = environment.filters['indent']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'indent' found.")
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
    def macro(l_1_args, l_1_ports, l_1_subdomain, l_1_restart):
        t_6 = []
        l_1_labels = resolve('labels')
        l_1_tailored = resolve('tailored')
        l_1_uid = resolve('uid')
        l_1_container = resolve('container')
        l_1_image = resolve('image')
        l_1_pull_note = resolve('pull_note')
        l_1_pull_policy = resolve('pull_policy')
        l_1_env_pairs = resolve('env_pairs')
        l_1_cpus = resolve('cpus')
        l_1_memory = resolve('memory')
        l_1_gpus = resolve('gpus')
        l_1_nproc = resolve('nproc')
        l_1_extra_resources = resolve('extra_resources')
        l_1_infiniband = resolve('infiniband')
        l_1_out_dir = resolve('out_dir')
        l_1_shm_size = resolve('shm_size')
        if l_1_args is missing:
            l_1_args = undefined("parameter 'args' was not provided", name='args')
        if l_1_ports is missing:
            l_1_ports = undefined("parameter 'ports' was not provided", name='ports')
        if l_1_subdomain is missing:
            l_1_subdomain = None
        if l_1_restart is missing:
            l_1_restart = None
        pass
        t_6.append(
            'metadata:\n  labels:\n',
        )
        for (l_2_k, l_2_v) in context.call(environment.getattr((undefined(name='labels') if l_1_labels is missing else l_1_labels), 'items')):
            _loop_vars = {}
            pass
            t_6.extend((
                '    ',
                escape(environment.finalize(t_3(l_2_k))),
                ': ',
                escape(environment.finalize(t_3(l_2_v))),
                '\n',
            ))
        l_2_k = l_2_v = missing
        t_6.append(
            'spec:\n',
        )
        if l_1_subdomain:
            pass
            t_6.extend((
                '  subdomain: ',
                escape(environment.finalize(t_3(l_1_subdomain))),
                '\n',
            ))
        if l_1_restart:
            pass
            t_6.extend((
                '  restartPolicy: ',
                escape(environment.finalize(l_1_restart)),
                '\n',
            ))
        if (undefined(name='tailored') if l_1_tailored is missing else l_1_tailored):
            pass
            t_6.extend((
                '  ',
                escape(environment.finalize(t_2(t_5(context.call((undefined(name='pod_tailoring') if l_0_pod_tailoring is missing else l_0_pod_tailoring))), 2))),
                '\n',
            ))
        t_6.extend((
            '  securityContext:\n    runAsUser: ',
            escape(environment.finalize((undefined(name='uid') if l_1_uid is missing else l_1_uid))),
            '\n    runAsGroup: ',
            escape(environment.finalize((undefined(name='uid') if l_1_uid is missing else l_1_uid))),
            '\n    runAsNonRoot: true\n  containers:\n  - name: ',
            escape(environment.finalize(t_3((undefined(name='container') if l_1_container is missing else l_1_container)))),
            '\n    image: ',
            escape(environment.finalize(t_3((undefined(name='image') if l_1_image is missing else l_1_image)))),
            '\n    # ',
            escape(environment.finalize((undefined(name='pull_note') if l_1_pull_note is missing else l_1_pull_note))),
            '\n    imagePullPolicy: ',
            escape(environment.finalize((undefined(name='pull_policy') if l_1_pull_policy is missing else l_1_pull_policy))),
            "\n    # args, not command: the image's ENTRYPOINT picks NCCL/Gloo interface defaults, then execs these\n    args:\n",
        ))
        for l_2_a in l_1_args:
            _loop_vars = {}
            pass
            t_6.extend((
                '    - ',
                escape(environment.finalize(t_3(l_2_a))),
                '\n',
            ))
        l_2_a = missing
        if (undefined(name='env_pairs') if l_1_env_pairs is missing else l_1_env_pairs):
            pass
            t_6.append(
                '    env:\n',
            )
            for (l_2_k, l_2_v) in (undefined(name='env_pairs') if l_1_env_pairs is missing else l_1_env_pairs):
                _loop_vars = {}
                pass
                t_6.extend((
                    '    - name: ',
                    escape(environment.finalize(t_3(l_2_k))),
                    '\n      value: ',
                    escape(environment.finalize(t_3(l_2_v))),
                    '\n',
                ))
            l_2_k = l_2_v = missing
        t_6.append(
            '    ports:\n',
        )
        for (l_2_pname, l_2_port) in l_1_ports:
            _loop_vars = {}
            pass
            t_6.extend((
                '    - name: ',
                escape(environment.finalize(t_3(l_2_pname))),
                '\n      containerPort: ',
                escape(environment.finalize(l_2_port)),
                '\n      protocol: TCP\n',
            ))
        l_2_pname = l_2_port = missing
        t_6.extend((
            "    # CPUs for the ranks; memory for the ranks plus the memory-backed /dev/shm below (it counts\n    # against the pod's memory): requests make the pod Burstable, not BestEffort\n    resources:\n      requests:\n        cpu: ",
            escape(environment.finalize(t_3(t_4((undefined(name='cpus') if l_1_cpus is missing else l_1_cpus))))),
            '\n        memory: ',
            escape(environment.finalize(t_3((undefined(name='memory') if l_1_memory is missing else l_1_memory)))),
            '\n      limits:\n        memory: ',
            escape(environment.finalize(t_3((undefined(name='memory') if l_1_memory is missing else l_1_memory)))),
            '\n',
        ))
        if (undefined(name='gpus') if l_1_gpus is missing else l_1_gpus):
            pass
            t_6.extend((
                '        nvidia.com/gpu: ',
                escape(environment.finalize(t_3(t_4((undefined(name='nproc') if l_1_nproc is missing else l_1_nproc))))),
                '\n',
            ))
        for (l_2_k, l_2_v) in (undefined(name='extra_resources') if l_1_extra_resources is missing else l_1_extra_resources):
            _loop_vars = {}
            pass
            t_6.extend((
                '        ',
                escape(environment.finalize(t_3(l_2_k))),
                ': ',
                escape(environment.finalize(t_3(l_2_v))),
                '  # jobs.resources (a device resource: requested as limited)\n',
            ))
        l_2_k = l_2_v = missing
        t_6.append(
            '    securityContext:\n      allowPrivilegeEscalation: false\n',
        )
        if (undefined(name='infiniband') if l_1_infiniband is missing else l_1_infiniband):
            pass
            t_6.extend((
                '      # RDMA registers (locks) memory. The capability is effective for root; for uid ',
                escape(environment.finalize((undefined(name='uid') if l_1_uid is missing else l_1_uid))),
                " the\n      # node's container runtime must also grant an unlimited memlock ulimit (containerd's default).\n      capabilities:\n        add:\n        - IPC_LOCK\n",
            ))
        t_6.extend((
            '    volumeMounts:\n    - name: dshm\n      mountPath: /dev/shm\n    - name: smoke-out\n      mountPath: ',
            escape(environment.finalize(t_3((undefined(name='out_dir') if l_1_out_dir is missing else l_1_out_dir)))),
            "\n  volumes:\n  # NCCL and DataLoader workers need a large /dev/shm; a container runtime's default is 64Mi.\n  # Memory-backed: it counts against the pod's memory.\n  - name: dshm\n    emptyDir:\n      medium: Memory\n      sizeLimit: ",
            escape(environment.finalize(t_3((undefined(name='shm_size') if l_1_shm_size is missing else l_1_shm_size)))),
            '\n  - name: smoke-out\n    emptyDir: {}',
        ))
        return concat(t_6)
    context.exported_vars.add('pod')
    context.vars['pod'] = l_0_pod = Macro(environment, macro, 'pod', ('args', 'ports', 'subdomain', 'restart'), False, False, False, context.eval_ctx.autoescape)
    def macro(l_1_priority, l_1_host):
        t_7 = []
        l_1_priority_class = resolve('priority_class')
        l_1_host_network = resolve('host_network')
        l_1_node_selector = resolve('node_selector')
        l_1_tolerations = resolve('tolerations')
        l_1_image_pull_secrets = resolve('image_pull_secrets')
        if l_1_priority is missing:
            l_1_priority = True
        if l_1_host is missing:
            l_1_host = True
        pass
        if (l_1_priority and (undefined(name='priority_class') if l_1_priority_class is missing else l_1_priority_class)):
            pass
            t_7.extend((
                'priorityClassName: ',
                escape(environment.finalize(t_3((undefined(name='priority_class') if l_1_priority_class is missing else l_1_priority_class)))),
                '\n',
            ))
        if (l_1_host and (undefined(name='host_network') if l_1_host_network is missing else l_1_host_network)):
            pass
            t_7.append(
                "# host networking (jobs.host_network): NCCL/RDMA use the node's interfaces; cluster DNS stays\nhostNetwork: true\ndnsPolicy: ClusterFirstWithHostNet\n",
            )
        if (undefined(name='node_selector') if l_1_node_selector is missing else l_1_node_selector):
            pass
            t_7.append(
                'nodeSelector:\n',
            )
            for (l_2_k, l_2_v) in (undefined(name='node_selector') if l_1_node_selector is missing else l_1_node_selector):
                _loop_vars = {}
                pass
                t_7.extend((
                    '  ',
                    escape(environment.finalize(t_3(l_2_k))),
                    ': ',
                    escape(environment.finalize(t_3(l_2_v))),
                    '\n',
                ))
            l_2_k = l_2_v = missing
        if (undefined(name='tolerations') if l_1_tolerations is missing else l_1_tolerations):
            pass
            t_7.append(
                'tolerations:\n',
            )
            for l_2_tol in (undefined(name='tolerations') if l_1_tolerations is missing else l_1_tolerations):
                _loop_vars = {}
                pass
                t_7.extend((
                    '- ',
                    escape(environment.finalize(t_1(l_2_tol))),
                    '\n',
                ))
            l_2_tol = missing
        if (undefined(name='image_pull_secrets') if l_1_image_pull_secrets is missing else l_1_image_pull_secrets):
            pass
            t_7.append(
                'imagePullSecrets:\n',
            )
            for l_2_s in (undefined(name='image_pull_secrets') if l_1_image_pull_secrets is missing else l_1_image_pull_secrets):
                _loop_vars = {}
                pass
                t_7.extend((
                    '- name: ',
                    escape(environment.finalize(t_3(l_2_s))),
                    '\n',
                ))
            l_2_s = missing
        return concat(t_7)
    context.exported_vars.add('pod_tailoring')
    context.vars['pod_tailoring'] = l_0_pod_tailoring = Macro(environment, macro, 'pod_tailoring', ('priority', 'host'), False, False, False, context.eval_ctx.autoescape)

blocks = {}
debug_info = '4=42&7=72&8=77&11=86&12=90&14=93&15=97&17=100&18=104&21=109&22=111&25=113&26=115&27=117&28=119&31=122&32=127&34=131&36=136&37=141&38=143&42=150&43=155&44=157&51=163&52=165&54=167&55=170&56=174&58=177&59=182&63=191&64=195&74=200&81=202&88=208&89=220&90=224&92=227&97=232&99=237&100=242&103=248&105=253&106=258&109=262&111=267&112=272'