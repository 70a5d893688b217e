from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'smoke_run.sh.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_plan = resolve('plan')
    pass
    yield '#!/bin/sh\n# The envbuilder smoke job: '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'host_nproc'))
    yield ' ranks with torchrun on this node. (No target name here:\n# this file is in a layer shared by every image of the same smoke job.)\n# In the image:   docker run --rm --gpus all --shm-size=8g IMAGE sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/smoke/run.sh\n# Without GPUs:   docker run --rm --shm-size=2g IMAGE sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/smoke/run.sh   (gloo)\n# Apptainer:      apptainer exec --nv IMAGE.sif sh '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'home'))
    yield '/smoke/run.sh\n# Env: NPROC (default '
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'host_nproc'))
    yield '), BACKEND (auto|nccl|gloo), TIMEOUT (seconds), OUT (records).\nset -eu\nhere=$(cd "$(dirname "$0")" && pwd)\nexec python -m torch.distributed.run --standalone --nnodes=1 \\\n  --nproc_per_node="${NPROC:-'
    yield str(environment.getattr((undefined(name='plan') if l_0_plan is missing else l_0_plan), 'host_nproc'))
    yield '}" --max_restarts=0 \\\n  "$here/ddp_smoke.py" --backend "${BACKEND:-auto}" --timeout "${TIMEOUT:-60}" --out "${OUT:-/tmp/envbuilder-smoke}"\n'

blocks = {}
debug_info = '2=13&4=15&5=17&6=19&7=21&11=23'