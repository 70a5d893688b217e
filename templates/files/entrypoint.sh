#!/bin/sh
# envbuilder entrypoint: fills in the NCCL/Gloo interface defaults the user did not set, then
# runs the command. Override any of them with `docker run -e NCCL_SOCKET_IFNAME=...`.
. /opt/envbuilder/bin/nccl-defaults.sh
exec "$@"
