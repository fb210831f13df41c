#!/usr/bin/python3
"""Time ONNX Runtime (CPU, npm onnxruntime-node) on the shapes of `mha bench`, outputs held to mha's.

Usage: /usr/bin/python3 bench/ort_mha.py [--shapes NAME[:VARIANT],...] [--threads N] [--repeat N]
                                         [--json] [--mha build/bin/mha]
Set-up (once): bash bench/ort/setup.sh

Per case it draws float32 inputs and weights from one seed (inputs uniform in [0, 1) as in
`mha bench`, kernels Glorot-uniform, biases uniform in +-0.1, LayerNorm gamma 1 +- 0.1 and
beta +- 0.1), writes an ONNX graph (opset 17 and the com.microsoft domain) for each attention op
that fits the case, and times them all in one Node process (bench/ort/run.mjs: intra-op threads =
--threads, inter-op 1, every graph optimization, 2 warm-up calls, --repeat timed calls):

  MultiHeadAttention  x @ [W_q|W_k|W_v] (one MatMul), Split, com.microsoft.MultiHeadAttention
                      (biases as its bias input), then @ W_o + b_o; decode-4k projects the query
                      and the memory apart (x @ W_q, m @ [W_k|W_v])
  Attention           com.microsoft.Attention (the fused op: the QKV projection inside it, on
                      [W_q|W_k|W_v] and its bias), then @ W_o + b_o; self-attention only

The faster op's median is the case's time ("op" says which). Causal cases (bottom-right, as in
`mha bench`) set the ops' `unidirectional`, which for T = S is the same lower triangle; for
decode-4k (T = 1) bottom-right masks nothing, so its causal graph is the plain one. bert-layer
is BERT-base's post-norm encoder layer as `mha bench` runs it (LayerNormalization, eps 1e-5,
relu FFN with d_ff 3072) around either op.

Each op's output is compared with `mha run` on the same inputs and weights (native layout,
x @ W: docs/files.md); the case fails (exit 1) when the max abs difference exceeds 1e-4.
Same shapes, FLOP count and JSON fields as `mha bench --json` where they apply, with
"tool": "ort", "ort_version", and per case "op", "op_ms" and "max_abs_diff".
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORT_DIR = os.path.join(ROOT, "bench", "ort")
SETUP = "bash bench/ort/setup.sh"
TOLERANCE = 1e-4

SHAPES = {
    # name: (B, T, S, d_model, h, self_attention, d_ff: an encoder layer around it, else 0)
    "tutorial": (64, 5, 5, 512, 8, True, 0),
    "bert-s128": (8, 128, 128, 768, 12, True, 0),
    "bert-s512": (1, 512, 512, 768, 12, True, 0),
    "long-4k": (1, 4096, 4096, 512, 8, True, 0),
    "decode-4k": (1, 1, 4096, 512, 8, False, 0),
    "bert-layer": (1, 512, 512, 768, 12, True, 3072),
}
VARIANTS = ("plain", "causal")
DEFAULT = "tutorial,bert-s128,bert-s512,long-4k,decode-4k,bert-layer"
CPUS = os.cpu_count() or 1


def fail(message):
    print("ort_mha.py: " + message, file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="ort_mha.py",
        description="Time ONNX Runtime's attention ops on the shapes of `mha bench`.")
    p.add_argument("--shapes", default=DEFAULT,
                   help="comma-separated cases, each NAME or NAME:VARIANT (variants: plain, "
                        "causal; NAME alone: plain) (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads of ORT and mha's threads; 0: os.cpu_count() (%d)" % CPUS)
    p.add_argument("--repeat", type=int, default=10, help="timed calls per case (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"),
                   help="the mha binary the outputs are compared with (default: build/bin/mha)")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs and weights (default 0)")
    p.add_argument("--check_setup", action="store_true",
                   help="only check that node, onnxruntime-node, onnx and mha are there")
    a = p.parse_args(argv)
    cases = []
    for spec in (s.strip() for s in a.shapes.split(",")):
        if not spec:
            continue
        name, _, variant = spec.partition(":")
        variant = variant or "plain"
        if name not in SHAPES:
            p.error("--shapes: unknown shape '%s' (expected %s)" % (name, ", ".join(SHAPES)))
        if variant not in VARIANTS:
            p.error("--shapes: variant '%s' in '%s' is not run through ORT (expected %s)"
                    % (variant, spec, ", ".join(VARIANTS)))
        if (name, variant) not in cases:
            cases.append((name, variant))
    if not cases:
        p.error("--shapes: no shape given")
    if a.threads < 0 or a.repeat < 1:
        p.error("--threads must be >= 0 and --repeat >= 1")
    a.threads = a.threads or CPUS
    a.cases = cases
    return a


def check_setup(mha):
    """One line and exit 1 when a piece is missing, naming the set-up command."""
    if shutil.which("node") is None:
        fail("node is not on PATH (Node.js 18 or later; then run: %s)" % SETUP)
    if not os.path.isfile(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node",
                                       "package.json")):
        fail("onnxruntime-node is not installed in bench/ort (run: %s)" % SETUP)
    try:
        import onnx  # noqa: F401
    except ImportError:
        fail("the Python package onnx is missing (run: %s)" % SETUP)
    if not os.access(mha, os.X_OK):
        fail("no executable mha at '%s' (build it, or pass --mha)" % mha)


ARGS = parse_args(sys.argv[1:])
check_setup(ARGS.mha)
if ARGS.check_setup:
    sys.exit(0)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def flops(B, T, S, d_model, h, d_ff):
    d_k = d_v = d_model // h
    f = 2 * B * (T * d_model * h * d_k + S * d_model * h * d_k + S * d_model * h * d_v
                 + h * T * S * (d_k + d_v) + T * h * d_v * d_model)
    return f + 4 * B * T * d_model * d_ff


def draw(name, variant, seed):
    """Inputs and native weights (x @ W) of a case, float32."""
    B, T, S, D, h, self_attn, d_ff = SHAPES[name]
    rng = np.random.default_rng(seed)

    def glorot(n_in, n_out):
        limit = np.sqrt(6.0 / (n_in + n_out))
        return rng.uniform(-limit, limit, (n_in, n_out)).astype(np.float32)

    def small(n):
        return rng.uniform(-0.1, 0.1, n).astype(np.float32)

    x = rng.random((B, T, D), dtype=np.float32)
    memory = None if self_attn else rng.random((B, S, D), dtype=np.float32)
    w = {}
    for p in "qkv":
        w["W_" + p] = glorot(D, D)
        w["b_" + p] = small(D)
    w["W_o"] = glorot(D, D)
    w["b_o"] = small(D)
    if d_ff:
        w["W_1"], w["b_1"] = glorot(D, d_ff), small(d_ff)
        w["W_2"], w["b_2"] = glorot(d_ff, D), small(D)
        for n in ("norm1", "norm2"):
            w[n + ".gamma"] = (1 + small(D)).astype(np.float32)
            w[n + ".beta"] = small(D)
    return x, memory, w


def build_graph(name, variant, op, w, path):
    """The case's ONNX graph around `op`; returns the graph inputs' names in feed order."""
    B, T, S, D, h, self_attn, d_ff = SHAPES[name]
    causal = variant == "causal" and T > 1  # bottom-right with T = 1 masks nothing
    inits, nodes = [], []

    def const(n, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), n))
        return n

    W_qkv = np.concatenate([w["W_q"], w["W_k"], w["W_v"]], axis=1)
    b_qkv = np.concatenate([w["b_q"], w["b_k"], w["b_v"]])
    attrs = {"num_heads": h}
    if causal:
        attrs["unidirectional"] = 1
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, D])]
    if op == "Attention":
        nodes.append(helper.make_node("Attention", ["x", const("W_qkv", W_qkv),
                                                    const("b_qkv", b_qkv)], ["ctx"],
                                      domain="com.microsoft", **attrs))
    elif self_attn:
        nodes.append(helper.make_node("MatMul", ["x", const("W_qkv", W_qkv)], ["qkv"]))
        nodes.append(helper.make_node("Split", ["qkv", const("split", np.array([D] * 3))],
                                      ["q", "k", "v"], axis=2))
        nodes.append(helper.make_node("MultiHeadAttention",
                                      ["q", "k", "v", const("b_qkv", b_qkv)], ["ctx"],
                                      domain="com.microsoft", **attrs))
    else:
        inputs.append(helper.make_tensor_value_info("memory", TensorProto.FLOAT, [B, S, D]))
        W_kv = np.concatenate([w["W_k"], w["W_v"]], axis=1)
        nodes.append(helper.make_node("MatMul", ["x", const("W_q", w["W_q"])], ["q"]))
        nodes.append(helper.make_node("MatMul", ["memory", const("W_kv", W_kv)], ["kv"]))
        nodes.append(helper.make_node("Split", ["kv", const("split", np.array([D] * 2))],
                                      ["k", "v"], axis=2))
        nodes.append(helper.make_node("MultiHeadAttention",
                                      ["q", "k", "v", const("b_qkv", b_qkv)], ["ctx"],
                                      domain="com.microsoft", **attrs))
    nodes.append(helper.make_node("MatMul", ["ctx", const("W_o", w["W_o"])], ["ctx_o"]))
    out = "attention" if d_ff else "y"
    nodes.append(helper.make_node("Add", ["ctx_o", const("b_o", w["b_o"])], [out]))
    if d_ff:
        # Post-norm, as nn.TransformerEncoderLayer and mha's bert-layer: x = LN1(x + SA(x));
        # x = LN2(x + relu(x W_1 + b_1) W_2 + b_2).
        def layer_norm(src, n, dst):
            nodes.append(helper.make_node(
                "LayerNormalization", [src, const(n + ".gamma", w[n + ".gamma"]),
                                       const(n + ".beta", w[n + ".beta"])], [dst],
                axis=-1, epsilon=1e-5))
        nodes.append(helper.make_node("Add", ["x", "attention"], ["res1"]))
        layer_norm("res1", "norm1", "h1")
        nodes.append(helper.make_node("MatMul", ["h1", const("W_1", w["W_1"])], ["f1"]))
        nodes.append(helper.make_node("Add", ["f1", const("b_1", w["b_1"])], ["f1b"]))
        nodes.append(helper.make_node("Relu", ["f1b"], ["f1r"]))
        nodes.append(helper.make_node("MatMul", ["f1r", const("W_2", w["W_2"])], ["f2"]))
        nodes.append(helper.make_node("Add", ["f2", const("b_2", w["b_2"])], ["f2b"]))
        nodes.append(helper.make_node("Add", ["h1", "f2b"], ["res2"]))
        layer_norm("res2", "norm2", "y")
    graph = helper.make_graph(nodes, "%s_%s_%s" % (name, variant, op), inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, D])],
                              inits)
    model = helper.make_model(graph, producer_name="mha bench/ort_mha.py",
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return [i.name for i in inputs]


def ops_for(name):
    return ["MultiHeadAttention", "Attention"] if SHAPES[name][5] else ["MultiHeadAttention"]


def run_mha(name, variant, x, memory, w, tmp):
    """mha run on the same inputs and weights; returns output.npy."""
    B, T, S, D, h, self_attn, d_ff = SHAPES[name]
    prefix = "layers.0.self_attn." if d_ff else ""
    native = {prefix + k: v for k, v in w.items() if k[:2] in ("W_", "b_") and k[2] in "qkvo"}
    if d_ff:
        native.update({"layers.0.ffn." + k: w[k] for k in ("W_1", "b_1", "W_2", "b_2")})
        native.update({"layers.0." + k: w[k] for k in w if k.startswith("norm")})
    np.savez(os.path.join(tmp, "weights.npz"), **native)
    np.save(os.path.join(tmp, "query.npy"), x)
    cmd = [ARGS.mha, "run", "-q", "--h", str(h), "--threads", str(ARGS.threads),
           "--query", os.path.join(tmp, "query.npy"), "--weights", os.path.join(tmp, "weights.npz"),
           "--out_dir", os.path.join(tmp, "mha_out")]
    if memory is not None:
        np.save(os.path.join(tmp, "memory.npy"), memory)
        cmd += ["--key", os.path.join(tmp, "memory.npy"), "--value", os.path.join(tmp, "memory.npy")]
    if variant == "causal":
        cmd += ["--causal", "bottom-right"]
    if d_ff:
        cmd += ["--layer", "encoder", "--activation", "relu", "--layer_norm_eps", "1e-5"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail("%s/%s: '%s' failed: %s" % (name, variant, " ".join(cmd), proc.stderr.strip()))
    return np.load(os.path.join(tmp, "mha_out", "output.npy"))


def bench_case(name, variant, tmp):
    B, T, S, D, h, self_attn, d_ff = SHAPES[name]
    x, memory, w = draw(name, variant, ARGS.seed)
    x.tofile(os.path.join(tmp, "x.bin"))
    feeds = {"x": {"name": "x", "path": os.path.join(tmp, "x.bin"), "dims": [B, T, D]}}
    if memory is not None:
        memory.tofile(os.path.join(tmp, "memory.bin"))
        feeds["memory"] = {"name": "memory", "path": os.path.join(tmp, "memory.bin"),
                           "dims": [B, S, D]}
    runs = []
    for op in ops_for(name):
        model = os.path.join(tmp, op + ".onnx")
        names = build_graph(name, variant, op, w, model)
        runs.append({"model": model, "inputs": [feeds[n] for n in names],
                     "output": os.path.join(tmp, op + ".bin")})
    job = os.path.join(tmp, "job.json")
    with open(job, "w") as f:
        json.dump({"threads": ARGS.threads, "repeat": ARGS.repeat, "warmup": 2, "runs": runs}, f)
    proc = subprocess.run(["node", os.path.join(ORT_DIR, "run.mjs"), job],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        fail("%s/%s: onnxruntime-node failed: %s" % (name, variant, last))
    report = json.loads(proc.stdout)

    reference = run_mha(name, variant, x, memory, w, tmp)
    op_ms, diffs = {}, {}
    for op, timed in zip(ops_for(name), report["runs"]):
        y = np.fromfile(os.path.join(tmp, op + ".bin"), dtype=np.float32).reshape(B, T, D)
        diffs[op] = float(np.max(np.abs(y.astype(np.float64) - reference)))
        op_ms[op] = timed
        if not diffs[op] <= TOLERANCE:
            fail("%s/%s: ORT's %s output differs from mha's by %.3g (max abs; limit %g)"
                 % (name, variant, op, diffs[op], TOLERANCE))
    best = min(op_ms, key=lambda op: op_ms[op]["ms_median"])
    f = flops(B, T, S, D, h, d_ff)
    med = op_ms[best]["ms_median"]
    return report["ort_version"], {
        "shape": name, "variant": variant, "dtype": "float32",
        "B": B, "T": T, "S": S, "d_model": D, "h": h, "layers": 1 if d_ff else 0, "d_ff": d_ff,
        "flops": f,
        "ms_median": med, "ms_min": op_ms[best]["ms_min"],
        "gflops": f / (med * 1e6),
        "op": best,
        "op_ms": {op: t["ms_median"] for op, t in op_ms.items()},
        "max_abs_diff": diffs[best],
        "max_abs_diff_by_op": diffs,
    }


def print_table(report):
    print("onnxruntime-node %s (CPU), threads %d, repeat %d; outputs held to %s run"
          % (report["ort_version"], report["threads"], report["repeat"], ARGS.mha))
    head = ["shape", "variant", "op", "ms median", "ms min", "GFLOP/s", "MHA op ms",
            "Attention op ms", "max abs diff"]
    rows = []
    for r in report["results"]:
        ms = r["op_ms"]
        rows.append([r["shape"], r["variant"], r["op"], "%.3f" % r["ms_median"],
                     "%.3f" % r["ms_min"], "%.1f" % r["gflops"],
                     "%.3f" % ms["MultiHeadAttention"],
                     "%.3f" % ms["Attention"] if "Attention" in ms else "-",
                     "%.1e" % r["max_abs_diff"]])
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))


def main():
    results, version = [], "?"
    with tempfile.TemporaryDirectory(prefix="ort_mha.") as tmp:
        for name, variant in ARGS.cases:
            case_dir = os.path.join(tmp, "%s_%s" % (name, variant))
            os.mkdir(case_dir)
            version, r = bench_case(name, variant, case_dir)
            shutil.rmtree(case_dir)
            results.append(r)
            if not ARGS.json:
                print("  %s/%s: %.3f ms (%s), max abs diff %.1e"
                      % (name, variant, r["ms_median"], r["op"], r["max_abs_diff"]),
                      file=sys.stderr, flush=True)
    report = {"tool": "ort", "ort_version": version, "threads": ARGS.threads,
              "repeat": ARGS.repeat, "results": results}
    if ARGS.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
