from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/_pod.yaml.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_pod = l_0_container_env = l_0_volume_mounts = l_0_volumes = l_0_pod_tailoring = missing
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
        l_1_pod_labels = resolve('pod_labels')
        l_1_pod_annotations = resolve('pod_annotations')
        l_1_tailored = resolve('tailored')
        l_1_uid = resolve('uid')
        l_1_container = resolve('container')
        l_1_image = resolve('image')
        l_1_pull_note = resolve('pull_note')
        l_1_pull_policy = resolve('pull_policy')
        l_1_workdir = resolve('workdir')
        l_1_env_pairs = resolve('env_pairs')
        l_1_secret_env = resolve('secret_env')
        l_1_env_from = resolve('env_from')
        l_1_cpus = resolve('cpus')
        l_1_memory = resolve('memory')
        l_1_gpus = resolve('gpus')
        l_1_nproc = resolve('nproc')
        l_1_extra_resources = resolve('extra_resources')
        l_1_infiniband = resolve('infiniband')
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
        for (l_2_k, l_2_v) in context.call(environment.getattr((undefined(name='pod_labels') if l_1_pod_labels is missing else l_1_pod_labels), 'items')):
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
        if (undefined(name='pod_annotations') if l_1_pod_annotations is missing else l_1_pod_annotations):
            pass
            t_6.append(
                '  annotations:\n',
            )
            for (l_2_k, l_2_v) in (undefined(name='pod_annotations') if l_1_pod_annotations is missing else l_1_pod_annotations):
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
            '\n',
        ))
        if (undefined(name='workdir') if l_1_workdir is missing else l_1_workdir):
            pass
            t_6.extend((
                '    workingDir: ',
                escape(environment.finalize(t_3((undefined(name='workdir') if l_1_workdir is missing else l_1_workdir)))),
                '\n',
            ))
        t_6.append(
            "    # args, not command: the image's ENTRYPOINT picks NCCL/Gloo interface defaults, then execs these\n    args:\n",
        )
        for l_2_a in l_1_args:
            _loop_vars = {}
            pass
            t_6.extend((
                '    - ',
                escape(environment.finalize(t_3(l_2_a))),
                '\n',
            ))
        l_2_a = missing
        if (((undefined(name='env_pairs') if l_1_env_pairs is missing else l_1_env_pairs) or (undefined(name='secret_env') if l_1_secret_env is missing else l_1_secret_env)) or (undefined(name='env_from') if l_1_env_from is missing else l_1_env_from)):
            pass
            t_6.extend((
                escape(environment.finalize(context.call(environment.getattr(context.call((undefined(name='container_env') if l_0_container_env is missing else l_0_container_env)), 'rstrip')))),
                '\n',
            ))
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
            '    volumeMounts:\n    ',
            escape(environment.finalize(t_2(t_5(context.call((undefined(name='volume_mounts') if l_0_volume_mounts is missing else l_0_volume_mounts))), 4))),
            "\n  volumes:\n  # NCCL and DataLoader workers need a large /dev/shm; a container runtime's default is 64Mi.\n  # Memory-backed: it counts against the pod's memory.\n  ",
            escape(environment.finalize(t_2(t_5(context.call((undefined(name='volumes') if l_0_volumes is missing else l_0_volumes))), 2))),
        ))
        return concat(t_6)
    context.exported_vars.add('pod')
    context.vars['pod'] = l_0_pod = Macro(environment, macro, 'pod', ('args', 'ports', 'subdomain', 'restart'), False, False, False, context.eval_ctx.autoescape)
    def macro(l_1_with_env):
        t_7 = []
        l_1_env_pairs = resolve('env_pairs')
        l_1_secret_env = resolve('secret_env')
        l_1_env_from = resolve('env_from')
        if l_1_with_env is missing:
            l_1_with_env = True
        pass
        if (((undefined(name='env_pairs') if l_1_env_pairs is missing else l_1_env_pairs) and l_1_with_env) or (undefined(name='secret_env') if l_1_secret_env is missing else l_1_secret_env)):
            pass
            t_7.append(
                '    env:\n',
            )
            if l_1_with_env:
                pass
                for (l_2_k, l_2_v) in (undefined(name='env_pairs') if l_1_env_pairs is missing else l_1_env_pairs):
                    _loop_vars = {}
                    pass
                    t_7.extend((
                        '    - name: ',
                        escape(environment.finalize(t_3(l_2_k))),
                        '\n      value: ',
                        escape(environment.finalize(t_3(l_2_v))),
                        '\n',
                    ))
                l_2_k = l_2_v = missing
            for (l_2_k, l_2_ref) in (undefined(name='secret_env') if l_1_secret_env is missing else l_1_secret_env):
                _loop_vars = {}
                pass
                t_7.extend((
                    '    - name: ',
                    escape(environment.finalize(t_3(l_2_k))),
                    '\n      valueFrom:\n        secretKeyRef:\n          name: ',
                    escape(environment.finalize(t_3(environment.getattr(l_2_ref, 'secret')))),
                    '\n          key: ',
                    escape(environment.finalize(t_3(environment.getattr(l_2_ref, 'key')))),
                    '\n',
                ))
            l_2_k = l_2_ref = missing
        if (undefined(name='env_from') if l_1_env_from is missing else l_1_env_from):
            pass
            t_7.append(
                '    envFrom:\n',
            )
            for l_2_s in (undefined(name='env_from') if l_1_env_from is missing else l_1_env_from):
                _loop_vars = {}
                pass
                t_7.extend((
                    '    - secretRef:\n        name: ',
                    escape(environment.finalize(t_3(l_2_s))),
                    '\n',
                ))
            l_2_s = missing
        return concat(t_7)
    context.exported_vars.add('container_env')
    context.vars['container_env'] = l_0_container_env = Macro(environment, macro, 'container_env', ('with_env',), False, False, False, context.eval_ctx.autoescape)
    def macro():
        t_8 = []
        l_1_smoke_out = resolve('smoke_out')
        l_1_out_dir = resolve('out_dir')
        l_1_mounts = resolve('mounts')
        pass
        t_8.append(
            '- name: dshm\n  mountPath: /dev/shm\n',
        )
        if (undefined(name='smoke_out') if l_1_smoke_out is missing else l_1_smoke_out):
            pass
            t_8.extend((
                '- name: smoke-out\n  mountPath: ',
                escape(environment.finalize(t_3((undefined(name='out_dir') if l_1_out_dir is missing else l_1_out_dir)))),
                '\n',
            ))
        for l_2_m in (undefined(name='mounts') if l_1_mounts is missing else l_1_mounts):
            _loop_vars = {}
            pass
            t_8.extend((
                '- name: ',
                escape(environment.finalize(t_3(environment.getattr(l_2_m, 'name')))),
                '\n  mountPath: ',
                escape(environment.finalize(t_3(environment.getattr(l_2_m, 'path')))),
                '\n',
            ))
            if environment.getattr(l_2_m, 'read_only'):
                pass
                t_8.append(
                    '  readOnly: true\n',
                )
        l_2_m = missing
        return concat(t_8)
    context.exported_vars.add('volume_mounts')
    context.vars['volume_mounts'] = l_0_volume_mounts = Macro(environment, macro, 'volume_mounts', (), False, False, False, context.eval_ctx.autoescape)
    yield '\n'
    def macro():
        t_9 = []
        l_1_shm_size = resolve('shm_size')
        l_1_smoke_out = resolve('smoke_out')
        l_1_mounts = resolve('mounts')
        pass
        t_9.extend((
            '- name: dshm\n  emptyDir:\n    medium: Memory\n    sizeLimit: ',
            escape(environment.finalize(t_3((undefined(name='shm_size') if l_1_shm_size is missing else l_1_shm_size)))),
            '\n',
        ))
        if (undefined(name='smoke_out') if l_1_smoke_out is missing else l_1_smoke_out):
            pass
            t_9.append(
                '- name: smoke-out\n  emptyDir: {}\n',
            )
        for l_2_m in (undefined(name='mounts') if l_1_mounts is missing else l_1_mounts):
            _loop_vars = {}
            pass
            t_9.extend((
                '- name: ',
                escape(environment.finalize(t_3(environment.getattr(l_2_m, 'name')))),
                '\n',
            ))
            for (l_3_key, l_3_src) in context.call(environment.getattr(environment.getattr(l_2_m, 'volume'), 'items'), _loop_vars=_loop_vars):
                _loop_vars = {}
                pass
                t_9.extend((
                    '  ',
                    escape(environment.finalize(l_3_key)),
                    ': ',
                    escape(environment.finalize(t_1(l_3_src))),
                    '\n',
                ))
            l_3_key = l_3_src = missing
        l_2_m = missing
        return concat(t_9)
    context.exported_vars.add('volumes')
    context.vars['volumes'] = l_0_volumes = Macro(environment, macro, 'volumes', (), False, False, False, context.eval_ctx.autoescape)
    def macro(l_1_priority, l_1_host):
        t_10 = []
        l_1_service_account = resolve('service_account')
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
        if (undefined(name='service_account') if l_1_service_account is missing else l_1_service_account):
            pass
            t_10.extend((
                'serviceAccountName: ',
                escape(environment.finalize(t_3((undefined(name='service_account') if l_1_service_account is missing else l_1_service_account)))),
                '\n',
            ))
        if (l_1_priority and (undefined(name='priority_class') if l_1_priority_class is missing else l_1_priority_class)):
            pass
            t_10.extend((
                'priorityClassName: ',
                escape(environment.finalize(t_3((undefined(name='priority_class') if l_1_priority_class is missing else l_1_priority_class)))),
                '\n',
            ))
        if (l_1_host and (undefined(name='host_network') if l_1_host_network is missing else l_1_host_network)):
            pass
            t_10.append(
                "# host networking (jobs.host_network): NCCL/RDMA use the node's interfaces; cluster DNS stays\nhostNetwork: true\ndnsPolicy: ClusterFirstWithHostNet\n",
            )
        if (undefined(name='node_selector') if l_1_node_selector is missing else l_1_node_selector):
            pass
            t_10.append(
                'nodeSelector:\n',
            )
            for (l_2_k, l_2_v) in (undefined(name='node_selector') if l_1_node_selector is missing else l_1_node_selector):
                _loop_vars = {}
                pass
                t_10.extend((
                    '  ',
                    escape(environment.finalize(t_3(l_2_k))),
                    ': ',
                    escape(environment.finalize(t_3(l_2_v))),
                    '\n',
                ))
            l_2_k = l_2_v = missing
        if (undefined(name='tolerations') if l_1_tolerations is missing else l_1_tolerations):
            pass
            t_10.append(
                'tolerations:\n',
            )
            for l_2_tol in (undefined(name='tolerations') if l_1_tolerations is missing else l_1_tolerations):
                _loop_vars = {}
                pass
                t_10.extend((
                    '- ',
                    escape(environment.finalize(t_1(l_2_tol))),
                    '\n',
                ))
            l_2_tol = missing
        if (undefined(name='image_pull_secrets') if l_1_image_pull_secrets is missing else l_1_image_pull_secrets):
            pass
            t_10.append(
                'imagePullSecrets:\n',
            )
            for l_2_s in (undefined(name='image_pull_secrets') if l_1_image_pull_secrets is missing else l_1_image_pull_secrets):
                _loop_vars = {}
                pass
                t_10.extend((
                    '- name: ',
                    escape(environment.finalize(t_3(l_2_s))),
                    '\n',
                ))
            l_2_s = missing
        return concat(t_10)
    context.exported_vars.add('pod_tailoring')
    context.vars['pod_tailoring'] = l_0_pod_tailoring = Macro(environment, macro, 'pod_tailoring', ('priority', 'host'), False, False, False, context.eval_ctx.autoescape)

blocks = {}
debug_info = '5=42&8=74&9=79&11=85&13=90&14=95&18=104&19=108&21=111&22=115&24=118&25=122&28=127&29=129&32=131&33=133&34=135&35=137&36=140&37=144&41=150&42=155&44=159&45=162&48=168&49=173&50=175&57=181&58=183&60=185&61=188&62=192&64=195&65=200&69=209&70=213&77=218&81=220&86=225&87=233&89=238&90=240&91=245&92=247&95=251&96=256&99=258&100=260&103=264&105=269&107=274&114=281&117=290&119=294&121=297&122=302&123=304&124=307&130=317&134=325&135=328&139=333&140=338&141=341&142=346&149=356&150=369&151=373&153=376&154=380&156=383&161=388&163=393&164=398&167=404&169=409&170=414&173=418&175=423&176=428'