#!/usr/bin/python3
"""The activation sites (lib/include/mha/kernel/site.hpp, docs/models.md) as users reach them:
`mha run --model --save_sites PATTERNS` (sites/<name>.npy) and mha.Model.run_with_cache /
run_with_hooks, against the float64 PyTorch references of reference.py (record=) on the random
checkpoints of checkpoints.py:

- Cli, Python: every site of gpt2, llama, gemma2, bert, t5 and vit (Families) and of the other
  families the reference covers (MoreFamilies) equals the reference's activation at 1e-5
  (relative, with an absolute floor of 1e-5 times the site's largest value; scores compared
  where finite, their -inf where masked); the files are exactly the model's sites, listed in
  run.json with their checksums; the CLI and the module give the same bits.
- A run replaces an earlier run's sites/ files as it replaces its other outputs.
- Patterns: globs and layer-free names ("hook_resid_post" is every layer's), a callable filter;
  a pattern that matches no site is refused naming it, with a "did you mean" and a few valid
  names, exit 2 and nothing written (CLI) or ValueError with the same words (Python).
- Interventions: run_with_hooks zeroing head (l, h) of blocks.{l}.attn.hook_z gives `mha analyze
  --method ablation`'s ablation.npy[:, l, h] (the change of each row's mean next-token loss);
  patching blocks.{l}.hook_resid_pre at position t from a clean text's run_with_cache gives
  patch_resid.npy[l, t] ((metric - corrupt) / (clean - corrupt), docs/analyses.md); a hook that
  returns a replacement acts as an in-place edit; a wrong shape is a ValueError naming the site
  and both shapes; a hook's own exception reaches the caller.

  MHA_BIN=build/bin/mha PYTHONPATH=build/python /usr/bin/python3 tests/models/test_sites.py [CLASS]
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
from test_vit import config_height, config_width, png_bytes, pixel_values, resize  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
REQUIRED = ("gpt2", "llama", "gemma2", "bert", "t5", "vit")
OTHERS = tuple(f for f in checkpoints.FAMILIES + checkpoints.IMAGE_FAMILIES + checkpoints.SEQ2SEQ_FAMILIES
               if f not in REQUIRED)


def assert_site(got, want, name):
    """got (float32) against the reference's float64 activation at 1e-5."""
    assert got.shape == want.shape, f"{name}: shape {got.shape}, reference {want.shape}"
    assert got.dtype == np.float32, f"{name}: {got.dtype}"
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{name}: -inf where masked")
    scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5 * max(scale, 1e-3),
                               err_msg=name)


class SitesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_sites_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def mha(self, *args, code=0):
        cmd = [MHA] + list(args) + ["-q"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, code, f"{' '.join(cmd)}\n{p.stderr}")
        return p

    def case(self, family):
        """A checkpoint of `family`, its input as CLI arguments and as the module's call takes it,
        and the reference's record of every site: (dir, cli args, call args, call kwargs, record)."""
        config, t = checkpoints.make(family)
        d = self.path(family)
        rng = np.random.default_rng(7)
        record = {}
        if family in checkpoints.IMAGE_FAMILIES:
            H, W = config_height(config), config_width(config)
            pre = checkpoints.preprocessor_config(H, W)
            sd = checkpoints.write(d, config, t)
            checkpoints.write_preprocessor(d, pre)
            a = rng.integers(0, 256, (H, W, 3)).astype(np.uint8)  # the model's size: no resize
            image = self.path(family + ".png")
            with open(image, "wb") as f:
                f.write(png_bytes(a))
            seen = np.array(resize([[tuple(int(v) for v in px) for px in row] for row in a], W, H, 2), np.uint8)
            getattr(reference, family)(config, sd, pixel_values(seen, pre)[None], record=record)
            # the pass starts from the patch embeddings with their positions (embed_patches):
            # hook_embed and hook_pos_embed are the reference's only
            del record["hook_embed"], record["hook_pos_embed"]
            return d, ["--image", image], [image], {}, record
        sd = checkpoints.write(d, config, t)
        ids = rng.integers(3, config["vocab_size"], (2, 9))
        np.save(self.path(family + "_ids.npy"), ids)
        if family in checkpoints.SEQ2SEQ_FAMILIES:
            labels = rng.integers(3, config["vocab_size"], (2, 6))
            np.save(self.path(family + "_labels.npy"), labels)
            reference.seq2seq(config, sd, ids, labels, record=record)
            return (d, ["--tokens", self.path(family + "_ids.npy"), "--target_tokens",
                        self.path(family + "_labels.npy")], [ids], {"target_text": labels}, record)
        reference.forward(config, sd, ids, record=record)
        return d, ["--tokens", self.path(family + "_ids.npy")], [ids], {}, record


