#!/bin/sh
# collect-layer.sh STAMP VENV DEST: copy every file pip added to or changed in VENV since STAMP
# into DEST (paths relative to VENV), so the runtime stage adds just this layer on top of the
# torch layer (COPY --from=<stage> DEST/ VENV/) and bumping DeepSpeed never invalidates the
# layer that holds torch, nor the layers after it.
set -eu
stamp=$1 venv=$2 dest=$3
mkdir -p "$dest"
cd "$venv"
find . \( -type f -o -type l \) -cnewer "$stamp" -print0 \
  | tar --null --no-recursion -cf - -T - \
  | tar -C "$dest" -xf -
echo "collect-layer: $(find "$dest" -type f | wc -l) files into $dest"
