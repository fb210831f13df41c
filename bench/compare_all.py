#!/usr/bin/python3
"""mha (float32 and bfloat16), ONNX Runtime and PyTorch on the same cases, one run, one table.

Usage: /usr/bin/python3 bench/compare_all.py [--shapes NAME[:VARIANT],...] [--threads N]
                                             [--repeat N] [--mha build/bin/mha]
Set-up for the ORT column (once): bash bench/ort/setup.sh

Runs, one after the other (never at once), with the same --threads and --repeat:
  mha bench --json --dtype float32,bfloat16      every case, warm, in-process
  bench/torch_mha.py --json                      the attention shapes (nn.MultiheadAttention)
  bench/torch_layers.py --json                   bert-layer (nn.TransformerEncoderLayer)
  bench/ort_mha.py --json                        onnxruntime-node, the faster of its two attention
                                                 ops per case, outputs held to `mha run`'s
and prints one table: ms medians, ORT / mha and torch / mha (> 1: mha is faster, against mha's
float32), mha float32 / bfloat16, and each dtype's fraction of the machine's peak. Exits 1 if any of them fails.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
DEFAULT = ("tutorial:plain,bert-s128:plain,bert-s512:plain,long-4k:plain,decode-4k:plain,"
           "bert-layer:plain")
LAYER_SHAPES = ("bert-layer",)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="compare_all.py", description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=DEFAULT,
                   help="NAME[:VARIANT], comma-separated; variant plain (default) or causal "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="threads for all three (0: all cores)")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per case (default 10)")
    p.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    a = p.parse_args(argv)
    a.threads = a.threads or os.cpu_count() or 1
    cases = []
    for spec in filter(None, (s.strip() for s in a.shapes.split(","))):
        name, _, variant = spec.partition(":")
        cases.append((name, variant or "plain"))
    if not cases:
        p.error("--shapes: no case given")
    a.cases = cases
    return a


def run_json(who, cmd):
    print("compare_all.py: running " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit("compare_all.py: %s failed (exit %d): %s" % (who, proc.returncode, " ".join(cmd)))
    try:
        return json.loads(proc.stdout)
    except ValueError as e:
        sys.exit("compare_all.py: %s did not print JSON: %s" % (who, e))


def main():
    a = parse_args(sys.argv[1:])
    if not os.access(a.mha, os.X_OK):
        sys.exit("compare_all.py: no executable mha at '%s' (build it, or pass --mha)" % a.mha)
    def spec(cases):
        return ",".join("%s:%s" % c for c in cases)
    common = ["--threads", str(a.threads), "--repeat", str(a.repeat)]
    attention = [c for c in a.cases if c[0] not in LAYER_SHAPES]
    layers = [c for c in a.cases if c[0] in LAYER_SHAPES]
    load = os.getloadavg()
    date = time.strftime("%Y-%m-%d %H:%M %Z")

    # Before minutes of mha and torch: one line if ORT's set-up is missing.
    if subprocess.run([PYTHON, "bench/ort_mha.py", "--check_setup", "--mha", a.mha],
                      cwd=ROOT).returncode != 0:
        return 1
    mha = run_json("mha bench", [a.mha, "bench", "--json", "--dtype", "float32,bfloat16",
                                 "--shapes", spec(a.cases)] + common)
    torch = {}
    if attention:
        doc = run_json("torch_mha.py", [PYTHON, "bench/torch_mha.py", "--json",
                                        "--shapes", spec(attention)] + common)
        torch_version = doc.get("torch_version", "?")
        torch.update({(r["shape"], r["variant"]): r for r in doc["results"]})
    if layers:
        doc = run_json("torch_layers.py", [PYTHON, "bench/torch_layers.py", "--json",
                                           "--shapes", spec(layers)] + common)
        torch_version = doc.get("torch_version", "?")
        torch.update({(r["shape"], r["variant"]): r for r in doc["results"]})
    ort_doc = run_json("ort_mha.py", [PYTHON, "bench/ort_mha.py", "--json", "--mha", a.mha,
                                      "--shapes", spec(a.cases)] + common)
    ort = {(r["shape"], r["variant"]): r for r in ort_doc["results"]}
    m = {(r["shape"], r["variant"], r["dtype"]): r for r in mha["results"]}

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    peaks = ", ".join("%s %.1f" % kv for kv in mha.get("fma_peak_gflops", {}).items())
    print("# %s | %s (%s logical) | threads %d | repeat %d | load before %.2f %.2f %.2f"
          % (date, cpu, os.cpu_count(), a.threads, a.repeat, *load))
    print("# mha %s: OpenBLAS %s kernels (OPENBLAS_CORETYPE from %s), direct GEMM %s, "
          "bfloat16 GEMM %s; sgemm %.1f GFLOP/s; FMA peak GFLOP/s: %s"
          % (mha.get("version", "?"), mha["blas"].get("core", "?"),
             mha["blas"].get("coretype_source", "?"),
             mha.get("kernels", {}).get("direct_gemm", "?"), mha.get("bf16_gemm_backend", "?"),
             mha.get("sgemm_gflops", 0), peaks))
    print("# onnxruntime-node %s (CPU provider) | torch %s"
          % (ort_doc.get("ort_version", "?"), torch_version))
    head = ["case", "mha f32 ms", "mha bf16 ms", "ORT ms", "ORT op", "torch ms", "ORT/mha",
            "torch/mha", "f32/bf16", "mha of FMA peak", "bf16 of its peak", "ORT max abs diff",
            "ORT MHA / Attention ms"]
    rows = []
    for c in a.cases:
        f32, bf16 = m.get(c + ("float32",)), m.get(c + ("bfloat16",))
        o, t = ort.get(c), torch.get(c)
        if f32 is None or o is None or t is None:
            sys.exit("compare_all.py: %s:%s is missing from a tool's results" % c)
        rows.append(["%s:%s" % c, "%.3f" % f32["ms_median"],
                     "%.3f" % bf16["ms_median"] if bf16 else "-",
                     "%.3f" % o["ms_median"], o["op"], "%.3f" % t["ms_median"],
                     "%.2f" % (o["ms_median"] / f32["ms_median"]),
                     "%.2f" % (t["ms_median"] / f32["ms_median"]),
                     "%.2f" % (f32["ms_median"] / bf16["ms_median"]) if bf16 else "-",
                     "%.2f" % f32.get("fma_peak_fraction", 0),
                     "%.2f" % bf16.get("fma_peak_fraction", 0) if bf16 else "-",
                     "%.1e" % o["max_abs_diff"],
                     " / ".join("%.3f" % o["op_ms"][op] if op in o["op_ms"] else "-"
                                for op in ("MultiHeadAttention", "Attention"))])
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i in (0, 4) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print("# ms = median of the timed calls after 2 warm-up calls; X/mha = X ms / mha float32 ms"
          " (> 1: mha is faster); f32/bf16 = mha float32 ms / bfloat16 ms; bf16 of its peak ="
          " against VDPBF16PS's loop where the native bfloat16 GEMM ran, else the float32 one;"
          " ORT op = the faster of com.microsoft.MultiHeadAttention and"
          " com.microsoft.Attention (both ops' medians in the last column); max abs diff = the"
          " faster op's output against `mha run`'s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
