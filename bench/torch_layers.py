#!/usr/bin/python3
"""Times PyTorch's own Transformer layer modules on mha bench's layer shapes, for
docs/benchmarks.md ("Transformer layers"): nn.TransformerEncoderLayer (bert-layer) and a 6-layer
nn.TransformerEncoder (bert-6layers), d_model 768, 12 heads, d_ff 3072, B = 1, T = 512, relu,
post-norm, eval() under torch.no_grad() (PyTorch's inference fast path where it applies), plain
and with a causal mask. Same threads as `mha bench --threads N`.

    /usr/bin/python3 bench/torch_layers.py [--threads 2] [--repeat 10] [--shapes NAME[:VARIANT],...]
                                           [--json]

--json prints the fields bench/compare_all.py joins on ("tool": "torch", "torch_version",
"threads", "repeat", and per case "shape", "variant", "ms_median", "ms_min").
"""
import argparse
import json
import statistics
import sys
import time

import torch


def bench(module, x, mask, repeat):
    with torch.no_grad():
        for _ in range(2):
            module(x, mask)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            module(x, mask)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--shapes", default="bert-layer,bert-6layers",
                    help="NAME or NAME:VARIANT, comma-separated (default: %(default)s, "
                         "both variants)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    cases = []
    for spec in filter(None, (s.strip() for s in args.shapes.split(","))):
        name, _, variant = spec.partition(":")
        if name not in ("bert-layer", "bert-6layers") or variant not in ("", "plain", "causal"):
            ap.error("--shapes: unknown case '%s' (expected bert-layer or bert-6layers, "
                     "variant plain or causal)" % spec)
        cases += [(name, v) for v in ([variant] if variant else ["plain", "causal"])]
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def layer():
        return torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True)

    modules = {"bert-layer": layer().eval(),
               "bert-6layers": torch.nn.TransformerEncoder(layer(), 6,
                                                           enable_nested_tensor=False).eval()}
    x = torch.rand(1, 512, 768)
    masks = {"plain": None, "causal": torch.nn.Transformer.generate_square_subsequent_mask(512)}
    if not args.json:
        print(f"torch {torch.__version__}, {args.threads} thread(s)")
        print(f"{'shape':<13} {'variant':<8} {'ms median':>10} {'ms min':>10}")
    results = []
    for name, variant in cases:
        med, low = bench(modules[name], x, masks[variant], args.repeat)
        results.append({"shape": name, "variant": variant, "ms_median": med, "ms_min": low})
        if not args.json:
            print(f"{name:<13} {variant:<8} {med:>10.1f} {low:>10.1f}")
    if args.json:
        json.dump({"tool": "torch", "torch_version": torch.__version__,
                   "threads": args.threads, "repeat": args.repeat, "results": results},
                  sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
