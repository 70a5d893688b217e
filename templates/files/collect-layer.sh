#!/bin/sh
# collect-layer.sh STAMP VENV DEST: copy every file pip added to or changed in VENV since STAMP
# into DEST (same paths), so the runtime stage adds just this layer on top of the torch layer
# and bumping DeepSpeed never invalidates the layer that holds torch.
set -eu
stamp=$1 venv=$2 dest=$3
mkdir -p "$dest"
cd /
find "${venv#/}" \( -type f -o -type l \) -cnewer "$stamp" -print0 \
  | tar --null --no-recursion -cf - -T - \
  | tar -C "$dest" -xf -
echo "collect-layer: $(find "$dest" -type f | wc -l) files into $dest"
