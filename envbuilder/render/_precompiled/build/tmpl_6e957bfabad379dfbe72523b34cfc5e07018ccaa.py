from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'apptainer.def.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_version = resolve('version')
    l_0_plan = resolve('plan')
    l_0_build_env_dir = resolve('build_env_dir')
    l_0_cxx_wrapper = resolve('cxx_wrapper')
    l_0_steps = resolve('steps')
    l_0_stage_dir = resolve('stage_dir')
    l_0_render_all = resolve('render_all')
    l_0_build_date = resolve('build_date')
    l_0_smoke_command = resolve('smoke_command')
    pass
    yield '# Rendered by envbuilder '
    yield str((undefined(name='version') if l_0_version is missing else l_0_version))
    yield ' for target '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'target'))
    yield ' ('
    yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'stack'), 'tag'))
    yield ').\n# Matrix '
    yield str(environment.getattr(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'stack'), 'matrix'), 'digest'))
    yield '.\n# Build from this folder, as your user (a definition file builds with --fakeroot):\n#   SOURCE_DATE_EPOCH='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'source_date_epoch'))
    yield ' apptainer build '
    yield str(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'stack'), 'tag'))
    yield ".sif envbuilder.def\n# (SOURCE_DATE_EPOCH dates the root file system's files, as mksquashfs reads it; %post sets it too)\n# Base of the builder stage: Bootstrap: docker, the registry image "
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder_image'))
    yield " (the Dockerfile's).\n# Base of the runtime stage: Bootstrap: docker, the registry image "
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'runtime_image'))
    yield " (the Dockerfile's).\n# (envbuilder build --runtime apptainer bootstraps an image of the local engine from its docker save.)\n# Build arguments (index URLs with credentials, proxies): a file of NAME=VALUE lines in a folder\n# bound at "
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield ' (apptainer build --bind DIR:'
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield ':ro); in no layer.\nBootstrap: docker\nFrom: '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder_image'))
    yield '\nStage: builder\n\n%setup\n    mkdir -p "${APPTAINER_ROOTFS}'
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '"\n\n%files\n    ca-certificates /usr/local/share/ca-certificates/envbuilder\n'
    if environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'builder'), 'cpu_isa'):
        pass
        yield '    files/cxx-isa.sh '
        yield str((undefined(name='cxx_wrapper') if l_0_cxx_wrapper is missing else l_0_cxx_wrapper))
        yield '\n'
    for l_1_layer in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'layers'):
        _loop_vars = {}
        pass
        for l_2_f in environment.getitem(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'layer_files'), environment.getattr(l_1_layer, 'name')):
            _loop_vars = {}
            pass
            yield '    '
            yield str(l_2_f)
            yield ' '
            yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
            yield '/'
            yield str(environment.getitem(context.call(environment.getattr(l_2_f, 'rsplit'), '/', 1, _loop_vars=_loop_vars), -1))
            yield '\n'
        l_2_f = missing
        if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'wheelhouse'):
            pass
            yield '    wheels/'
            yield str(environment.getattr(l_1_layer, 'name'))
            yield ' '
            yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
            yield '/wheels-'
            yield str(environment.getattr(l_1_layer, 'name'))
            yield '\n'
    l_1_layer = missing
    yield '\n%post -c /bin/bash\n    set -euo pipefail\n    echo "envbuilder: stage builder, %post"\n    export DEBIAN_FRONTEND=noninteractive\n    if [ -f '
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '/build.env ]; then set -a; . '
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '/build.env; set +a; fi\n    export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-'
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'source_date_epoch'))
    yield '}"\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'):
        pass
        yield '    export PIP_INDEX_URL="${PIP_INDEX_URL:-'
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'pip_index_default'))
        yield '}"\n'
    for l_1_name in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'index_build_args'):
        _loop_vars = {}
        pass
        yield '    # '
        yield str(l_1_name)
        yield ": an index URL with credentials, from the build arguments' file\n    export "
        yield str(l_1_name)
        yield '="${'
        yield str(l_1_name)
        yield ':?set '
        yield str(l_1_name)
        yield ' (the index URL with its credentials) in '
        yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
        yield '/build.env}"\n'
    l_1_name = missing
    yield '    export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'ca_bundle'))
    yield '\n    export PATH='
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield '/bin:$PATH\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'builder_system'), 'render'), 'apptainer'))
    for l_1_layer in environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'layers'):
        _loop_vars = {}
        pass
        yield '    echo "envbuilder: stage builder, layer '
        yield str(environment.getattr(l_1_layer, 'name'))
        yield '"\n'
        if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'wheelhouse'):
            pass
            yield '    rm -rf '
            yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
            yield '/wheels && mv '
            yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
            yield '/wheels-'
            yield str(environment.getattr(l_1_layer, 'name'))
            yield ' '
            yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
            yield '/wheels\n'
        yield str(context.call(environment.getattr(environment.getitem(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'layer_install'), environment.getattr(l_1_layer, 'name')), 'render'), 'apptainer', _loop_vars=_loop_vars))
    l_1_layer = missing
    for l_1_stage in environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'stages'):
        _loop_vars = {}
        pass
        yield '    echo "envbuilder: stage builder, '
        yield str(environment.getattr(l_1_stage, 'short'))
        yield '"\n'
        yield str(context.call(environment.getattr(environment.getattr(l_1_stage, 'run'), 'render'), 'apptainer', _loop_vars=_loop_vars))
    l_1_stage = missing
    yield '    rm -rf '
    yield str((undefined(name='stage_dir') if l_0_stage_dir is missing else l_0_stage_dir))
    yield '\n\nBootstrap: docker\nFrom: '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'runtime_image'))
    yield '\nStage: runtime\n\n%setup\n    mkdir -p "${APPTAINER_ROOTFS}'
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '"\n\n%files from builder\n    '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield ' '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield '\n'
    yield str(context.call((undefined(name='render_all') if l_0_render_all is missing else l_0_render_all), environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_copies'), 'apptainer'))
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'ppa'):
        pass
        yield '    /etc/apt/sources.list.d /etc/apt/\n    /etc/apt/trusted.gpg.d /etc/apt/\n'
    yield '\n%files\n    files/entrypoint.sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/bin/entrypoint.sh\n    files/nccl-defaults.sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/bin/nccl-defaults.sh\n'
    if environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'hashes'):
        pass
        yield '    files/constraints.txt '
        yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
        yield '/constraints.txt\n'
    yield '    smoke '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/smoke\n\n%post -c /bin/bash\n    set -euo pipefail\n    echo "envbuilder: stage runtime, %post"\n    export DEBIAN_FRONTEND=noninteractive\n    if [ -f '
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '/build.env ]; then set -a; . '
    yield str((undefined(name='build_env_dir') if l_0_build_env_dir is missing else l_0_build_env_dir))
    yield '/build.env; set +a; fi\n    export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-'
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'source_date_epoch'))
    yield '}"\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_system'), 'render'), 'apptainer'))
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_after'), 'render'), 'apptainer'))
    yield '\n%environment\n'
    yield str(context.call(environment.getattr(environment.getattr((undefined(name='steps') if l_0_steps is missing else l_0_steps), 'runtime_env'), 'render'), 'apptainer'))
    yield '    . '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/bin/nccl-defaults.sh\n\n%labels\n'
    for (l_1_k, l_1_v) in context.call(environment.getattr(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'labels'), 'items')):
        _loop_vars = {}
        pass
        yield '    '
        yield str(l_1_k)
        yield ' '
        yield str(l_1_v)
        yield '\n'
    l_1_k = l_1_v = missing
    yield '    org.label-schema.build-date '
    yield str((undefined(name='build_date') if l_0_build_date is missing else l_0_build_date))
    yield '\n\n%runscript\n    exec "$@"\n\n%test\n    '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'venv'))
    yield '/bin/python -c "import torch, torch.distributed as d; print(\'torch\', torch.__version__, \'gloo\', d.is_gloo_available())"\n\n%help\n    envbuilder image for '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'target'))
    yield ': '
    yield str(environment.getitem(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'labels'), 'org.opencontainers.image.description'))
    yield '.\n    Smoke test (NCCL on GPUs, gloo without): '
    yield str((undefined(name='smoke_command') if l_0_smoke_command is missing else l_0_smoke_command))
    yield '\n'

blocks = {}
debug_info = '3=21&4=27&6=29&8=33&9=35&12=37&14=41&18=43&22=45&23=50&24=64&30=75&31=79&32=81&33=86&34=92&35=102&36=104&37=106&38=113&39=124&40=132&43=137&47=139&50=141&51=145&55=150&56=152&57=154&58=160&64=162&65=166&66=168&68=171&71=175&72=185&78=187&81=189&82=193'