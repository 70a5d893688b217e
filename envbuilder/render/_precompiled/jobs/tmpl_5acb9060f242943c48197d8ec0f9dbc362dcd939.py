from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'jobs/horovodrun.sh.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_launcher_program = resolve('launcher_program')
    l_0_what = resolve('what')
    l_0_target = resolve('target')
    l_0_tag = resolve('tag')
    l_0_nnodes = resolve('nnodes')
    l_0_nproc = resolve('nproc')
    l_0_file = resolve('file')
    l_0_world = resolve('world')
    l_0_entrypoint = resolve('entrypoint')
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
    yield '#!/bin/sh\n# Rendered by envbuilder '
    yield escape(environment.finalize((undefined(name='version') if l_0_version is missing else l_0_version)))
    yield ': '
    if (undefined(name='launcher_program') if l_0_launcher_program is missing else l_0_launcher_program):
        pass
        yield escape(environment.finalize((undefined(name='what') if l_0_what is missing else l_0_what)))
    else:
        pass
        yield 'a Horovod training command'
    yield ' for '
    yield escape(environment.finalize((undefined(name='target') if l_0_target is missing else l_0_target)))
    yield ' ('
    yield escape(environment.finalize((undefined(name='tag') if l_0_tag is missing else l_0_tag)))
    yield ")\n# with Horovod's own launcher, as "
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' node(s) x '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield " process(es): horovodrun over Gloo (this image's\n# Horovod is built with Gloo and without MPI: no mpirun, no MPI library is needed).\n# Run it in the image on the first node:\n"
    if (undefined(name='launcher_program') if l_0_launcher_program is missing else l_0_launcher_program):
        pass
        yield '#   HOSTS=node1,node2 sh '
        yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
        yield "       (default: the Slurm allocation's hosts, else localhost)\n"
    else:
        pass
        yield '#   HOSTS=node1,node2 sh '
        yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
        yield " python train.py --epochs 1\n#   (no [jobs] command in the project: the command is this script's arguments; default hosts:\n#   the Slurm allocation's, else localhost)\n"
    yield "# horovodrun starts the ranks of the other hosts over ssh: every host needs this image, the same\n# paths, and passwordless ssh between the nodes (port: HOROVOD_SSH_PORT, default 22). One host\n# needs no ssh. NCCL does the GPU all-reduces; Gloo only carries Horovod's control plane.\nset -eu\nnp="
    yield escape(environment.finalize((undefined(name='world') if l_0_world is missing else l_0_world)))
    yield '\nif [ -n "${HOSTS:-}" ]; then\n  hosts="$HOSTS"\nelif [ -n "${SLURM_JOB_NODELIST:-}" ]; then\n  hosts="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)"\nelse\n  hosts=localhost\nfi\n# host:slots for horovodrun -H: '
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield ' ranks on each of the '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' hosts\nslots="$(printf \'%s\' "$hosts" | tr \',\' \'\\n\' | sed \'s/$/:'
    yield escape(environment.finalize((undefined(name='nproc') if l_0_nproc is missing else l_0_nproc)))
    yield '/\' | paste -sd, -)"\ncount="$(printf \'%s\' "$hosts" | tr \',\' \'\\n\' | grep -c .)"\nif [ "$count" -ne '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ' ]; then\n  echo "envbuilder: $count host(s) given ($hosts), this layout needs '
    yield escape(environment.finalize((undefined(name='nnodes') if l_0_nnodes is missing else l_0_nnodes)))
    yield ': set HOSTS" >&2\n  exit 2\nfi\n'
    if (not (undefined(name='launcher_program') if l_0_launcher_program is missing else l_0_launcher_program)):
        pass
        yield 'if [ "$#" -eq 0 ]; then\n  echo "envbuilder: give the training command, e.g. sh '
        yield escape(environment.finalize((undefined(name='file') if l_0_file is missing else l_0_file)))
        yield ' python train.py" >&2\n  exit 2\nfi\n'
    yield 'exec '
    yield escape(environment.finalize(t_3((undefined(name='entrypoint') if l_0_entrypoint is missing else l_0_entrypoint))))
    yield ' horovodrun --gloo -np "$np" -H "$slots" \\\n  ${HOROVOD_SSH_PORT:+-p "$HOROVOD_SSH_PORT"} '
    if (undefined(name='launcher_program') if l_0_launcher_program is missing else l_0_launcher_program):
        pass
        yield escape(environment.finalize(t_1(context.eval_ctx, t_2(context, (undefined(name='launcher_program') if l_0_launcher_program is missing else l_0_launcher_program), 'sh'), ' ')))
    else:
        pass
        yield '"$@"'

blocks = {}
debug_info = '2=40&3=53&6=57&7=60&9=65&17=68&25=70&26=74&28=76&29=78&32=80&34=83&38=86&39=88'