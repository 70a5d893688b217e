from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/kueue-localqueue.yaml.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_target = resolve('target')
    l_0_queue = resolve('queue')
    l_0_cluster_queue = resolve('cluster_queue')
    l_0_needs = resolve('needs')
    try:
        t_1 = environment.filters['q']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'q' found.")
    pass
    yield '# Rendered by envbuilder '
    yield escape(environment.finalize((undefined(name='version') if l_0_version is missing else l_0_version)))
    yield ': the Kueue LocalQueue the job files of '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' name\n# ('
    yield escape(environment.finalize(t_1((undefined(name='queue') if l_0_queue is missing else l_0_queue))))
    yield ', label kueue.x-k8s.io/queue-name), in the namespace the jobs run in, pointing at\n# the ClusterQueue '
    yield escape(environment.finalize(t_1((undefined(name='cluster_queue') if l_0_cluster_queue is missing else l_0_cluster_queue))))
    yield ' (jobs.cluster_queue). A cluster admin usually creates it;\n# apply it only where the namespace has no LocalQueue of that name:\n#   kubectl apply -n NAMESPACE -f kueue-localqueue.yaml\n'
    for l_1_n in (undefined(name='needs') if l_0_needs is missing else l_0_needs):
        _loop_vars = {}
        pass
        yield '# Needs:   '
        yield escape(environment.finalize(l_1_n))
        yield '\n'
    l_1_n = missing
    yield 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: '
    yield escape(environment.finalize(t_1((undefined(name='queue') if l_0_queue is missing else l_0_queue))))
    yield '\nspec:\n  clusterQueue: '
    yield escape(environment.finalize(t_1((undefined(name='cluster_queue') if l_0_cluster_queue is missing else l_0_cluster_queue))))
    yield '\n'

blocks = {}
debug_info = '1=23&2=27&3=29&6=31&7=35&12=39&14=41'