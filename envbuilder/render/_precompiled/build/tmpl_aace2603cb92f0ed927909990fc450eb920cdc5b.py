from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'Dockerfile.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_plan = resolve('plan')
    l_0_steps = resolve('steps')
    try:
        t_1 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    pass
    yield '# Rendered by envbuilder '
    yield str((undefined(name='version') if l_0_version is missing else l_0_version))
    yield ' for target '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'target'))
    yield ' ('
    yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'stack'), 'tag'))
    yield ').\n# Matrix '
    yield str(environment.getattr(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'stack'), 'matrix'), 'digest'))
    yield '. Re-render instead of editing: envbuilder render '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'target'))
    yield '\n# Builds with the legacy builder and with BuildKit. Build arguments: BUILDER_IMAGE, RUNTIME_IMAGE,\n# PIP_INDEX_URL, SOURCE_DATE_EPOCH, and the predefined HTTP_PROXY/HTTPS_PROXY/NO_PROXY.\n# Reproducible bit for bit with BuildKit 0.13+ (envbuilder build does this): docker buildx build\n#   --provenance=false --output type=oci,dest=-,name=NAME,rewrite-timestamp=true,oci-mediatypes=true . | docker load\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'image_digests'):
        pass
        yield '# The lock pins the base images by digest and every apt package by version (lock --system).\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'index_build_args'):
        pass
        yield '# The package index carries credentials: they are in no file here. Give them at build time,\n# e.g. --build-arg '
        yield str(t_1(context.eval_ctx, environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'index_build_args'), '=... --build-arg '))
        yield '=... (envbuilder build does);\n# they are used in the builder stages only, never in the runtime image.\n'
    yield 'ARG BUILDER_IMAGE='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder_image'))
    yield '\nARG RUNTIME_IMAGE='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'runtime_image'))
    yield "\n# the date of every file and of the image (a lock's date, else the newest release in the stack);\n# each stage declares it, so pip and CPython see it too (hash-checked .pyc files)\nARG SOURCE_DATE_EPOCH="
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'source_date_epoch'))
    yield '\n\n'
    yield from context.blocks['builder'][0](context)
    yield '\n'
    l_1_loop = missing
    for l_1_layer, l_1_loop in LoopContext(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'layers'), undefined):
        _loop_vars = {}
        pass
        yield '\n'
        yield from context.blocks['layer'][0](context.derived({'layer': l_1_layer, 'loop': l_1_loop}))
    l_1_loop = l_1_layer = missing
    l_1_loop = missing
    for l_1_stage, l_1_loop in LoopContext(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'stages'), undefined):
        _loop_vars = {}
        pass
        yield '\n\n\n'
        yield from context.blocks['stage'][0](context.derived({'loop': l_1_loop, 'stage': l_1_stage}))
    l_1_loop = l_1_stage = missing
    yield '\n\n'
    yield from context.blocks['runtime'][0](context)
    yield '\n'

def block_builder(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    l_0_plan = resolve('plan')
    l_0_cxx_wrapper = resolve('cxx_wrapper')
    l_0_steps = resolve('steps')
    pass
    yield '# --- builder: Python, compilers and any CA bundle; none of it reaches the runtime image ---\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'platform'):
        pass
        yield '# the wheels are '
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'platform'))
        yield "'s: a multi-arch base must be pulled for that platform too\n# hadolint ignore=DL3029\nFROM --platform="
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'platform'))
        yield ' ${BUILDER_IMAGE} AS builder\n'
    else:
        pass
        yield 'FROM ${BUILDER_IMAGE} AS builder\n'
    yield 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\nARG DEBIAN_FRONTEND=noninteractive\nARG SOURCE_DATE_EPOCH\nARG PIP_INDEX_URL'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'):
        pass
        yield '='
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'))
    yield '\n'
    for l_1_name in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'extra_index_args'):
        _loop_vars = {}
        pass
        yield 'ARG '
        yield str(l_1_name)
        yield '\n'
    l_1_name = missing
    yield 'ENV PIP_NO_CACHE_DIR=1 \\\n    PIP_DISABLE_PIP_VERSION_CHECK=1 \\\n    PIP_CERT='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'ca_bundle'))
    yield ' \\\n    PATH='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield '/bin:$PATH\nCOPY ca-certificates/ /usr/local/share/ca-certificates/envbuilder/\n'
    if environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder'), 'cpu_isa'):
        pass
        yield '# compiled CPU code gets -march='
        yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder'), 'cpu_isa'))
        yield ", never the builder's -march=native\nCOPY files/cxx-isa.sh "
        yield str((undefined(name='cxx_wrapper') if l_0_cxx_wrapper is missing else l_0_cxx_wrapper))
        yield '\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'builder_system'), 'render'), 'docker', _block_vars=_block_vars))

