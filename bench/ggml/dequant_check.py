#!/usr/bin/python3
"""mha's GGUF dequantizers (lib/src/io/ggml_quants.cpp) against ggml's own, bit for bit.

  GGML_DIR=/path/to/ggml /usr/bin/python3 bench/ggml/dequant_check.py [--values 65536]

GGML_DIR is a checkout of https://github.com/ggml-org/ggml; the script checks out the pinned
commit of bench/ggml/compare.py and builds its ggml-base library (CMake Release) in
GGML_DIR/build-mha-bench, then, for every type mha dequantizes, writes random blocks
(tests/gguf/ggml_reference.py's random_blocks: random bits, random finite float16 scales) into
one GGUF file (tests/gguf/gguf_writer.py), reads each tensor back through mha (the test tool
gguf_dump, built with the tests: build/bin/gguf_dump) and dequantizes the same bytes with
ggml's type traits (ggml_get_type_traits(type)->to_float, through ctypes), and compares the
float32 bit patterns (NaN payloads included). A benchmark-side check, not a test: CI does not
build ggml.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (its PINNED commit)
import ggml_reference  # noqa: E402
import gguf_writer  # noqa: E402

TYPES = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "Q8_K")


class TypeTraits(ctypes.Structure):  # ggml.h's struct ggml_type_traits at the pinned commit
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


def sh(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"dequant_check.py: {' '.join(args)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", type=int, default=65536, help="values per type (a multiple of 256)")
    ap.add_argument("--gguf_dump", default=os.path.join(ROOT, "build", "bin", "gguf_dump"))
    a = ap.parse_args()
    ggml = os.environ.get("GGML_DIR")
    if not ggml:
        sys.exit("dequant_check.py: set GGML_DIR to a checkout of https://github.com/ggml-org/ggml")
    sh(["git", "-C", ggml, "checkout", "-q", compare.PINNED])
    build = os.path.join(ggml, "build-mha-bench")
    sh(["cmake", "-S", ggml, "-B", build, "-DCMAKE_BUILD_TYPE=Release"])
    sh(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target", "ggml-base"])
    lib = ctypes.CDLL(os.path.join(build, "src", "libggml-base.so"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    rng = np.random.default_rng(2026)
    raws = {t: ggml_reference.random_blocks(t, a.values, rng) for t in TYPES}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "blocks.gguf")
        gguf_writer.write(path, [("general.architecture", "string", "none")],
                          [(t, gguf_writer.TYPES[t], [a.values], raws[t]) for t in TYPES])
        for t in TYPES:
            out = os.path.join(tmp, t + ".npy")
            sh([a.gguf_dump, path, t, out])
            mine = np.load(out).reshape(-1).view(np.uint32)
            traits = lib.ggml_get_type_traits(gguf_writer.TYPES[t]).contents
            if not traits.to_float:  # ggml dequantizes some types (Q8_K) only inside its dot products
                print(f"{t:5} ggml's type traits have no to_float: not compared")
                continue
            theirs = np.empty(a.values, np.float32)
            raw = ctypes.create_string_buffer(raws[t], len(raws[t]))
            to_float_t(traits.to_float)(raw, theirs.ctypes.data, a.values)
            differ = int(np.count_nonzero(mine != theirs.view(np.uint32)))
            failures += differ != 0
            print(f"{t:5} {a.values} values: {differ} differ from ggml's {traits.type_name.decode()}")
    print(f"ggml {compare.PINNED}: " + ("all equal, bit for bit" if not failures
                                        else f"{failures} types differ"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
