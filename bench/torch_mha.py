#!/usr/bin/python3
"""Time torch.nn.MultiheadAttention on the named shapes and variants of `mha bench`.

Usage: /usr/bin/python3 bench/torch_mha.py [--shapes NAME[:VARIANT],...] [--threads N] [--repeat N] [--json]

Same shapes, variants, FLOP count and JSON schema as `mha bench --json` (docs/benchmarks.md),
with "tool": "torch" and "torch_version". Each case builds
torch.nn.MultiheadAttention(d_model, h, batch_first=True).eval() in float32, draws inputs with
torch.rand, and inside torch.inference_mode() makes 2 warm-up calls, then times `repeat` calls
with time.perf_counter:

  plain   need_weights=False                      (torch 1.13 may take its fused fast path)
  weights need_weights=True, average_attn_weights=False -> per-head (B,h,T,S) weights
  causal  need_weights=False, bool attn_mask (True = masked), bottom-right aligned:
          query t sees keys s <= t + S - T (torch 1.13 has no is_causal)

Self-attention shapes pass one tensor as query, key and value (m(x, x, x)), as users do; that
is also a condition of torch's fast path. decode-4k passes a (B,1,d_model) query and one
(B,S,d_model) memory tensor as key and value.

peak_rss_bytes is resource.getrusage(RUSAGE_SELF).ru_maxrss * 1024: the peak of the whole
process so far, so it never decreases from one case to the next (as in `mha bench`).
"""

import argparse
import json
import os
import statistics
import sys
import time

SHAPES = {
    # name: (B, T, S, d_model, h, self_attention)
    "tutorial": (64, 5, 5, 512, 8, True),
    "bert-s128": (8, 128, 128, 768, 12, True),
    "bert-s512": (1, 512, 512, 768, 12, True),
    "long-4k": (1, 4096, 4096, 512, 8, True),
    "decode-4k": (1, 1, 4096, 512, 8, False),
}
VARIANTS = ("plain", "weights", "causal")
SGEMM_N = 2048
SGEMM_REPEAT = 5
CPUS = os.cpu_count() or 1


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_mha.py",
        description="Time torch.nn.MultiheadAttention on the shapes of `mha bench`.")
    p.add_argument("--shapes", default=",".join(SHAPES),
                   help="comma-separated cases, each NAME or NAME:VARIANT "
                        "(default: all shapes, all variants: %(default)s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads; 0 or absent: os.cpu_count() (%d)" % CPUS)
    p.add_argument("--repeat", type=int, default=10, help="timed calls per case (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = p.parse_args(argv)
    cases = []
    for spec in (s.strip() for s in a.shapes.split(",")):
        if not spec:
            continue
        name, _, variant = spec.partition(":")
        if name not in SHAPES:
            p.error("--shapes: unknown shape '%s' (expected %s)" % (name, ", ".join(SHAPES)))
        if variant and variant not in VARIANTS:
            p.error("--shapes: unknown variant '%s' in '%s' (expected %s)"
                    % (variant, spec, ", ".join(VARIANTS)))
        for v in ([variant] if variant else VARIANTS):
            if (name, v) not in cases:
                cases.append((name, v))
    if not cases:
        p.error("--shapes: no shape given")
    if a.threads < 0:
        p.error("--threads must be >= 0")
    if a.threads == 0:
        a.threads = CPUS
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    a.cases = cases
    return a


ARGS = parse_args(sys.argv[1:])

# Debian's torch uses OpenBLAS (pthread build) for float GEMM; torch.set_num_threads does not
# reach its thread pool, so pin it here too, before torch loads it, and again below via ctypes.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))

import resource  # noqa: E402

import torch  # noqa: E402


def set_blas_threads(n):
    """openblas_set_num_threads(n) on the OpenBLAS torch loaded, if any; returns its count."""
    import ctypes
    import re
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if line.rstrip().endswith(".so")
                    or re.search(r"\.so\.[0-9.]+$", line.rstrip())}
        libs = {p for p in libs if "blas" in os.path.basename(p)}
    except OSError:
        libs = set()
    count = None
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_set_num_threads(ctypes.c_int(n))
            got = lib.openblas_get_num_threads()
            count = got if count is None else min(count, got)
        except (OSError, AttributeError):
            pass
    return count


def set_threads(n):
    torch.set_num_threads(n)
    return set_blas_threads(n)


