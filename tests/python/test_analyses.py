"""mha.Model's analyses (docs/analyses.md) give the arrays `mha analyze` writes, bit for bit: one
core for both (tests/models/test_analyze.py holds the core to the references)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mha

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


@pytest.fixture
def model(tmp_path):
    texts = ["the cat sat on the mat", "the dog sat on the mat", " Paris Rome"]
    tok, encode, V = tokenizer_files.byte_level_bpe(texts)
    config, t = checkpoints.make("llama", vocab=V)
    d = str(tmp_path / "llama")
    checkpoints.write(d, config, t)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return d


def analyze(d, out, *args):
    p = subprocess.run([MHA, "analyze", "--model", d, "--out_dir", out, "-q"] + list(args),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return lambda name: np.load(os.path.join(out, name))


def test_same_arrays_as_the_cli(model, tmp_path):
    text = "the cat sat on the mat"
    # loss and the lens alone (the forward's fused attention, as mha.Model's loss runs it); with
    # a map method beside them the pass computes the maps (the exact path), equal to ~1e-7
    load = analyze(model, str(tmp_path / "a"), "--text", text, "--method", "loss", "--method",
                   "logit_lens")
    m = mha.Model(model)
    loss = m.loss(text)
    np.testing.assert_array_equal(loss["loss"], load("loss.npy"))
    lens = m.logit_lens(text)
    np.testing.assert_array_equal(lens["p_next"], load("logit_lens_p_next.npy"))
    np.testing.assert_array_equal(lens["top_ids"], load("logit_lens_top_ids.npy"))
    load = analyze(model, str(tmp_path / "b"), "--text", text, "--method", "rollout", "--method",
                   "norms", "--method", "detectors", "--method", "ablation", "--method", "flow",
                   "--head_indices", "0,2")
    np.testing.assert_array_equal(m.attention_flow(text), load("flow.npy"))
    np.testing.assert_array_equal(m.rollout(text), load("rollout.npy"))
    np.testing.assert_array_equal(m.attention_norms(text, head_indices=[0, 2]), load("attention_norms.npy"))
    scores = m.head_scores(text, head_indices=[0, 2])
    assert scores["detectors"] == ["previous_token", "duplicate_token", "induction"]
    np.testing.assert_array_equal(scores["head_scores"], load("head_scores.npy"))
    np.testing.assert_array_equal(m.ablation(text, head_indices=[0, 2])["effect"], load("ablation.npy"))


def test_patching_and_errors(model, tmp_path):
    clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
    load = analyze(model, str(tmp_path / "p"), "--method", "patching", "--clean", clean,
                   "--corrupt", corrupt, "--metric", "kl")
    p = mha.Model(model).patching(clean, corrupt, metric="kl")
    np.testing.assert_array_equal(p["heads"], load("patch_heads.npy"))
    np.testing.assert_array_equal(p["resid"], load("patch_resid.npy"))
    m = mha.Model(model)
    with pytest.raises(ValueError, match="expected texts of equal token length"):
        m.patching(clean, "a dog")
    with pytest.raises(ValueError, match="expected exactly one"):
        m.ablation(clean, target=" Paris Rome", foil=" Rome")
    with pytest.raises(ValueError, match="--metric"):
        m.ablation(clean, metric="mse")
