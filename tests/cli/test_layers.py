#!/usr/bin/python3
"""Transformer layer runs end to end (docs/layers.md): the bundled encoder config, a decoder's
files, weights convert between native and PyTorch names (exact, and a run from either gives the
same bytes), the same bytes for any thread count, inspect and plot on the layer axis, and a
sweep over num_layers and norm_first.

  /usr/bin/python3 tests/cli/test_layers.py [Class]   (MHA_BIN = path to mha,
                                                      MHA_SOURCE_DIR = repository root)
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))


class Layers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_layers_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def mha(self, args, code=0):
        p = subprocess.run([MHA] + args + ["-q"], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
        self.assertEqual(p.returncode, code, f"mha {' '.join(args)}: {p.stderr}")
        return p

    def read(self, *p):
        with open(self.path(*p), "rb") as f:
            return f.read()

    def test_bundled_encoder_config(self):
        self.mha(["run", "--config", "configs/encoder.json", "--out_dir", self.path("enc")])
        with open(self.path("enc", "run.json")) as f:
            r = json.load(f)
        self.assertEqual((r["config"]["layer"], r["config"]["num_layers"], r["config"]["d_ff"]),
                         ("encoder", 2, 256))
        maps = np.load(self.path("enc", "self_attention.npy"))
        self.assertEqual(maps.shape, (2, 3, 4, 8, 8))
        # key_lengths [8, 5, 3]: batch 2 attends to its first 3 keys only, in every layer
        self.assertEqual(float(maps[:, 2, :, :, 3:].max()), 0.0)
        np.testing.assert_allclose(maps.sum(-1), 1, atol=1e-5)
        hidden = np.load(self.path("enc", "hidden_states.npy"))
        out = np.load(self.path("enc", "output.npy"))
        self.assertEqual(hidden.shape, (2, 3, 8, 64))
        self.assertTrue(np.array_equal(hidden[-1], out))  # post-norm, no final norm
        # post-norm: every output row is normalized (gamma 1, beta 0)
        np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
        np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)
        self.assertEqual(len(r["layer_stats"]), 2)
        self.assertEqual(r["layer_stats"][0]["self_attention"]["mean"]["rows"], 3 * 4 * 8)

    def test_decoder_convert_and_threads(self):
        args = ["run", "--layer", "decoder", "--h", "4", "--d_model", "16", "--seq_len", "5",
                "--kv_seq_len", "7", "--num_layers", "2", "--norm_first", "--final_norm",
                "--activation", "gelu", "--memory_key_lengths", "7,3", "--batch", "2",
                "--save_attention", "--save_weights", "--save_inputs"]
        self.mha(args + ["--out_dir", self.path("a"), "--threads", "1"])
        self.mha(args + ["--out_dir", self.path("b"), "--threads", "2"])
        for f in ("output.npy", "self_attention.npy", "cross_attention.npy"):
            self.assertEqual(self.read("a", f), self.read("b", f), f + " differs by threads")
        cross = np.load(self.path("a", "cross_attention.npy"))
        self.assertEqual(cross.shape, (2, 2, 4, 5, 7))
        self.assertEqual(float(cross[:, 1, :, :, 3:].max()), 0.0)  # memory_key_lengths
        self_maps = np.load(self.path("a", "self_attention.npy"))
        self.assertEqual(float(np.triu(self_maps[0, 0, 0], 1).max()), 0.0)  # causal by default
        # native -> torch -> native is exact; a run from the torch file gives the same bytes
        self.mha(["weights", "convert", self.path("a", "weights.npz"), "--to", "torch", "-o",
                  self.path("t.npz")])
        self.mha(["weights", "convert", self.path("t.npz"), "--to", "native", "-o",
                  self.path("n.npz")])
        a, n, t = (np.load(self.path(p)) for p in ("a/weights.npz", "n.npz", "t.npz"))
        self.assertEqual(sorted(a.files), sorted(n.files))
        for k in a.files:
            self.assertTrue(np.array_equal(a[k], n[k]), k)
        self.assertIn("layers.1.multihead_attn.in_proj_weight", t.files)
        self.assertIn("norm.weight", t.files)
        self.mha(["run", "--layer", "decoder", "--h", "4", "--query", self.path("a", "query.npy"),
                  "--memory", self.path("a", "memory.npy"), "--weights", self.path("t.npz"),
                  "--activation", "gelu", "--norm_first", "--memory_key_lengths", "7,3",
                  "--save_attention", "--out_dir", self.path("c")])  # the same (exact) path
        self.assertEqual(self.read("a", "output.npy"), self.read("c", "output.npy"))

    def test_pieces_give_the_same_bytes_for_any_thread_count(self):
        # large enough that every GEMM runs in pieces (the FFN's first one by columns)
        args = ["run", "--layer", "decoder", "--h", "4", "--d_model", "64", "--seq_len", "40",
                "--kv_seq_len", "33", "--d_ff", "256", "--num_layers", "2", "--batch", "2"]
        for threads in ("1", "2", "3"):
            self.mha(args + ["--threads", threads, "--out_dir", self.path("t" + threads)])
        self.assertEqual(self.read("t1", "output.npy"), self.read("t2", "output.npy"))
        self.assertEqual(self.read("t1", "output.npy"), self.read("t3", "output.npy"))

    def test_inspect_plot_and_sweep(self):
        self.mha(["run", "--layer", "encoder", "--h", "2", "--d_model", "8", "--seq_len", "4",
                  "--num_layers", "3", "--save_attention", "--out_dir", self.path("e")])
        maps = self.path("e", "self_attention.npy")
        j = json.loads(self.mha(["inspect", "--json", maps]).stdout)
        self.assertEqual(j["attention"]["heads_axis"], 2)
        self.assertEqual(len(j["attention"]["heads"]), 2)
        self.mha(["plot", maps, "--layer_index", "2", "-o", self.path("l2.png")])
        self.assertEqual(self.read("l2.png")[:4], b"\x89PNG")
        p = self.mha(["plot", maps, "-o", self.path("x.png")], code=2)
        self.assertIn("choose one with --layer_index", p.stderr)
        p = self.mha(["plot", maps, "--layer_index", "3", "-o", self.path("x.png")], code=2)
        self.assertIn("holds 3 layers", p.stderr)
        sweep = self.path("s.json")
        with open(sweep, "w") as f:
            json.dump({"base": {"layer": "encoder", "h": 2, "d_model": 8, "seq_len": 4},
                       "grid": {"num_layers": [1, 2], "norm_first": [False, True]}}, f)
        self.mha(["sweep", sweep, "--out_dir", self.path("sw")])
        with open(self.path("sw", "results.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([(r["num_layers"], r["norm_first"], r["status"]) for r in rows],
                         [(1, False, "ok"), (1, True, "ok"), (2, False, "ok"), (2, True, "ok")])
        self.assertEqual(len({r["output_crc32"] for r in rows}), 4)


def numpy_tutorial_encoder(x, w, h, lengths, eps=1e-6):
    """The Keras tutorials' EncoderLayer, transcribed: MHA (softmax(QK^T/sqrt(depth) + mask)V,
    heads split from Dense(d_model) projections), Add & LayerNormalization(eps), then
    Dense(dff, relu), Dense(d_model), Add & LayerNormalization(eps); inference, no dropout."""
    B, T, d = x.shape
    depth = d // h
    def dense(v, W, b):
        return v @ W + b
    def norm(v, g, b):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + eps) * g + b
    def split(v):  # (B, T, d) -> (B, h, T, depth)
        return v.reshape(B, T, h, depth).transpose(0, 2, 1, 3)
    L = "layers.0."
    q = split(dense(x, w[L + "self_attn.W_q"], w[L + "self_attn.b_q"]))
    k = split(dense(x, w[L + "self_attn.W_k"], w[L + "self_attn.b_k"]))
    v = split(dense(x, w[L + "self_attn.W_v"], w[L + "self_attn.b_v"]))
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(depth)
    pad = np.arange(T)[None, :] >= np.asarray(lengths)[:, None]  # (B, S): 1 = padding
    logits = logits + pad[:, None, None, :] * -1e9  # the tutorial's mask * -1e9
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
    attn = dense(ctx, w[L + "self_attn.W_o"], w[L + "self_attn.b_o"])
    out1 = norm(x + attn, w[L + "norm1.gamma"], w[L + "norm1.beta"])
    ffn = dense(np.maximum(dense(out1, w[L + "ffn.W_1"], w[L + "ffn.b_1"]), 0),
                w[L + "ffn.W_2"], w[L + "ffn.b_2"])
    return norm(out1 + ffn, w[L + "norm2.gamma"], w[L + "norm2.beta"])


class KerasTutorial(unittest.TestCase):
    def test_tutorial_encoder_layer_against_numpy(self):
        d = tempfile.mkdtemp(prefix="mha_layers_tut_")
        try:
            rng = np.random.default_rng(5)
            B, T, dm, h, dff = 3, 6, 32, 4, 64
            x = rng.standard_normal((B, T, dm))
            np.save(os.path.join(d, "x.npy"), x)
            w = {}
            L = "layers.0."
            for n in ("W_q", "W_k", "W_v", "W_o"):
                w[L + "self_attn." + n] = rng.uniform(-0.3, 0.3, (dm, dm))
            for n in ("b_q", "b_k", "b_v", "b_o"):
                w[L + "self_attn." + n] = rng.uniform(-0.1, 0.1, dm)
            w[L + "ffn.W_1"], w[L + "ffn.b_1"] = rng.uniform(-0.3, 0.3, (dm, dff)), rng.uniform(-0.1, 0.1, dff)
            w[L + "ffn.W_2"], w[L + "ffn.b_2"] = rng.uniform(-0.3, 0.3, (dff, dm)), rng.uniform(-0.1, 0.1, dm)
            for n in ("norm1", "norm2"):
                w[L + n + ".gamma"], w[L + n + ".beta"] = rng.uniform(0.5, 1.5, dm), rng.uniform(-0.2, 0.2, dm)
            np.savez(os.path.join(d, "w.npz"), **w)
            lengths = [6, 4, 2]
            p = subprocess.run([MHA, "run", "--layer", "encoder", "--h", str(h), "--query",
                                os.path.join(d, "x.npy"), "--weights", os.path.join(d, "w.npz"),
                                "--layer_norm_eps", "1e-6", "--key_lengths", "6,4,2",
                                "--dtype", "float64", "--out_dir", os.path.join(d, "o"), "-q"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = np.load(os.path.join(d, "o", "output.npy"))
            want = numpy_tutorial_encoder(x, w, h, lengths)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