class Cli(SitesTest):
    def saved(self, family, patterns="*"):
        d, args, _, _, record = self.case(family)
        out = self.path("out_" + family)
        self.mha("run", "--model", d, *args, "--out_dir", out, "--save_sites", patterns)
        names = sorted(f[:-len(".npy")] for f in os.listdir(os.path.join(out, "sites")))
        return out, names, record

    def check(self, family):
        out, names, record = self.saved(family)
        self.assertEqual(names, sorted(record), family)
        for name in names:
            assert_site(np.load(os.path.join(out, "sites", name + ".npy")), record[name], f"{family} {name}")
        with open(os.path.join(out, "run.json")) as f:
            outputs = json.load(f)["outputs"]
        for name in names:
            entry = outputs["sites/" + name + ".npy"]
            self.assertEqual(entry["bytes"], os.path.getsize(os.path.join(out, "sites", name + ".npy")))

    def test_families(self):
        for family in REQUIRED:
            with self.subTest(family=family):
                self.check(family)

    def test_more_families(self):
        for family in OTHERS:
            with self.subTest(family=family):
                self.check(family)

    def test_patterns(self):
        out, names, _ = self.saved("gpt2", "blocks.*.attn.hook_z,hook_resid_post")
        L = checkpoints.make("gpt2")[0]["n_layer"]
        self.assertEqual(names, sorted([f"blocks.{l}.attn.hook_z" for l in range(L)]
                                       + [f"blocks.{l}.hook_resid_post" for l in range(L)]))
        out, names, _ = self.saved("gpt2", "blocks.1.attn.hook_pattern")
        self.assertEqual(names, ["blocks.1.attn.hook_pattern"])
        out, names, _ = self.saved("t5", "cross_attn.hook_pattern")
        self.assertTrue(names and all(n.startswith("decoder.") for n in names), names)

    def test_a_run_replaces_the_earlier_sites(self):
        d, args, _, _, _ = self.case("gpt2")
        out = self.path("again")
        listing = lambda: sorted(os.listdir(os.path.join(out, "sites")))  # noqa: E731
        self.mha("run", "--model", d, *args, "--out_dir", out, "--save_sites", "blocks.0.*")
        self.assertEqual(len(listing()), 15)
        self.mha("run", "--model", d, *args, "--out_dir", out, "--save_sites", "hook_embed")
        self.assertEqual(listing(), ["hook_embed.npy"])
        self.mha("run", "--model", d, *args, "--out_dir", out)
        self.assertEqual(listing(), [])
        with open(os.path.join(out, "run.json")) as f:
            self.assertFalse([n for n in json.load(f)["outputs"] if n.startswith("sites/")])

    def test_refusals(self):
        d, args, _, _, _ = self.case("gpt2")
        out = self.path("refused")
        for patterns, words in (("blocks.0.attn.hook_zz", ["'blocks.0.attn.hook_zz' matches no site",
                                                           "did you mean 'blocks.0.attn.hook_z'?"]),
                                ("blocks.99.hook_resid_pre", ["'blocks.99.hook_resid_pre' matches no site",
                                                              "hook_embed"]),
                                ("hook_embed,,hook_z", ["an empty site pattern"]),
                                ("encoder.hook_embed", ["'encoder.hook_embed' matches no site"])):
            p = self.mha("run", "--model", d, *args, "--out_dir", out, "--save_sites", patterns, code=2)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("--save_sites", p.stderr)
            for w in words:
                self.assertIn(w, p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "run.json")))


