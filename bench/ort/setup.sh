#!/usr/bin/env bash
# Set-up for bench/ort_mha.py: python3-onnx (Debian) to write the graphs, and ONNX Runtime's npm
# CPU package (onnxruntime-node, pinned in bench/ort/package-lock.json) to run them.
#
# Usage: bash bench/ort/setup.sh        (from anywhere; apt-get needs root or sudo)
#
# npm runs with --ignore-scripts: onnxruntime-node's postinstall script downloads from outside
# the npm registry (CUDA binaries), and the CPU binaries for linux-x64 are inside its tarball.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-/usr/bin/python3}"

if ! "$python" -c 'import onnx' 2>/dev/null; then
  sudo=""
  [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
  echo "setup.sh: installing python3-onnx" >&2
  $sudo apt-get install -y python3-onnx
fi

command -v node >/dev/null || { echo "setup.sh: node is missing (Node.js 18 or later, with npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup.sh: npm is missing" >&2; exit 1; }

npm ci --ignore-scripts --no-audit --no-fund --prefix "$root/bench/ort"
node --input-type=module -e "
import { createRequire } from 'node:module';
const require = createRequire('$root/bench/ort/package.json');
const ort = require('onnxruntime-node');
console.error('setup.sh: onnxruntime-node ' + ort.env.versions.node + ' loads');
"
