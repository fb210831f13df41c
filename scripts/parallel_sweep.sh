#!/usr/bin/env bash
# Runs a sweep as N shards with GNU parallel on this machine, one shard per core
# at a time, each pinned to its own core (so jobs x threads = cores: every run
# gets one thread), then collects the results (docs/cluster.md).
#
#   scripts/parallel_sweep.sh SWEEP.json [N] [mha sweep options, e.g. --out_dir DIR]
#
# MHA names the binary (default build/bin/mha). Over several hosts with a
# shared file system, see docs/cluster.md.
set -euo pipefail
sweep="${1:?usage: scripts/parallel_sweep.sh SWEEP.json [N] [options]}"
shards="${2:-8}"
shift $(( $# >= 2 ? 2 : 1 ))
mha="${MHA:-build/bin/mha}"
cores="$(nproc)"
# {%} is parallel's job slot, 1 to $cores: slot k runs on core k - 1.
parallel --will-cite --halt now,fail=1 -j "$cores" \
  taskset -c '$(( {%} - 1 ))' "$mha" sweep "$sweep" --shard '{}'/"$shards" "$@" \
  ::: $(seq 0 $(( shards - 1 )))
"$mha" sweep "$sweep" --collect "$@"