class Python(SitesTest):
    def check(self, family):
        import mha
        d, args, call_args, kwargs, record = self.case(family)
        m = mha.Model(d)
        cache = m.run_with_cache(*call_args, **kwargs)
        self.assertEqual(sorted(cache), sorted(record), family)
        for name, want in record.items():
            assert_site(cache[name], want, f"{family} {name}")
        out = self.path("cli_" + family)
        self.mha("run", "--model", d, *args, "--out_dir", out, "--save_sites", "*")
        for name in cache:  # the CLI's bits
            np.testing.assert_array_equal(cache[name], np.load(os.path.join(out, "sites", name + ".npy")),
                                          err_msg=name)

    def test_families(self):
        for family in REQUIRED:
            with self.subTest(family=family):
                self.check(family)

    def test_more_families(self):
        for family in OTHERS:
            with self.subTest(family=family):
                self.check(family)

    def test_names(self):
        import mha
        d, _, (ids,), _, record = self.case("llama")
        m = mha.Model(d)
        z = sorted(n for n in record if n.endswith("attn.hook_z"))
        self.assertEqual(sorted(m.run_with_cache(ids, names=["blocks.*.attn.hook_z"])), z)
        self.assertEqual(sorted(m.run_with_cache(ids, names=lambda n: n.endswith("attn.hook_z"))), z)
        self.assertEqual(sorted(m.run_with_cache(ids, names="hook_resid_post")),
                         sorted(n for n in record if n.endswith(".hook_resid_post")))
        with self.assertRaisesRegex(ValueError, r"names: 'blocks\.0\.hook_resid_pr' matches no site of this "
                                                r"model \(did you mean 'blocks\.0\.hook_resid_pre'\?\)"):
            m.run_with_cache(ids, names=["blocks.0.hook_resid_pr"])
        with self.assertRaisesRegex(ValueError, "names: expected site names or patterns"):
            m.run_with_cache(ids, names=[3])