def flops(B, T, S, d_model, h):
    d_k = d_v = d_model // h
    return 2 * B * (T * d_model * h * d_k + S * d_model * h * d_k + S * d_model * h * d_v
                    + h * T * S * (d_k + d_v) + T * h * d_v * d_model)


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def causal_mask(T, S):
    """Bool (T,S), True = masked: key s is hidden from query t when s > t + S - T."""
    return torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)


def sgemm_gflops(n=SGEMM_N, repeat=SGEMM_REPEAT):
    a = torch.rand(n, n)
    b = torch.rand(n, n)
    with torch.inference_mode():
        torch.mm(a, b)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / statistics.median(times) / 1e9


def bench_case(name, variant, threads, repeat, sgemm):
    B, T, S, d_model, h, self_attn = SHAPES[name]
    set_threads(threads)
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(d_model, h, batch_first=True).eval()
    q = torch.rand(B, T, d_model)
    k = v = q if self_attn else torch.rand(B, S, d_model)
    kwargs = dict(need_weights=(variant == "weights"), average_attn_weights=False,
                  attn_mask=causal_mask(T, S) if variant == "causal" else None)

    # Record whether torch took its fused fast path (torch._native_multi_head_attention), which
    # MultiheadAttention.forward looks up on the torch module at call time.
    native = getattr(torch, "_native_multi_head_attention", None)
    used = []
    if native is not None:
        def spy(*a, **kw):
            used.append(True)
            return native(*a, **kw)
        torch._native_multi_head_attention = spy
    with torch.inference_mode():
        try:
            out, w = m(q, k, v, **kwargs)
        finally:
            if native is not None:
                torch._native_multi_head_attention = native
        assert out.shape == (B, T, d_model), out.shape
        if variant == "weights":
            assert w is not None and w.shape == (B, h, T, S), None if w is None else w.shape
        else:
            assert w is None
        del out, w
        m(q, k, v, **kwargs)  # second warm-up
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            m(q, k, v, **kwargs)
            times.append(time.perf_counter() - t0)
    f = flops(B, T, S, d_model, h)
    med = statistics.median(times)
    gf = f / med / 1e9
    return {
        "shape": name, "variant": variant,
        "B": B, "T": T, "S": S, "d_model": d_model, "h": h,
        "flops": f,
        "ms_median": med * 1e3, "ms_min": min(times) * 1e3,
        "gflops": gf,
        "sgemm_fraction": gf / sgemm if sgemm > 0 else 0.0,
        "peak_rss_bytes": peak_rss_bytes(),
        "torch_path": "fast" if used else "slow",
    }


def print_table(report):
    print("torch %s, threads %d (BLAS threads %s), repeat %d, sgemm %.1f GFLOP/s"
          % (report["torch_version"], report["threads"], report["blas_threads"],
             report["repeat"], report["sgemm_gflops"]))
    cols = [("shape", "shape", "%s"), ("variant", "variant", "%s"), ("B", "B", "%d"),
            ("T", "T", "%d"), ("S", "S", "%d"), ("d_model", "d_model", "%d"), ("h", "h", "%d"),
            ("ms_median", "ms median", "%.3f"), ("ms_min", "ms min", "%.3f"),
            ("gflops", "GFLOP/s", "%.1f"), ("sgemm_fraction", "of sgemm", "%.2f"),
            ("peak_rss_bytes", "peak RSS MiB", None), ("torch_path", "path", "%s")]
    rows = []
    for r in report["results"]:
        row = []
        for key, _, fmt in cols:
            row.append("%.0f" % (r[key] / 2 ** 20) if fmt is None else fmt % r[key])
        rows.append(row)
    widths = [max(len(c[1]), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    left = {"shape", "variant", "torch_path"}

    def fmt_row(cells):
        return "  ".join(c.ljust(w) if cols[i][0] in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(fmt_row([c[1] for c in cols]))
    print(fmt_row(["-" * w for w in widths]))
    for row in rows:
        print(fmt_row(row))
    print("peak RSS is the process's peak so far (cumulative over the cases above).")


def main():
    blas_threads = set_threads(ARGS.threads)
    sgemm = sgemm_gflops()
    results = []
    for name, variant in ARGS.cases:
        results.append(bench_case(name, variant, ARGS.threads, ARGS.repeat, sgemm))
        if not ARGS.json:
            print("  %s/%s: %.3f ms" % (name, variant, results[-1]["ms_median"]),
                  file=sys.stderr, flush=True)
    report = {
        "tool": "torch",
        "torch_version": torch.__version__,
        "threads": ARGS.threads,
        "blas_threads": blas_threads,
        "repeat": ARGS.repeat,
        "sgemm_gflops": sgemm,
        "results": results,
    }
    if ARGS.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
