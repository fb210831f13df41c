#!/usr/bin/python3
"""Encoder-decoder checkpoints (T5 v1.0 and v1.1, BART), teacher-forced: `mha run --model DIR
--text SOURCE --target_text TARGET` (or --tokens / --target_tokens), held against the float64
PyTorch references of reference.seq2seq (written from modeling_t5.py and modeling_bart.py, the
relative position buckets computed there as transformers computes them) on the random
checkpoints of checkpoints.py, float32 and bfloat16 files, and the refusals.

What is held:
- encoder_attention.npy (L_enc, B, h, S, S), decoder_attention.npy (L_dec, B, h, T, T),
  cross_attention.npy (L_dec, B, h, T, S) with --save_attention; output.npy (B, T, d_model) the
  decoder's final hidden states; encoder_hidden_states.npy (L_enc + 1, B, S, d_model) and
  decoder_hidden_states.npy (L_dec + 1, B, T, d_model) with --save_hidden_states, as
  output_hidden_states; all at rtol = atol = 1e-5;
- the decoder reads the target's ids shifted right after decoder_start_token_id;
- run.json "top_k": the LM head's most likely tokens at each row's last target position (T5's
  d_model**-0.5 when tied, BART's final_logits_bias);
- tokens.json: the source at the top level, "target" the decoder's inputs and "labels";
- --layer_indices / --head_indices select in both stacks;
- refusals (exit 2, one line, nothing written): a target for a model that is not an
  encoder-decoder, an encoder-decoder without one, mismatched batches, --save_qk, hostile config
  keys.

  /usr/bin/python3 tests/models/test_seq2seq.py [Group]   (MHA_BIN = path to mha)
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
sys.path.insert(0, os.path.join(HERE, "..", "tokenizer"))
import checkpoints  # noqa: E402
import reference  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
TOL = dict(rtol=1e-5, atol=1e-5)
MAPS = (("encoder_attention.npy", "encoder_attentions"), ("decoder_attention.npy", "decoder_attentions"),
        ("cross_attention.npy", "cross_attentions"))
VARIANTS = {"t5": ("t5", {}), "t5_v1_1": ("t5", dict(gated=True, tied=False)),
            "t5_default_buckets": ("t5", dict(buckets=32, max_distance=128, gated=True, tied=False)),
            "bart": ("bart", {}), "bart_unscaled": ("bart", dict(scale_embedding=False))}


class Seq2SeqTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha-seq2seq-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def checkpoint(self, name, family, dtype="F32", **kw):
        config, t = checkpoints.make(family, **kw)
        d = self.path(name)
        return d, dict(config, torch_dtype=checkpoints.TORCH_DTYPE[dtype]), checkpoints.write(d, config, t, dtype)

    def t5_with_tokenizer(self):
        """A T5 checkpoint with make_unigram.py's T5-layout Unigram tokenizer.json (32000 pieces)."""
        import make_unigram
        tok = make_unigram.tokenizers(os.path.join(HERE, "..", "tokenizer", "node_modules"))["unigram"][0]
        d, config, sd = self.checkpoint("t5", "t5", vocab=32000)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        return d, config, sd

    def ids(self, config, name, B, T, seed):
        a = np.random.default_rng(seed).integers(3, config["vocab_size"], (B, T)).astype(np.int64)
        p = self.path(name)
        np.save(p, a)
        return a, p

    def mha(self, *args, code=0):
        full = [MHA, "run", "-q"] + list(args)
        p = subprocess.run(full, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, code, f"{' '.join(full)}\nstderr: {p.stderr}")
        return p

    def load(self, out, name):
        a = np.load(os.path.join(out, name))
        self.assertEqual(a.dtype, np.float32, name)
        return a

    def read_json(self, out, name):
        with open(os.path.join(out, name)) as f:
            return json.load(f)

    def check_maps(self, out, ref, layers=None, heads=None):
        for name, key in MAPS:
            want = np.stack(ref[key])
            if layers is not None:
                want = want[[l for l in layers if l < want.shape[0]]]
            if heads is not None:
                want = want[:, :, heads]
            got = self.load(out, name)
            self.assertEqual(got.shape, want.shape, name)
            np.testing.assert_allclose(got, want, err_msg=name, **TOL)

    def check_top_k(self, out, ref, lengths, k=5):
        got = self.read_json(out, "run.json")["top_k"]
        want = reference.top_k(ref["logits"], lengths, k)
        for b, (g, w) in enumerate(zip(got, want)):
            z = np.sort(np.asarray(ref["logits"][b, lengths[b] - 1], np.float64))[::-1][:k + 1]
            self.assertGreater(np.diff(-z).min(), 1e-4, "near-tie in the reference's top k + 1")
            self.assertEqual([e["id"] for e in g], [i for i, _ in w], f"batch {b}: {g}")
            np.testing.assert_allclose([e["p"] for e in g], [p for _, p in w], **TOL)