def block_layer(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    l_0_loop = resolve('loop')
    l_0_layer = resolve('layer')
    l_0_plan = resolve('plan')
    l_0_steps = resolve('steps')
    try:
        t_1 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    pass
    yield '# --- layer '
    yield str(environment.getattr((undefined(name='loop') if l_0_loop is missing else l_0_loop), 'index'))
    yield ': '
    yield str(environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'name'))
    yield ' ('
    yield str(t_1(context.eval_ctx, environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'requirements'), ', '))
    yield ') ---\nFROM '
    yield str(('builder' if environment.getattr((undefined(name='loop') if l_0_loop is missing else l_0_loop), 'first') else environment.getattr(environment.getitem(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'layers'), (environment.getattr((undefined(name='loop') if l_0_loop is missing else l_0_loop), 'index0') - 1)), 'stage')))
    yield ' AS '
    yield str(environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'stage'))
    yield '\nARG SOURCE_DATE_EPOCH\nARG PIP_INDEX_URL'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'):
        pass
        yield '='
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'))
    yield '\n'
    for l_1_name in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'extra_index_args'):
        _loop_vars = {}
        pass
        yield 'ARG '
        yield str(l_1_name)
        yield '\n'
    l_1_name = missing
    yield 'COPY '
    yield str(t_1(context.eval_ctx, environment.getitem(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'layer_files'), environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'name')), ' '))
    yield ' /tmp/envbuilder/\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'wheelhouse'):
        pass
        yield 'COPY wheels/'
        yield str(environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'name'))
        yield '/ /tmp/envbuilder/wheels/\n'
    yield str(context.call(environment.getattr(environment.getitem(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'layer_install'), environment.getattr((undefined(name='layer') if l_0_layer is missing else l_0_layer), 'name')), 'render'), 'docker', _block_vars=_block_vars))
    yield '\n'

def block_stage(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    l_0_stage = resolve('stage')
    l_0_plan = resolve('plan')
    pass
    yield '# --- '
    yield str(environment.getattr((undefined(name='stage') if l_0_stage is missing else l_0_stage), 'title'))
    yield ' ---\nFROM '
    yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'torch_layer'), 'stage'))
    yield ' AS '
    yield str(environment.getattr((undefined(name='stage') if l_0_stage is missing else l_0_stage), 'name'))
    yield '\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nARG DEBIAN_FRONTEND=noninteractive\nARG SOURCE_DATE_EPOCH\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='stage') if l_0_stage is missing else l_0_stage), 'run'), 'render'), 'docker', _block_vars=_block_vars))
    yield '\n'

def block_runtime(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    l_0_plan = resolve('plan')
    l_0_steps = resolve('steps')
    l_0_render_all = resolve('render_all')
    pass
    yield '# --- runtime: the base image, Python, the layers above, a non-root user ---\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'platform'):
        pass
        yield '# hadolint ignore=DL3029\nFROM --platform='
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'platform'))
        yield ' ${RUNTIME_IMAGE} AS runtime\n'
    else:
        pass
        yield 'FROM ${RUNTIME_IMAGE} AS runtime\n'
    yield 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\nARG DEBIAN_FRONTEND=noninteractive\nARG SOURCE_DATE_EPOCH\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'ppa'):
        pass
        yield 'COPY --from=builder /etc/apt/sources.list.d/ /etc/apt/sources.list.d/\nCOPY --from=builder /etc/apt/trusted.gpg.d/ /etc/apt/trusted.gpg.d/\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_system'), 'render'), 'docker', _block_vars=_block_vars))
    yield '\n'
    yield str(context.call((undefined(name='render_all') if l_0_render_all is missing else l_0_render_all), environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_copies'), 'docker', _block_vars=_block_vars))
    if environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_after'):
        pass
        yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_after'), 'render'), 'docker', _block_vars=_block_vars))
        yield '\n'
    yield 'COPY files/entrypoint.sh files/nccl-defaults.sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/bin/\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'hashes'):
        pass
        yield "# the lock's pins: PIP_CONSTRAINT keeps a later pip install in the image on the locked versions\nCOPY files/constraints.txt "
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
        yield '/constraints.txt\n'
    yield 'COPY smoke/ '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/smoke/\n# torch first, then each later layer on its own: bumping DeepSpeed changes only the last COPY\nCOPY --from='
    yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'torch_layer'), 'stage'))
    yield ' '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield ' '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield '\n'
    for l_1_layer in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'extra_layers'):
        _loop_vars = {}
        pass
        yield 'COPY --from='
        yield str(environment.getattr(l_1_layer, 'stage'))
        yield ' /opt/layers/'
        yield str(environment.getattr(l_1_layer, 'name'))
        yield '/ '
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
        yield '/\n'
    l_1_layer = missing
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_env'), 'render'), 'docker', _block_vars=_block_vars))
    yield '\nLABEL '
    l_1_loop = missing
    for (l_1_k, l_1_v), l_1_loop in LoopContext(context.call(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'labels'), 'items'), _block_vars=_block_vars), undefined):
        _loop_vars = {}
        pass
        yield str(l_1_k)
        yield '="'
        yield str(l_1_v)
        yield '"'
        if (not environment.getattr(l_1_loop, 'last')):
            pass
            yield ' \\\n      '
    l_1_loop = l_1_k = l_1_v = missing
    yield '\nUSER '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'uid'))
    yield '\nWORKDIR /home/'
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'user'))
    yield '\nENTRYPOINT ["'
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/bin/entrypoint.sh"]\nCMD ["/bin/bash"]'

blocks = {'builder': block_builder, 'layer': block_layer, 'stage': block_stage, 'runtime': block_runtime}
debug_info = '4=21&5=27&10=31&13=34&15=37&18=40&19=42&22=44&24=46&50=49&51=53&65=56&68=60&78=63&24=66&26=78&27=81&29=83&36=89&37=94&41=102&42=104&44=106&45=109&46=111&48=113&51=115&52=134&53=140&55=144&56=149&58=157&59=159&60=162&62=164&68=167&69=178&70=180&74=184&78=187&80=199&82=202&89=208&93=211&94=213&95=214&96=216&98=219&99=221&101=224&103=227&105=229&106=235&107=239&109=246&110=249&112=261&113=263&114=265'