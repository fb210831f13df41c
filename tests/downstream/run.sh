#!/usr/bin/env bash
# ctest downstream.find_package: install BUILD_DIR into a temporary prefix, then configure,
# build and run tests/downstream against it with find_package(mha), then with pkg-config alone;
# check the man page and the completion script landed.
set -euo pipefail
build_dir=$1
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
for f in bin/mha include/mha/mha.hpp lib/cmake/mha/mhaConfig.cmake \
         lib/pkgconfig/mha.pc share/bash-completion/completions/mha \
         lib/libmha_{base,io,kernel,checkpoint,pipeline,config,inspect,draw,text,view,run,analysis}.a; do
  [[ -e "$prefix/$f" ]] || { echo "downstream: $f was not installed" >&2; exit 1; }
done
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exists --print-errors mha
[[ "$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion mha)" == \
   "$("$prefix/bin/mha" --version | cut -d' ' -f2)" ]] || { echo "downstream: versions differ" >&2; exit 1; }
# The Python module, when it was built, from the documented path (docs/python.md).
if [[ -n "$(ls "$build_dir"/python/mha.*.so 2>/dev/null)" ]]; then
  PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
    "import mha, numpy as np; assert mha.attention(np.random.rand(2,5,16).astype('f4'), h=4)[0].shape == (2, 5, 16)"
  [[ -e "$prefix/lib/python3/dist-packages/mha.pyi" ]] || { echo "downstream: no mha.pyi" >&2; exit 1; }
fi
[[ -e "$prefix/share/man/man1/mha.1" ]] || { echo "downstream: no man page" >&2; exit 1; }
cmake -S "$here" -B "$prefix/downstream-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/downstream-build" >/dev/null
"$prefix/downstream-build/downstream"
# The same program through the pkg-config file alone (its -l order is a static link's). Its
# output is shell words (MHA_VERSION's quotes escaped), as a Makefile's $(shell pkg-config ...)
# hands them to the shell: hence eval.
pc=(env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --define-prefix)
eval "g++ -O1 -o '$prefix/downstream-pc' '$here/main.cpp' $("${pc[@]}" --cflags mha) \
      $("${pc[@]}" --libs mha)"
"$prefix/downstream-pc"
