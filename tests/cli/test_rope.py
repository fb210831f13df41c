#!/usr/bin/python3
"""Rotary position embeddings through the binary against NumPy transcriptions of the published
definitions, not of this tool's code: LLaMA's attention (Hugging Face modeling_llama:
rotate_half, cos/sin of cat(freqs, freqs), grouped-query heads by repeat_kv, causal), GPT-J's
interleaved rotation (rotate_every_two) on a partial rotary dimension, decoding one query at
position_offset, and linear position scaling.

  /usr/bin/python3 tests/cli/test_rope.py   (MHA_BIN = path to mha)
"""
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


def llama_rope(x, pos, theta, dim, interleaved):
    """x (B, heads, L, d): rotates the first `dim` features of each head."""
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    freqs = np.outer(pos, inv_freq)  # (L, dim/2)
    rot, rest = x[..., :dim], x[..., dim:]
    if interleaved:  # GPT-J: pairs (2i, 2i+1), rotate_every_two
        cos, sin = np.repeat(np.cos(freqs), 2, -1), np.repeat(np.sin(freqs), 2, -1)
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = np.stack((-x2, x1), -1).reshape(rot.shape)
    else:  # LLaMA / GPT-NeoX: emb = cat(freqs, freqs), rotate_half
        emb = np.concatenate((freqs, freqs), -1)
        cos, sin = np.cos(emb), np.sin(emb)
        half = dim // 2
        rotated = np.concatenate((-rot[..., half:], rot[..., :half]), -1)
    return np.concatenate((rot * cos + rotated * sin, rest), -1)


def rms_norm(x, g, eps):
    """Qwen3RMSNorm over each head's features: x / sqrt(mean(x^2) + eps) * g."""
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def llama_attention(x, kv, w, h, kv_heads, theta, dim, offset, causal, interleaved, scaling=1.0,
                    qk_norm=None, eps=1e-6):
    B, T, _ = x.shape
    S = kv.shape[1]
    d = w["W_q"].shape[1] // h
    q = (x @ w["W_q"]).reshape(B, T, h, d).transpose(0, 2, 1, 3)
    k = (kv @ w["W_k"]).reshape(B, S, kv_heads, d).transpose(0, 2, 1, 3)
    v = (kv @ w["W_v"]).reshape(B, S, kv_heads, d).transpose(0, 2, 1, 3)
    if qk_norm is not None:  # Qwen3: q_norm, k_norm per head, before the rotary positions
        q, k = rms_norm(q, qk_norm[0], eps), rms_norm(k, qk_norm[1], eps)
    q = llama_rope(q, (np.arange(T) + offset) / scaling, theta, dim, interleaved)
    k = llama_rope(k, np.arange(S) / scaling, theta, dim, interleaved)
    k, v = np.repeat(k, h // kv_heads, 1), np.repeat(v, h // kv_heads, 1)  # repeat_kv
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:  # query t (at offset + t) sees keys s <= offset + t
        logits = np.where(np.arange(S)[None, :] <= (np.arange(T) + offset)[:, None], logits, -np.inf)
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    out = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, h * d) @ w["W_o"]
    return out, a


class Rope(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_rope_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def check(self, name, B, T, S, dm, h, kv_heads, dim, offset, layout, dtype, tol, scaling=1.0):
        rng = np.random.default_rng(len(name))
        ft = np.float64 if dtype == "float64" else np.float32
        d = dm // h
        x = rng.standard_normal((B, T, dm)).astype(ft)
        kv = x if T == S and offset == 0 else rng.standard_normal((B, S, dm)).astype(ft)
        w = {"W_q": rng.uniform(-0.3, 0.3, (dm, h * d)), "W_k": rng.uniform(-0.3, 0.3, (dm, kv_heads * d)),
             "W_v": rng.uniform(-0.3, 0.3, (dm, kv_heads * d)), "W_o": rng.uniform(-0.3, 0.3, (h * d, dm))}
        w = {k: a.astype(ft) for k, a in w.items()}
        np.save(os.path.join(self.dir, "x.npy"), x)
        np.save(os.path.join(self.dir, "kv.npy"), kv)
        np.savez(os.path.join(self.dir, "w.npz"), **w)
        args = [MHA, "run", "--query", os.path.join(self.dir, "x.npy"), "--h", str(h),
                "--weights", os.path.join(self.dir, "w.npz"), "--use_bias", "false",
                "--rope", layout, "--rope_theta", "500000" if layout == "half" else "10000",
                "--rope_dim", str(dim), "--position_offset", str(offset),
                "--rope_scaling", str(scaling), "--causal", "bottom-right" if offset else "true",
                "--dtype", dtype, "--save_attention", "--out_dir", os.path.join(self.dir, name), "-q"]
        if kv is not x:
            args += ["--value", os.path.join(self.dir, "kv.npy")]
        p = subprocess.run(args, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        want, maps = llama_attention(x.astype(np.float64), kv.astype(np.float64),
                                     {k: a.astype(np.float64) for k, a in w.items()}, h, kv_heads,
                                     500000 if layout == "half" else 10000, dim, offset, True,
                                     layout == "interleaved", scaling)
        got = np.load(os.path.join(self.dir, name, "output.npy"))
        got_maps = np.load(os.path.join(self.dir, name, "attention.npy"))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        np.testing.assert_allclose(got_maps, maps, rtol=tol, atol=tol, err_msg=name + " maps")
        # the fused path (no maps) rotates the same way
        fused = [a for a in args if a != "--save_attention"]
        fused[fused.index("--out_dir") + 1] += "_fused"
        p = subprocess.run(fused, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_allclose(np.load(os.path.join(self.dir, name + "_fused", "output.npy")),
                                   want, rtol=tol, atol=tol, err_msg=name + " fused")

    def test_llama_grouped_query_causal(self):
        self.check("llama", B=2, T=9, S=9, dm=64, h=4, kv_heads=2, dim=16, offset=0,
                   layout="half", dtype="float32", tol=1e-5)

    def test_llama_float64(self):
        self.check("llama64", B=1, T=7, S=7, dm=32, h=4, kv_heads=1, dim=8, offset=0,
                   layout="half", dtype="float64", tol=1e-10)

    def test_gptj_partial_interleaved_decoding(self):
        # one query at position 11 over 12 cached keys; 6 of 16 features rotate
        self.check("gptj", B=2, T=1, S=12, dm=64, h=4, kv_heads=4, dim=6, offset=11,
                   layout="interleaved", dtype="float32", tol=1e-5)

    def test_linear_scaling(self):
        self.check("scaled", B=1, T=8, S=8, dm=32, h=2, kv_heads=2, dim=16, offset=0,
                   layout="half", dtype="float32", tol=1e-5, scaling=4.0)

    def test_rope_dim_checked(self):
        p = subprocess.run([MHA, "run", "--h", "2", "--d_model", "16", "--seq_len", "3", "--rope",
                            "half", "--rope_dim", "10", "--out_dir", os.path.join(self.dir, "x")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("rope_dim: 10 must be even and at most d_k = 8", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