def loss_rows(logits, ids):
    """Each row's mean next-token cross-entropy (float64)."""
    z = np.asarray(logits, np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    return (lse[:, :-1] - np.take_along_axis(z[:, :-1], ids[:, 1:, None], -1)[..., 0]).mean(-1)


class Interventions(SitesTest):
    def test_zeroed_head_is_ablation(self):
        import mha
        config, t = checkpoints.make("gpt2")
        d = self.path("gpt2")
        sd = checkpoints.write(d, config, t)
        ids = np.random.default_rng(5).integers(0, config["vocab_size"], (2, 10))
        np.save(self.path("ids.npy"), ids)
        out = self.path("ablation")
        self.mha("analyze", "--model", d, "--tokens", self.path("ids.npy"), "--method", "ablation",
                 "--out_dir", out)
        effect = np.load(os.path.join(out, "ablation.npy"))  # (B, layers, heads)
        head = np.asarray(sd["wte.weight"], np.float64)  # tied
        m = mha.Model(d)
        clean = loss_rows(m(ids)["output"].astype(np.float64) @ head.T, ids)
        L, h = effect.shape[1:]
        for layer, k in ((0, 0), (L - 1, h - 1), (L // 2, 1)):
            def zero(a, name, k=k):
                self.assertEqual(name, f"blocks.{layer}.attn.hook_z")
                a[:, :, k, :] = 0

            r = m.run_with_hooks(ids, hooks={f"blocks.{layer}.attn.hook_z": zero})
            got = loss_rows(r["output"].astype(np.float64) @ head.T, ids) - clean
            np.testing.assert_allclose(got, effect[:, layer, k], rtol=1e-4, atol=2e-5,
                                       err_msg=f"head {layer}.{k}")
            self.assertGreater(np.abs(got).max(), 1e-6)  # the head matters

            def replaced(a, name, k=k):  # a replacement instead of an edit: the same run
                b = a.copy()
                b[:, :, k, :] = 0
                return b

            r2 = m.run_with_hooks(ids, hooks={f"blocks.{layer}.attn.hook_z": replaced})
            np.testing.assert_array_equal(r2["output"], r["output"])

    def test_patched_resid_is_patching(self):
        import mha
        clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
        tok, encode, V = tokenizer_files.byte_level_bpe([clean, corrupt])
        config, t = checkpoints.make("llama", vocab=V)
        d = self.path("llama")
        sd = checkpoints.write(d, config, t)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        out = self.path("patch")
        self.mha("analyze", "--model", d, "--method", "patching", "--clean", clean, "--corrupt", corrupt,
                 "--out_dir", out)
        resid = np.load(os.path.join(out, "patch_resid.npy"))  # (layers, T)
        head = np.asarray(sd["lm_head.weight"], np.float64)
        m = mha.Model(d)
        ids = np.asarray(m(corrupt)["ids"])

        def metric(output):  # the corrupt text's loss (docs/analyses.md)
            return loss_rows(output.astype(np.float64) @ head.T, ids)[0]

        m_clean, m_corrupt = metric(m(clean)["output"]), metric(m(corrupt)["output"])
        cache = m.run_with_cache(clean, names=["blocks.*.hook_resid_pre"])
        L, T = resid.shape
        for layer in range(L):
            for pos in range(T):
                def patch(a, name, layer=layer, pos=pos):
                    a[:, pos] = cache[f"blocks.{layer}.hook_resid_pre"][:, pos]

                r = m.run_with_hooks(corrupt, hooks={f"blocks.{layer}.hook_resid_pre": patch})
                got = (metric(r["output"]) - m_corrupt) / (m_clean - m_corrupt)
                self.assertAlmostEqual(got, float(resid[layer, pos]), delta=1e-4, msg=f"{layer}, {pos}")

    def test_plain_and_refusals(self):
        import mha
        d, _, (ids,), _, _ = self.case("gpt2")
        m = mha.Model(d)
        plain = m(ids)
        seen = []
        r = m.run_with_hooks(ids, hooks={"hook_resid_post": lambda a, name: seen.append(name)})
        self.assertEqual(sorted(r), sorted(plain))  # what a plain call returns
        np.testing.assert_array_equal(r["output"], plain["output"])
        L = checkpoints.make("gpt2")[0]["n_layer"]
        self.assertEqual(seen, [f"blocks.{l}.hook_resid_post" for l in range(L)])  # in the pass's order
        with self.assertRaisesRegex(ValueError, r"run_with_hooks: the hook of 'blocks\.0\.attn\.hook_z' "
                                                r"returned shape \(2, 9\); expected the site's shape "
                                                r"\(2, 9, 4, 12\)"):
            m.run_with_hooks(ids, hooks={"blocks.0.attn.hook_z": lambda a, name: np.zeros((2, 9))})
        with self.assertRaisesRegex(ValueError, "run_with_hooks: 'blocks.0.attn.hook_zz' matches no site"):
            m.run_with_hooks(ids, hooks={"blocks.0.attn.hook_zz": lambda a, name: None})
        with self.assertRaisesRegex(ValueError, "hook_pattern' arrives in blocks"):
            m.run_with_hooks(ids, hooks={"blocks.0.attn.hook_pattern": lambda a, name: None})

        def boom(a, name):
            raise KeyError("from the hook")

        with self.assertRaisesRegex(KeyError, "from the hook"):
            m.run_with_hooks(ids, hooks={"blocks.1.hook_resid_pre": boom})
        np.testing.assert_array_equal(m(ids)["output"], plain["output"])  # the model is unchanged


if __name__ == "__main__":
    unittest.main(verbosity=2)