class Families(Seq2SeqTest):
    def check(self, variant, dtype):
        family, kw = VARIANTS[variant]
        d, config, sd = self.checkpoint(variant, family, dtype, **kw)
        S, T = (40, 37) if "default_buckets" in variant else (15, 13)
        src, src_path = self.ids(config, "src.npy", 2, S, 3)
        labels, lab_path = self.ids(config, "labels.npy", 2, T, 4)
        out = self.path("out")
        self.mha("--model", d, "--tokens", src_path, "--target_tokens", lab_path, "--out_dir", out,
                 "--save_attention")
        ref = reference.seq2seq(config, sd, src, labels)
        self.check_maps(out, ref)
        np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)
        self.check_top_k(out, ref, [T, T])
        tokens = self.read_json(out, "tokens.json")
        self.assertEqual(tokens["ids"], src.tolist())
        self.assertEqual(tokens["target"]["ids"], ref["decoder_input_ids"].tolist())
        self.assertEqual(tokens["target"]["labels"], labels.tolist())
        run = self.read_json(out, "run.json")
        self.assertEqual(run["outputs"].keys(), {"tokens.json", "output.npy", "encoder_attention.npy",
                                                 "decoder_attention.npy", "cross_attention.npy"})
        self.assertEqual(run["target"]["decoder_start_token_id"], config["decoder_start_token_id"])
        self.assertEqual(sorted(os.listdir(out)), sorted(list(run["outputs"]) + ["run.json"]))

    def test_t5_v1_0_relu_tied(self):
        self.check("t5", "F32")
        self.check("t5", "BF16")

    def test_t5_v1_1_gated_gelu_untied(self):
        self.check("t5_v1_1", "F32")
        self.check("t5_v1_1", "BF16")

    def test_t5_default_buckets_long_sequences(self):  # 32 buckets, 128: the logarithmic ones
        self.check("t5_default_buckets", "F32")

    def test_bart(self):
        self.check("bart", "F32")
        self.check("bart", "BF16")
        self.check("bart_unscaled", "F32")

    def test_hidden_states(self):
        """--save_hidden_states: each stack's output_hidden_states (the embeddings, each layer's
        input, the output after the final norm), T5 v1.0 and v1.1 and BART."""
        for variant in ("t5", "t5_v1_1", "bart"):
            with self.subTest(variant=variant):
                family, kw = VARIANTS[variant]
                d, config, sd = self.checkpoint(variant, family, "F32", **kw)
                src, src_path = self.ids(config, "src.npy", 2, 11, 5)
                labels, lab_path = self.ids(config, "labels.npy", 2, 9, 6)
                out = self.path("out_" + variant)
                self.mha("--model", d, "--tokens", src_path, "--target_tokens", lab_path, "--out_dir", out,
                         "--save_hidden_states")
                ref = reference.seq2seq(config, sd, src, labels)
                t5 = family == "t5"
                layers = {"encoder": config["num_layers" if t5 else "encoder_layers"],
                          "decoder": config["num_decoder_layers" if t5 else "decoder_layers"]}
                for stack, L in (("encoder", 11), ("decoder", 9)):
                    want = np.stack(ref[stack + "_hidden_states"])
                    got = self.load(out, stack + "_hidden_states.npy")
                    self.assertEqual(got.shape, (layers[stack] + 1, 2, L, config["d_model"]), stack)
                    self.assertEqual(want.shape, got.shape, stack)
                    np.testing.assert_allclose(got, want, err_msg=stack, **TOL)
                    if os.environ.get("MHA_PRINT_DIFF"):
                        print(variant, stack, float(np.abs(got - want).max()), file=sys.stderr)
                np.testing.assert_array_equal(self.load(out, "decoder_hidden_states.npy")[-1],
                                              self.load(out, "output.npy"))
                run = self.read_json(out, "run.json")
                self.assertEqual(run["outputs"].keys(), {"tokens.json", "output.npy", "encoder_hidden_states.npy",
                                                         "decoder_hidden_states.npy"})
                self.assertEqual(sorted(os.listdir(out)), sorted(list(run["outputs"]) + ["run.json"]))

    def test_selection_in_both_stacks(self):
        d, config, sd = self.checkpoint("t5", "t5")
        src, src_path = self.ids(config, "src.npy", 2, 9, 3)
        labels, lab_path = self.ids(config, "labels.npy", 2, 7, 4)
        out = self.path("out")
        self.mha("--model", d, "--tokens", src_path, "--target_tokens", lab_path, "--out_dir", out,
                 "--save_attention", "--layer_indices", "1", "--head_indices", "0,3", "--top_k", "0")
        self.check_maps(out, reference.seq2seq(config, sd, src, labels), layers=[1], heads=[0, 3])
        self.assertNotIn("top_k", self.read_json(out, "run.json"))

    def test_the_decoder_start_token(self):  # BART's from config.json: another start, other maps
        d, config, sd = self.checkpoint("bart", "bart", decoder_start_token_id=7)
        src, src_path = self.ids(config, "src.npy", 1, 8, 3)
        labels, lab_path = self.ids(config, "labels.npy", 1, 6, 4)
        out = self.path("out")
        self.mha("--model", d, "--tokens", src_path, "--target_tokens", lab_path, "--out_dir", out)
        ref = reference.seq2seq(config, sd, src, labels)
        self.assertEqual(ref["decoder_input_ids"][0, 0], 7)
        np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)


