#!/usr/bin/python3
"""Weights from .safetensors (mha/io/safetensors.hpp), written here by a few lines that follow
the format's specification (not by this tool): a run from F32 safetensors gives the same bytes as
from .npz; F16 and BF16 tensors read exactly (bit patterns against NumPy's conversions);
`weights convert` writes the format and reads it back exactly; inspect lists its tensors.

  /usr/bin/python3 tests/cli/test_safetensors.py   (MHA_BIN = path to mha)
"""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        if dtype == "BF16":  # the upper half of float32's bits (truncation, as torch stores)
            raw = (a.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = a.astype({"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Safetensors(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_safetensors_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def mha(self, args, code=0):
        p = subprocess.run([MHA] + args + ["-q"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, code, p.stderr)
        return p

    def test_run_and_convert(self):
        self.mha(["run", "--h", "4", "--d_model", "16", "--seq_len", "6", "--save_weights",
                  "--save_inputs", "--out_dir", self.path("ref")])
        w = dict(np.load(self.path("ref", "weights.npz")))
        write_safetensors(self.path("w.safetensors"), w)
        self.mha(["run", "--h", "4", "--query", self.path("ref", "query.npy"), "--weights",
                  self.path("w.safetensors"), "--out_dir", self.path("st")])
        with open(self.path("ref", "output.npy"), "rb") as a, open(self.path("st", "output.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # convert writes safetensors (torch names), and reads them back exactly
        self.mha(["weights", "convert", self.path("w.safetensors"), "--to", "torch", "-o",
                  self.path("t.safetensors")])
        self.mha(["weights", "convert", self.path("t.safetensors"), "--to", "native", "-o",
                  self.path("n.npz")])
        n = np.load(self.path("n.npz"))
        for k in w:
            self.assertTrue(np.array_equal(n[k], w[k]), k)
        j = json.loads(self.mha(["inspect", "--json", self.path("t.safetensors")]).stdout)
        self.assertEqual(sorted(r["file"].split(":")[-1] for r in j),
                         ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"])

    def test_half_and_bfloat16_read_exactly(self):
        rng = np.random.default_rng(0)
        w = {n: rng.standard_normal((8, 8)).astype(np.float32) for n in ("W_q", "W_k", "W_v", "W_o")}
        for dtype in ("F16", "BF16"):
            write_safetensors(self.path(dtype + ".safetensors"), w, dtype)
            self.mha(["weights", "convert", self.path(dtype + ".safetensors"), "--to", "native",
                      "--from", "native", "-o", self.path(dtype + ".npz")])
            got = np.load(self.path(dtype + ".npz"))
            for name, a in w.items():
                if dtype == "F16":
                    want = a.astype(np.float16)
                    self.assertEqual(got[name].dtype, np.float16)
                    self.assertTrue(np.array_equal(got[name].view(np.uint16), want.view(np.uint16)))
                else:
                    want = ((a.view(np.uint32) >> 16) << 16).view(np.float32)
                    self.assertEqual(got[name].dtype, np.float32)
                    self.assertTrue(np.array_equal(got[name].view(np.uint32), want.view(np.uint32)))

if __name__ == "__main__":
    unittest.main(verbosity=2)
