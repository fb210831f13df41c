#!/usr/bin/python3
"""`mha run --model --save_qk` (docs/models.md, the view's neuron view): q.npy and k.npy against
the queries and keys the float64 PyTorch references of reference.py attend with (after QK-norm
and RoPE, k repeated over each key group), on the random checkpoints of every model_type, and the
rule run.json's "attention" states (scale, soft-cap, causal, windows), applied here in NumPy to
q.npy and k.npy, giving self_attention.npy: softmax(scale q . k) over the keys the mask keeps.

  MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_qk.py [CLASS]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import reference  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


def neuron_weights(q, k, rule, lengths):
    """The weights run.json's rule gives: q, k (layers, B, heads, T, d) -> (layers, B, heads, T, T)."""
    L, B, H, T, _ = q.shape
    logits = rule["scale"] * np.einsum("lbhtd,lbhsd->lbhts", q.astype(np.float64), k.astype(np.float64))
    if rule["softcap"] > 0:
        logits = rule["softcap"] * np.tanh(logits / rule["softcap"])
    t, s = np.arange(T)[:, None], np.arange(T)[None, :]
    out = np.zeros_like(logits)
    for li in range(L):
        w = rule["windows"][li]
        for b in range(B):
            keep = s < lengths[b]
            if rule["causal"]:
                keep = keep & (s <= t)
            if w:
                keep = keep & ((t - s < w) if rule["causal"] else (np.abs(t - s) < w))
            x = np.where(keep, logits[li, b], -np.inf)
            x = np.exp(x - x.max(-1, keepdims=True))
            out[li, b] = x / x.sum(-1, keepdims=True)
    return out


class QkTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_qk_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def run_mha(self, *args, code=0):
        p = subprocess.run([MHA, "run", "-q"] + list(args), capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(p.returncode, code, p.stderr)
        return p


class Families(QkTest):
    def check(self, family, layers=None, heads=None, **sizes):
        config, t = checkpoints.make(family, seed=2, **sizes)
        d = self.path(family)
        sd = checkpoints.write(d, config, t)
        ids = np.random.default_rng(3).integers(0, config["vocab_size"], (2, 11))
        np.save(self.path("ids.npy"), ids)
        out = self.path("out_" + family)
        extra = (["--layer_indices", ",".join(map(str, layers))] if layers else []) + \
            (["--head_indices", ",".join(map(str, heads))] if heads else [])
        self.run_mha("--model", d, "--tokens", self.path("ids.npy"), "--save_attention",
                     "--save_qk", "--out_dir", out, *extra)
        run = json.load(open(os.path.join(out, "run.json")))
        self.assertIn("q.npy", run["outputs"])
        self.assertIn("k.npy", run["outputs"])
        rule = run["attention"]
        L = len(rule["layers"])
        q, k = np.load(os.path.join(out, "q.npy")), np.load(os.path.join(out, "k.npy"))
        maps = np.load(os.path.join(out, "self_attention.npy"))
        self.assertEqual(q.dtype, np.float32)
        self.assertEqual(q.shape, k.shape)
        self.assertEqual(q.shape[:4], maps.shape[:4])
        # Against the reference's queries and keys, layer by layer, head by head.
        ref = reference.forward(config, sd, ids, record_qk=True)
        rq = np.stack([ref["q"][li] for li in rule["layers"]])[:, :, rule["heads"]]
        rk = np.stack([ref["k"][li] for li in rule["layers"]])[:, :, rule["heads"]]
        scale = max(1.0, float(np.abs(rq).max()), float(np.abs(rk).max()))
        np.testing.assert_allclose(q, rq, rtol=1e-5, atol=1e-5 * scale, err_msg=family + " q")
        np.testing.assert_allclose(k, rk, rtol=1e-5, atol=1e-5 * scale, err_msg=family + " k")
        # The stated rule on q.npy and k.npy gives the maps written.
        np.testing.assert_allclose(neuron_weights(q, k, rule, [ids.shape[1]] * 2), maps,
                                   rtol=1e-5, atol=1e-5, err_msg=family + " weights")
        self.assertEqual(L, q.shape[0])
        return rule

    def test_every_model_type(self):
        for family in checkpoints.FAMILIES:
            with self.subTest(family=family):
                self.check(family)

    def test_chosen_layers_and_heads_of_grouped_queries(self):
        # llama's defaults group the query heads over fewer key heads: heads 1 and 3 read
        # different groups' keys.
        config, _ = checkpoints.make("llama")
        self.assertLess(config["num_key_value_heads"], config["num_attention_heads"])
        rule = self.check("llama", layers=[1], heads=[1, 3])
        self.assertEqual((rule["layers"], rule["heads"]), ([1], [1, 3]))

    def test_soft_caps_and_windows(self):
        rule = self.check("gemma2")
        self.assertGreater(rule["softcap"], 0)
        self.assertTrue(any(rule["windows"]) and not all(rule["windows"]))
        self.assertNotAlmostEqual(rule["scale"], 1 / np.sqrt(16))

    def test_key_padding_of_a_batch_of_texts(self):
        texts = ["the cat sat on the mat", "a dog"]
        tok_json, _, vocab = tokenizer_files.byte_level_bpe(texts, merges=20)
        config, t = checkpoints.make("gpt2", seed=1, vocab=vocab)
        d = self.path("gpt2")
        checkpoints.write(d, config, t)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok_json, f)
        out = self.path("out")
        self.run_mha("--model", d, "--text", texts[0], "--text", texts[1], "--save_attention",
                     "--save_qk", "--out_dir", out)
        run = json.load(open(os.path.join(out, "run.json")))
        lengths = run["input"]["lengths"]
        self.assertLess(lengths[1], lengths[0])
        q, k = np.load(os.path.join(out, "q.npy")), np.load(os.path.join(out, "k.npy"))
        maps = np.load(os.path.join(out, "self_attention.npy"))
        np.testing.assert_allclose(neuron_weights(q, k, run["attention"], lengths), maps,
                                   rtol=1e-5, atol=1e-5)


class Errors(QkTest):
    def test_save_qk_turns_the_maps_on(self):
        config, t = checkpoints.make("gpt2")
        d = self.path("gpt2")
        checkpoints.write(d, config, t)
        np.save(self.path("ids.npy"), np.arange(5))
        out = self.path("out")
        self.run_mha("--model", d, "--tokens", self.path("ids.npy"), "--save_qk", "--out_dir", out)
        maps = np.load(os.path.join(out, "self_attention.npy"))
        q = np.load(os.path.join(out, "q.npy"))
        self.assertEqual(maps.shape[:3], q.shape[:3])  # (layers, B, heads) of the maps written
        self.assertEqual(q.shape[3], 5)
        # The same maps as --save_attention gives them.
        both = self.path("both")
        self.run_mha("--model", d, "--tokens", self.path("ids.npy"), "--save_qk", "--save_attention",
                     "--out_dir", both)
        np.testing.assert_array_equal(np.load(os.path.join(both, "self_attention.npy")), maps)
        # An attention layer's run has no --save_qk: a model's option.
        out = self.path("layer_out")
        p = self.run_mha("--h", "2", "--d_model", "8", "--seq_len", "4", "--save_qk",
                         "--out_dir", out, code=2)
        self.assertIn("--save_qk: an option of whole-model runs", p.stderr)
        self.assertIn("give --model DIR", p.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *sys.argv[1:]], verbosity=2)