class Text(Seq2SeqTest):
    """From text: T5's Unigram tokenizer (make_unigram.py's T5 layout), a batch of two sources and
    two targets of different lengths, right-padded and masked in every attention."""

    def test_t5_unigram_batch(self):
        d, config, sd = self.t5_with_tokenizer()
        sources = ["Translate English to German: the house is wonderful.", "Hello there"]
        targets = ["Das Haus ist wunderbar.", "Hallo zusammen, wie geht es?"]
        out = self.path("out")
        args = ["--model", d, "--out_dir", out, "--save_attention"]
        for s, t in zip(sources, targets):
            args += ["--text", s, "--target_text", t]
        self.mha(*args)
        tokens = self.read_json(out, "tokens.json")
        S, T = tokens["padded_length"], tokens["target"]["padded_length"]
        src_len, tgt_len = tokens["lengths"], tokens["target"]["lengths"]
        self.assertNotEqual(src_len[0], src_len[1])
        self.assertNotEqual(tgt_len[0], tgt_len[1])
        for row in tokens["ids"] + tokens["target"]["labels"]:
            self.assertEqual(row[-1], 2)  # "$A </s>"
        src = np.zeros((2, S), np.int64)
        labels = np.zeros((2, T), np.int64)
        for b in range(2):
            src[b, :src_len[b]] = tokens["ids"][b]
            labels[b, :tgt_len[b]] = tokens["target"]["labels"][b]
        ref = reference.seq2seq(config, sd, src, labels, src_len, tgt_len)
        self.assertEqual(tokens["target"]["ids"][1], ref["decoder_input_ids"][1, :tgt_len[1]].tolist())
        self.check_maps(out, ref)
        np.testing.assert_allclose(self.load(out, "output.npy"), ref["output"], **TOL)
        self.check_top_k(out, ref, tgt_len)
        self.assertEqual(tokens["target"]["tokens"][0][0], "<unk>")  # decoder_start_token_id 0
        self.assertEqual(tokens["tokens"][0][-1], "</s>")


