#!/bin/sh
# c++ for compiled CPU code at a stated instruction set (builder stage only).
# DeepSpeed's op builder hard-codes -march=native and picks the SIMD width from the build host's
# CPU (op_builder/builder.py cpu_arch(), simd_width()): ops built on an AVX-512 builder die with
# "illegal instruction" on nodes without it. envbuilder points CXX here, so that every compile
# gets -march=$ENVBUILDER_CPU_ISA and the matching SIMD define instead, and the build log shows it.
set -eu
real=${ENVBUILDER_REAL_CXX:-g++}
isa=${ENVBUILDER_CPU_ISA:?ENVBUILDER_CPU_ISA is not set}
simd=${ENVBUILDER_CPU_SIMD:-}
n=$#
while [ "$n" -gt 0 ]; do
  a=$1
  shift
  n=$((n - 1))
  case $a in
    -march=native|-mcpu=native|-mtune=native) a="-march=$isa" ;;
    -D__AVX512__|-D__AVX256__|-D__SCALAR__) if [ -n "$simd" ]; then a="-D$simd"; fi ;;
  esac
  set -- "$@" "$a"
done
exec "$real" "$@"
