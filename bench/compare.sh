#!/usr/bin/env bash
# Run `mha bench --json` and bench/torch_mha.py --json with the same arguments and print one
# table side by side.
#
# Usage: bench/compare.sh [--shapes NAME[:VARIANT],...] [--threads N] [--repeat N] [--one_shot]
#   MHA_BIN   the mha binary (default: build/bin/mha, relative to the repository root)
#   PYTHON    the Python with torch (default: /usr/bin/python3)
# Both tools run one after the other (never at once), from the repository root. Without
# --threads each uses all cores. --one_shot adds mha's one-shot columns (`mha run` processes,
# compute time from run.json, and its ratio to the warm time). Exits non-zero if either side fails.
set -euo pipefail

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

args=()
mha_only=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --one_shot|--one-shot) mha_only+=("--one_shot"); shift ;;
    --shapes|--threads|--repeat)
      [[ $# -ge 2 ]] || { echo "compare.sh: $1 needs a value" >&2; exit 2; }
      args+=("$1" "$2"); shift 2 ;;
    --shapes=*|--threads=*|--repeat=*)
      args+=("${1%%=*}" "${1#*=}"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

mha_bin="${MHA_BIN:-build/bin/mha}"
python="${PYTHON:-/usr/bin/python3}"
[[ -x "$mha_bin" ]] || { echo "compare.sh: no executable mha at '$mha_bin' (build it, or set MHA_BIN)" >&2; exit 1; }
[[ -x "$python" ]] || { echo "compare.sh: no python at '$python' (set PYTHON)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "compare.sh: running $mha_bin bench --json ${args[*]}" >&2
if ! "$mha_bin" bench --json "${args[@]}" "${mha_only[@]}" >"$tmp/mha.json"; then
  echo "compare.sh: '$mha_bin bench --json ${args[*]}' failed" >&2
  exit 1
fi
echo "compare.sh: running $python bench/torch_mha.py --json ${args[*]}" >&2
if ! "$python" bench/torch_mha.py --json "${args[@]}" >"$tmp/torch.json"; then
  echo "compare.sh: '$python bench/torch_mha.py --json ${args[*]}' failed" >&2
  exit 1
fi

cpu="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*:[[:space:]]*//' || true)"
[[ -n "$cpu" ]] || cpu="$(uname -m)"
ncpu="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"

"$python" - "$tmp/mha.json" "$tmp/torch.json" "$(date '+%Y-%m-%d %H:%M:%S %Z')" "$cpu" "$ncpu" <<'EOF'
import json, sys

mha_path, torch_path, date, cpu, ncpu = sys.argv[1:6]

def load(path, who):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("compare.sh: %s did not print valid JSON: %s" % (who, e))
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        sys.exit("compare.sh: %s JSON has no 'results' list" % who)
    return doc

mha = load(mha_path, "mha bench")
tch = load(torch_path, "torch_mha.py")

def threads_str():
    a, b = mha.get("threads"), tch.get("threads")
    return str(a) if a == b else "mha %s, torch %s" % (a, b)

print("# %s | CPU: %s (%s logical) | threads: %s | repeat: %s | torch %s"
      % (date, cpu, ncpu, threads_str(), mha.get("repeat"), tch.get("torch_version", "?")))
print("# sgemm 2048^3 float32: mha %.1f GFLOP/s, torch %.1f GFLOP/s"
      % (mha.get("sgemm_gflops", 0.0), tch.get("sgemm_gflops", 0.0)))

key = lambda r: (r["shape"], r["variant"])
t_by = {key(r): r for r in tch["results"]}
m_keys = [key(r) for r in mha["results"]]
warnings = []
rows = []
for m in mha["results"]:
    t = t_by.get(key(m))
    if t is None:
        warnings.append("%s/%s: only in mha" % key(m))
        continue
    if m.get("flops") != t.get("flops"):
        warnings.append("%s/%s: FLOP counts differ (mha %s, torch %s)"
                        % (key(m) + (m.get("flops"), t.get("flops"))))
    speedup = t["ms_median"] / m["ms_median"] if m["ms_median"] > 0 else float("inf")
    row = [m["shape"], m["variant"],
           "%.3f" % m["ms_median"], "%.3f" % t["ms_median"], "%.2fx" % speedup,
           "%.1f" % m["gflops"], "%.1f" % t["gflops"], "%.2f" % m["sgemm_fraction"]]
    one = m.get("one_shot")
    if one:
        row += ["%.3f" % one["compute_ms_median"], "%.2fx" % one["compute_over_warm"],
                "%.3f" % one["wall_ms_median"]]
    rows.append(row)
for t in tch["results"]:
    if key(t) not in m_keys:
        warnings.append("%s/%s: only in torch" % key(t))

head = ["shape", "variant", "mha ms", "torch ms", "speedup", "mha GFLOP/s", "torch GFLOP/s",
        "mha/sgemm"]
if rows and len(rows[0]) > len(head):
    head += ["1-shot ms", "1-shot/warm", "1-shot wall"]
widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
def line(cells):
    return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
print(line(head))
print(line(["-" * w for w in widths]))
for r in rows:
    print(line(r))
print("# ms = median of the timed calls; speedup = torch ms / mha ms (> 1: mha is faster);"
      " mha/sgemm = mha GFLOP/s over mha's own sgemm rate")
if len(head) > 8:
    print("# 1-shot ms = median compute time in run.json of `mha run` processes of the same case;"
          " 1-shot wall = the whole process; mha OpenBLAS kernels: %s"
          % mha.get("blas", {}).get("core", "?"))
for w in warnings:
    print("# warning: " + w)
if not rows:
    sys.exit("compare.sh: no (shape, variant) pair is in both results")
EOF