class Python(Seq2SeqTest):
    """mha.Model(dir)(input, target=...) returns what the CLI writes, bit for bit."""

    def test_equals_cli(self):
        import mha
        for variant in ("t5_v1_1", "bart"):
            family, kw = VARIANTS[variant]
            d, config, _ = self.checkpoint(variant, family, **kw)
            src, src_path = self.ids(config, "src.npy", 2, 9, 3)
            labels, lab_path = self.ids(config, "labels.npy", 2, 7, 4)
            out = self.path("out_" + variant)
            self.mha("--model", d, "--tokens", src_path, "--target_tokens", lab_path, "--out_dir", out,
                     "--save_attention", "--head_indices", "1,2", "--save_hidden_states")
            r = mha.Model(d)(src, target=labels, head_indices=[1, 2], hidden_states=True)
            for name in ("encoder_attention", "decoder_attention", "cross_attention", "output",
                         "encoder_hidden_states", "decoder_hidden_states"):
                np.testing.assert_array_equal(r[name], self.load(out, name + ".npy"), err_msg=name)
            tokens = self.read_json(out, "tokens.json")
            self.assertEqual(r["ids"].tolist(), tokens["ids"])
            self.assertEqual(r["target"]["ids"].tolist(), tokens["target"]["ids"])
            self.assertEqual(r["target"]["labels"].tolist(), labels.tolist())
            top = self.read_json(out, "run.json")["top_k"]
            self.assertEqual([[i for i, _, _ in row] for row in r["top_k"]], [[e["id"] for e in row] for row in top])
            self.assertIsNone(r["attention"])
            self.assertIsNone(r["hidden_states"])
            plain = mha.Model(d)(src, target=labels, attention=False)
            self.assertIsNone(plain["encoder_hidden_states"])
            self.assertIsNone(plain["decoder_hidden_states"])

    def test_analyses_equal_cli(self):
        """Model.loss, rollout, attention_norms and ablation with labels= (the target) return the
        bits `mha analyze --target_tokens` writes."""
        import mha
        for variant in ("t5_v1_1", "bart"):
            family, kw = VARIANTS[variant]
            d, config, _ = self.checkpoint(variant, family, **kw)
            src, src_path = self.ids(config, "src.npy", 2, 9, 3)
            labels, lab_path = self.ids(config, "labels.npy", 2, 7, 4)
            out = self.path("analysis_" + variant)
            p = subprocess.run([MHA, "analyze", "-q", "--model", d, "--tokens", src_path, "--target_tokens",
                                lab_path, "--out_dir", out, "--head_indices", "1,2", "--method", "loss",
                                "--method", "rollout", "--method", "norms", "--method", "ablation",
                                "--ablation", "mean"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            m = mha.Model(d)
            got = {"loss": m.loss(src, labels=labels)["loss"]}
            for kind, a in m.rollout(src, labels=labels).items():
                got[kind + "_rollout"] = a
            for kind, a in m.attention_norms(src, labels=labels, head_indices=[1, 2]).items():
                got[kind + "_attention_norms"] = a
            ab = m.ablation(src, labels=labels, ablation="mean", head_indices=[1, 2])
            for kind in ("encoder", "decoder", "cross"):
                got[kind + "_ablation"] = ab[kind]
            self.assertEqual(ab["clean"], self.read_json(out, "run.json")["summary"]["ablation"]["clean"])
            self.assertEqual(len(got), 10)
            for name, a in got.items():
                if name != "loss":
                    np.testing.assert_array_equal(a, np.load(os.path.join(out, name + ".npy")), err_msg=name)
            # loss beside the map methods shares their pass, whose attention takes the maps' exact
            # path (docs/analyses.md "In Python"): bit for bit against a loss-only analysis
            np.testing.assert_allclose(got["loss"], np.load(os.path.join(out, "loss.npy")), rtol=1e-5)
            p = subprocess.run([MHA, "analyze", "-q", "--model", d, "--tokens", src_path, "--target_tokens",
                                lab_path, "--out_dir", out + "_loss", "--method", "loss"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            np.testing.assert_array_equal(got["loss"], np.load(os.path.join(out + "_loss", "loss.npy")))

    def test_analysis_refusals(self):
        import mha
        d, _, _ = self.checkpoint("t5", "t5")
        g, _, _ = self.checkpoint("gpt2", "gpt2")
        ids = np.array([[3, 4, 5]])
        t5, gpt2 = mha.Model(d), mha.Model(g)
        for call, words in ((lambda: t5.rollout(ids), "target_text="),
                            (lambda: t5.ablation(ids), "target_text="),
                            (lambda: t5.logit_lens(ids), "not for an encoder-decoder"),
                            (lambda: t5.head_scores(ids), "not for an encoder-decoder"),
                            (lambda: t5.attention_flow(ids), "not for an encoder-decoder"),
                            (lambda: t5.loss(ids, labels=np.array([[3], [4]])), "2 target rows"),
                            (lambda: gpt2.rollout(ids, labels=ids), "not an encoder-decoder")):
            with self.assertRaises(ValueError) as e:
                call()
            self.assertIn(words, str(e.exception))

    def test_one_name_as_the_cli(self):
        """target_text= (the CLI's --target_text) in a call and every analysis, the older target=
        and labels= the same, both at once refused; flow, norms and detectors (--method's names)
        the same functions as attention_flow, attention_norms and head_scores."""
        import mha
        d, config, _ = self.checkpoint("t5", "t5")
        src, _ = self.ids(config, "src.npy", 2, 5, 3)
        tgt, _ = self.ids(config, "tgt.npy", 2, 4, 4)
        m = mha.Model(d)
        np.testing.assert_array_equal(m(src, target_text=tgt)["cross_attention"],
                                      m(src, target=tgt)["cross_attention"])
        np.testing.assert_array_equal(m.loss(src, target_text=tgt)["loss"], m.loss(src, labels=tgt)["loss"])
        for kind, a in m.norms(src, target_text=tgt).items():
            np.testing.assert_array_equal(a, m.attention_norms(src, labels=tgt)[kind])
        for call in (lambda: m(src, target=tgt, target_text=tgt),
                     lambda: m.rollout(src, labels=tgt, target_text=tgt)):
            with self.assertRaises(ValueError) as e:
                call()
            self.assertIn("name the same thing", str(e.exception))
        g, gc, _ = self.checkpoint("gpt2", "gpt2")
        gpt2, ids = mha.Model(g), np.array([[3, 4, 5, 3, 4]])
        np.testing.assert_array_equal(gpt2.flow(ids), gpt2.attention_flow(ids))
        self.assertEqual(gpt2.detectors(ids)["detectors"], gpt2.head_scores(ids)["detectors"])
        np.testing.assert_array_equal(gpt2.detectors(ids)["head_scores"], gpt2.head_scores(ids)["head_scores"])

    def test_refusals(self):
        import mha
        d, config, _ = self.checkpoint("t5", "t5")
        g, _, _ = self.checkpoint("gpt2", "gpt2")
        ids = np.array([[3, 4, 5]])
        for model, kw, words in ((d, {}, "target_text="), (g, dict(target=ids), "not an encoder-decoder"),
                                 (d, dict(target=ids, qk=True), "qk=True"),
                                 (d, dict(target=np.array([[3], [4]])), "2 target rows")):
            with self.subTest(kw=kw):
                with self.assertRaises(ValueError) as e:
                    mha.Model(model)(ids, **kw)
                self.assertIn(words, str(e.exception))


class View(Seq2SeqTest):
    """`mha view OUT` of an encoder-decoder run in headless Chromium: each map set labelled by the
    sides it spans (cross attention: the target's tokens on its queries, the source's on its keys,
    drawn on the right of the token view)."""

    def test_labels_per_map_set(self):
        sys.path.insert(0, os.path.join(HERE, "..", "view"))
        from browser import Browser, require_chromium
        require_chromium(["view.CrossAttention"])
        d, _, _ = self.t5_with_tokenizer()
        out = self.path("out")
        self.mha("--model", d, "--out_dir", out, "--save_attention", "--text", "the house is big",
                 "--target_text", "das Haus")
        tokens = self.read_json(out, "tokens.json")
        source, target = tokens["tokens"][0], tokens["target"]["tokens"][0]
        self.assertNotEqual(len(source), len(target))
        page = self.path("view.html")
        p = subprocess.run([MHA, "view", out, "-o", page, "-q"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        b = Browser(1400, 1000)
        try:
            b.open(page)
            b.wait_for("document.body.dataset.ready === '1'", 30)
            names = b.evaluate("mhaView.data.maps.map((m) => m.name)")
            self.assertEqual(names, ["encoder_attention", "decoder_attention", "cross_attention"])
            want = {"encoder_attention": (source, source), "decoder_attention": (target, target),
                    "cross_attention": (target, source)}
            for i, name in enumerate(names):
                got = b.evaluate(
                    "(() => { mhaView.state.map = %d; mhaView.render();"
                    " const t = (a) => Array.from(document.querySelectorAll('#tokens text[data-' + a + ']'),"
                    " (e) => e.firstChild.textContent);"
                    " return [t('query'), t('key'), document.getElementById('tokens-section').hidden]; })()" % i)
                queries, keys, hidden = got
                self.assertFalse(hidden, name)
                self.assertEqual((queries, keys), want[name], name)
            # the keys of the cross attention on the right of its queries
            right = b.evaluate(
                "(() => { mhaView.state.map = 2; mhaView.render();"
                " const x = (a) => +document.querySelector('#tokens text[data-' + a + ']').getAttribute('x');"
                " return x('key') > x('query'); })()")
            self.assertTrue(right)
            self.assertEqual(b.errors, [])
        finally:
            b.close()


    def test_analysis_page(self):
        """`mha view` of `mha analyze` on an encoder-decoder: the three rollouts and the three kinds
        of norms as maps labelled by their sides, the loss over the target's tokens and the three
        ablation tables."""
        sys.path.insert(0, os.path.join(HERE, "..", "view"))
        from browser import Browser, require_chromium
        require_chromium(["view.CrossAttention"])
        d, _, _ = self.t5_with_tokenizer()
        out = self.path("analysis")
        p = subprocess.run([MHA, "analyze", "-q", "--model", d, "--out_dir", out, "--text", "the house is big",
                            "--target_text", "das Haus", "--method", "loss", "--method", "rollout",
                            "--method", "norms", "--method", "ablation"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        tokens = self.read_json(out, "tokens.json")
        source, target = tokens["tokens"][0], tokens["target"]["tokens"][0]
        page = self.path("view.html")
        p = subprocess.run([MHA, "view", out, "-o", page, "-q"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        b = Browser(1400, 1000)
        try:
            b.open(page)
            b.wait_for("document.body.dataset.ready === '1'", 30)
            names = b.evaluate("mhaView.data.maps.map((m) => m.name)")
            self.assertEqual(names, ["encoder_rollout", "decoder_rollout", "cross_rollout",
                                     "encoder_attention_norms", "decoder_attention_norms",
                                     "cross_attention_norms"])
            for i, name in enumerate(names):
                got = b.evaluate(
                    "(() => { mhaView.state.map = %d; mhaView.render();"
                    " const t = (a) => Array.from(document.querySelectorAll('#tokens text[data-' + a + ']'),"
                    " (e) => e.firstChild.textContent);"
                    " return [t('query'), t('key')]; })()" % i)
                side = {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}
                self.assertEqual(tuple(got), side[name.split("_")[0]], name)
            captions = b.evaluate("Array.from(document.querySelectorAll('#analyses caption'), (c) => c.textContent)")
            self.assertEqual(len(captions), 4, captions)
            self.assertTrue(captions[0].startswith("Loss of each target token"), captions)
            for c, kind in zip(captions[1:], ("encoder self-attention", "decoder self-attention", "cross-attention")):
                self.assertIn("Head ablation, " + kind, c)
            loss_cols = b.evaluate("Array.from(document.querySelectorAll('#analyses table')[0].querySelectorAll('tr')[0]"
                                   ".querySelectorAll('th'), (e) => e.textContent).slice(1)")
            # the loss's columns are the tokens each position predicts: the decoder's next input, then </s>
            self.assertEqual(loss_cols, tokens["target"]["label_tokens"][0])
            self.assertEqual(loss_cols[:-1], target[1:])
            self.assertEqual(loss_cols[-1], "</s>")
            self.assertEqual(b.errors, [])
        finally:
            b.close()


# The output projection of each kind of attention: (name of layer l, heads along axis 1).
W_O = {"t5": {"encoder": "encoder.block.{l}.layer.0.SelfAttention.o.weight",
              "decoder": "decoder.block.{l}.layer.0.SelfAttention.o.weight",
              "cross": "decoder.block.{l}.layer.1.EncDecAttention.o.weight"},
       "bart": {"encoder": "model.encoder.layers.{l}.self_attn.out_proj.weight",
                "decoder": "model.decoder.layers.{l}.self_attn.out_proj.weight",
                "cross": "model.decoder.layers.{l}.encoder_attn.out_proj.weight"}}


def rollouts(ref):
    """The rollouts docs/analyses.md defines, in float64 from the reference's maps: the encoder's
    R_l = Â_l R_(l-1); the decoder's M = [Mt | Ms] from [I | 0], per layer M <- Â_self M, then
    M <- 0.5 M + 0.5 [0 | mean_h(cross) R_enc]."""
    def hat(a):
        m = np.asarray(a, np.float64).mean(1)
        m = 0.5 * m + 0.5 * np.eye(m.shape[-1])
        return m / m.sum(-1, keepdims=True)
    enc, R = [], None
    for a in ref["encoder_attentions"]:
        R = hat(a) if R is None else hat(a) @ R
        enc.append(R)
    B, T = ref["decoder_attentions"][0].shape[0], ref["decoder_attentions"][0].shape[2]
    Mt, Ms = np.broadcast_to(np.eye(T), (B, T, T)), np.zeros((B, T, R.shape[-1]))
    dec, cross = [], []
    for a, x in zip(ref["decoder_attentions"], ref["cross_attentions"]):
        Mt, Ms = hat(a) @ Mt, hat(a) @ Ms
        Mt, Ms = 0.5 * Mt, 0.5 * Ms + 0.5 * np.asarray(x, np.float64).mean(1) @ R
        dec.append(Mt)
        cross.append(Ms)
    return np.stack(enc), np.stack(dec), np.stack(cross)


def target_loss(logits, labels, lengths):
    """(B, T): each label's cross-entropy at its position, NaN past the row's length."""
    z = np.asarray(logits, np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    loss = lse - np.take_along_axis(z, np.asarray(labels)[..., None], -1)[..., 0]
    for b, n in enumerate(lengths):
        loss[b, n:] = np.nan
    return loss


class Analyze(Seq2SeqTest):
    """`mha analyze` on encoder-decoders: loss, rollout (encoder, decoder and cross), value-weighted
    norms of each kind of map, and head ablation of each kind, against the float64 references."""

    def analyze(self, *args, out="analysis", code=0):
        out = self.path(out)
        full = [MHA, "analyze", "-q", "--out_dir", out] + list(args)
        p = subprocess.run(full, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, code, f"{' '.join(full)}\nstderr: {p.stderr}")
        return out, p

    def test_loss_rollout_norms(self):
        for variant, dtype in (("t5_v1_1", "F32"), ("t5_v1_1", "BF16"), ("bart", "F32"), ("bart", "BF16")):
            with self.subTest(variant=variant, dtype=dtype):
                family, kw = VARIANTS[variant]
                d, config, sd = self.checkpoint(variant + dtype, family, dtype, **kw)
                src, src_path = self.ids(config, "src.npy", 2, 11, 3)
                labels, lab_path = self.ids(config, "labels.npy", 2, 8, 4)
                out, _ = self.analyze("--model", d, "--tokens", src_path, "--target_tokens", lab_path,
                                      "--method", "loss", "--method", "rollout", "--method", "norms",
                                      out="out_" + variant + dtype)
                ref = reference.seq2seq(config, sd, src, labels)
                want = target_loss(ref["logits"], labels, [8, 8])
                np.testing.assert_allclose(np.load(os.path.join(out, "loss.npy")), want, **TOL)
                run = self.read_json(out, "run.json")
                self.assertAlmostEqual(run["summary"]["loss"]["mean"], np.nanmean(want), delta=1e-5)
                enc, dec, cross = rollouts(ref)
                for name, w in (("encoder_rollout.npy", enc), ("decoder_rollout.npy", dec),
                                ("cross_rollout.npy", cross)):
                    got = self.load(out, name)
                    self.assertEqual(got.shape, w.shape, name)
                    np.testing.assert_allclose(got, w, err_msg=name, **TOL)
                total = self.load(out, "decoder_rollout.npy").sum(-1) + self.load(out, "cross_rollout.npy").sum(-1)
                np.testing.assert_allclose(total, 1, atol=1e-5)
                for kind in ("encoder", "decoder", "cross"):
                    got = self.load(out, kind + "_attention_norms.npy")
                    want = np.stack(ref[kind + "_norms"])
                    self.assertEqual(got.shape, want.shape, kind)
                    np.testing.assert_allclose(got, want, err_msg=kind, **TOL)
                tokens = self.read_json(out, "tokens.json")
                self.assertEqual(tokens["target"]["labels"], labels.tolist())
                self.assertEqual(sorted(os.listdir(out)), sorted(list(run["outputs"]) + ["run.json"]))

    def test_selected_layers_and_heads(self):
        d, config, sd = self.checkpoint("t5", "t5")
        src, src_path = self.ids(config, "src.npy", 1, 9, 3)
        labels, lab_path = self.ids(config, "labels.npy", 1, 7, 4)
        out, _ = self.analyze("--model", d, "--tokens", src_path, "--target_tokens", lab_path,
                              "--method", "norms", "--layer_indices", "1", "--head_indices", "0,3")
        ref = reference.seq2seq(config, sd, src, labels)
        for kind in ("encoder", "decoder", "cross"):
            want = np.stack(ref[kind + "_norms"])[[1]][:, :, [0, 3]]
            np.testing.assert_allclose(self.load(out, kind + "_attention_norms.npy"), want, err_msg=kind, **TOL)

    def test_padded_batch_from_text(self):
        d, config, sd = self.t5_with_tokenizer()
        out, _ = self.analyze("--model", d, "--text", "the house is wonderful today", "--target_text", "das Haus",
                              "--text", "hello", "--target_text", "Hallo zusammen, wie geht es dir?",
                              "--method", "loss", "--method", "rollout", "--method", "norms")
        tokens = self.read_json(out, "tokens.json")
        src_len, tgt_len = tokens["lengths"], tokens["target"]["lengths"]
        self.assertNotEqual(src_len[0], src_len[1])
        self.assertNotEqual(tgt_len[0], tgt_len[1])
        src = np.zeros((2, tokens["padded_length"]), np.int64)
        labels = np.zeros((2, tokens["target"]["padded_length"]), np.int64)
        for b in range(2):
            src[b, :src_len[b]] = tokens["ids"][b]
            labels[b, :tgt_len[b]] = tokens["target"]["labels"][b]
        ref = reference.seq2seq(config, sd, src, labels, src_len, tgt_len)
        np.testing.assert_allclose(np.load(os.path.join(out, "loss.npy")),
                                   target_loss(ref["logits"], labels, tgt_len), **TOL)
        for name, w in zip(("encoder_rollout.npy", "decoder_rollout.npy", "cross_rollout.npy"), rollouts(ref)):
            np.testing.assert_allclose(self.load(out, name), w, err_msg=name, **TOL)
        for kind in ("encoder", "decoder", "cross"):
            np.testing.assert_allclose(self.load(out, kind + "_attention_norms.npy"),
                                       np.stack(ref[kind + "_norms"]), err_msg=kind, **TOL)
        # padding keys get nothing: the cross rollout past each source's length is 0
        self.assertEqual(np.abs(self.load(out, "cross_rollout.npy")[:, 1, :, src_len[1]:]).max(), 0)

    def test_head_ablation(self):
        for variant in ("t5", "bart"):
            with self.subTest(variant=variant):
                family, kw = VARIANTS[variant]
                d, config, sd = self.checkpoint(variant, family, **kw)
                src, src_path = self.ids(config, "src.npy", 2, 9, 5)
                labels, lab_path = self.ids(config, "labels.npy", 2, 6, 6)
                out, _ = self.analyze("--model", d, "--tokens", src_path, "--target_tokens", lab_path,
                                      "--method", "ablation", out="zero_" + variant)
                ref = reference.seq2seq(config, sd, src, labels)
                clean = np.nanmean(target_loss(ref["logits"], labels, [6, 6]), -1)
                run = self.read_json(out, "run.json")
                np.testing.assert_allclose(run["summary"]["ablation"]["clean"], clean, **TOL)
                h = np.load(os.path.join(out, "cross_ablation.npy")).shape[2]
                K = ref["output"].shape[-1] // h if family == "bart" else config["d_kv"]
                for kind in ("encoder", "decoder", "cross"):
                    got = np.load(os.path.join(out, kind + "_ablation.npy"))
                    L = got.shape[1]
                    for layer, head in ((0, 0), (L - 1, h - 1)):
                        name = W_O[family][kind].format(l=layer)
                        zeroed = dict(sd)
                        w = np.array(sd[name], np.float64)
                        w[:, head * K:(head + 1) * K] = 0
                        zeroed[name] = w
                        r = reference.seq2seq(config, zeroed, src, labels)
                        want = np.nanmean(target_loss(r["logits"], labels, [6, 6]), -1) - clean
                        np.testing.assert_allclose(got[:, layer, head], want, err_msg=f"{kind} {layer}.{head}", **TOL)
                    self.assertGreater(np.abs(got).max(), 1e-6, kind)
                out2, _ = self.analyze("--model", d, "--tokens", src_path, "--target_tokens", lab_path,
                                       "--method", "ablation", "--ablation", "mean", out="mean_" + variant)
                for kind in ("encoder", "decoder", "cross"):
                    mean = np.load(os.path.join(out2, kind + "_ablation.npy"))
                    zero = np.load(os.path.join(out, kind + "_ablation.npy"))
                    self.assertTrue(np.isfinite(mean).all(), kind)
                    self.assertGreater(np.abs(mean - zero).max(), 1e-5, kind)
                out3, _ = self.analyze("--model", d, "--tokens", src_path, "--target_tokens", lab_path,
                                       "--method", "ablation", "--metric", "kl", out="kl_" + variant)
                for kind in ("encoder", "decoder", "cross"):
                    kl = np.load(os.path.join(out3, kind + "_ablation.npy"))
                    self.assertTrue((kl >= -1e-9).all() and kl.max() > 0, kind)

    def test_refusals(self):
        d, config, _ = self.checkpoint("t5", "t5")
        _, src = self.ids(config, "src.npy", 2, 6, 1)
        _, lab = self.ids(config, "labels.npy", 2, 5, 2)
        g, _, _ = self.checkpoint("gpt2", "gpt2")
        for args, names in (((d, "--tokens", src, "--method", "rollout"), ("encoder-decoder", "--target_text")),
                            ((d, "--tokens", src, "--target_tokens", lab, "--method", "detectors"),
                             ("--method detectors", "loss, rollout, norms and ablation")),
                            ((d, "--tokens", src, "--target_tokens", lab, "--method", "logit_lens"),
                             ("--method logit_lens",)),
                            ((d, "--tokens", src, "--target_tokens", lab, "--method", "rollout",
                              "--layer_indices", "2"), ("--layer_indices",)),
                            ((g, "--tokens", src, "--target_tokens", lab, "--method", "rollout"),
                             ("not an encoder-decoder",))):
            with self.subTest(args=args[2:]):
                out, p = self.analyze("--model", *args, out="refused", code=2)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                for n in names:
                    self.assertIn(n, p.stderr)
                self.assertFalse(os.path.exists(out), p.stderr)


class Errors(Seq2SeqTest):
    def refused(self, *args, names=()):
        out = self.path("refused_out")
        p = self.mha(*args, "--out_dir", out, code=2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        for n in names:
            self.assertIn(n, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "run.json")), p.stderr)
        return p.stderr

    def test_refusals(self):
        d, config, _ = self.checkpoint("t5", "t5")
        _, src = self.ids(config, "src.npy", 2, 6, 1)
        _, lab = self.ids(config, "labels.npy", 2, 5, 2)
        _, lab1 = self.ids(config, "labels1.npy", 1, 5, 2)
        self.refused("--model", d, "--tokens", src, names=("encoder-decoder", "--target_text"))
        self.refused("--model", d, "--tokens", src, "--target_tokens", lab1, names=("1 target rows",))
        self.refused("--model", d, "--tokens", src, "--target_tokens", lab, "--target_text", "x",
                     names=("--target_tokens and --target_text",))
        self.refused("--model", d, "--tokens", src, "--target_tokens", lab, "--layer_indices", "2",
                     names=("--layer_indices",))  # 2 decoder layers
        self.refused("--model", d, "--tokens", src, "--target_tokens", lab, "--save_attention", "--save_qk",
                     names=("--save_qk",))
        self.refused("--model", d, "--text", "a", "--text", "b", "--target_text", "c",
                     names=("--target_text",))
        g, gconfig, _ = self.checkpoint("gpt2", "gpt2")
        self.refused("--model", g, "--tokens", src, "--target_tokens", lab,
                     names=("--target_tokens", "not an encoder-decoder"))
        self.refused("--model", g, "--tokens", src, "--target_text", "x",
                     names=("--target_text", "not an encoder-decoder"))

    def test_hostile_configs(self):
        cases = [("t5", {"relative_attention_num_buckets": 2}, "relative_attention_num_buckets"),
                 ("t5", {"relative_attention_max_distance": 4}, "relative_attention_max_distance"),
                 ("t5", {"relative_attention_num_buckets": 1 << 40}, "relative_attention_num_buckets"),
                 ("t5", {"num_decoder_layers": -1}, "num_decoder_layers"),
                 ("t5", {"d_kv": 0}, "d_kv"),
                 ("t5", {"feed_forward_proj": "gated-gelu-x"}, "feed_forward_proj"),
                 ("t5", {"feed_forward_proj": "tanh"}, "feed_forward_proj"),
                 ("t5", {"decoder_start_token_id": 100000}, "decoder_start_token_id"),
                 ("t5", {"num_decoder_layers": 4000000000, "d_model": 65536}, "2^40"),
                 ("bart", {"decoder_ffn_dim": 65}, "decoder_ffn_dim"),
                 ("bart", {"decoder_attention_heads": 2}, "decoder_attention_heads"),
                 ("bart", {"max_position_embeddings": 4}, "position"),
                 ("bart", {"decoder_layers": 9}, "decoder.layers.3")]
        for family, change, name in cases:
            with self.subTest(family=family, change=change):
                d, config, _ = self.checkpoint(family, family)
                with open(os.path.join(d, "config.json")) as f:
                    c = json.load(f)
                c.update(change)
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(c, f)
                _, src = self.ids(config, "src.npy", 1, 6, 1)
                _, lab = self.ids(config, "labels.npy", 1, 5, 2)
                self.refused("--model", d, "--tokens", src, "--target_tokens", lab, names=(name,))


if __name__ == "__main__":
    unittest.main()
