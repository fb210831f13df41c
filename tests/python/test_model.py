"""mha.Model (docs/models.md): a whole checkpoint called from Python gives the bits
`mha run --model` writes, and `mha view` labels a model run's maps with its tokens."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mha

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402
import reference  # noqa: E402
import tokenizer_files as tokenizers  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
TEXTS = ["the cat sat on the mat", "a dog ran"]


def gpt2_with_tokenizer(tmp_path):
    """A small GPT-2 checkpoint with a byte-level BPE tokenizer.json learned on TEXTS."""
    tok_json, encode, vocab = tokenizers.byte_level_bpe(TEXTS, merges=40)
    config, t = checkpoints.make("gpt2", seed=3, vocab=vocab)
    d = str(tmp_path / "gpt2")
    t = checkpoints.write(d, config, t, "F32", 1)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok_json, f)
    return d, config, t, encode


def run_cli(model, out, *extra):
    args = [MHA, "run", "--model", model, "--out_dir", out, "-q"] + list(extra)
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out


def test_model_call_equals_the_cli(tmp_path):
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    out = run_cli(d, str(tmp_path / "out"), "--text", TEXTS[0], "--text", TEXTS[1],
                  "--save_attention", "--save_hidden_states", "--top_k", "3")
    model = mha.Model(d)
    assert model.config["model_type"] == "gpt2"
    r = model(TEXTS, hidden_states=True, top_k=3)
    np.testing.assert_array_equal(r["output"], np.load(os.path.join(out, "output.npy")))
    np.testing.assert_array_equal(r["attention"], np.load(os.path.join(out, "self_attention.npy")))
    np.testing.assert_array_equal(r["hidden_states"], np.load(os.path.join(out, "hidden_states.npy")))
    tokens = json.load(open(os.path.join(out, "tokens.json")))
    assert r["tokens"] == tokens["tokens"]
    assert list(r["lengths"]) == tokens["lengths"]
    for text, row in zip(TEXTS, tokens["ids"]):
        assert row == encode(text)[0]
    run = json.load(open(os.path.join(out, "run.json")))
    assert [[(e["id"], e["token"]) for e in row] for row in run["top_k"]] == \
        [[(i, tok) for i, tok, _ in row] for row in r["top_k"]]


def test_model_in_bfloat16_equals_the_cli(tmp_path):
    """mha.Model(dir, dtype="bfloat16") gives the bits of `mha run --model --dtype bfloat16`, within
    bfloat16's error of float32; any other dtype raises the CLI's message."""
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    out = run_cli(d, str(tmp_path / "out"), "--text", TEXTS[0], "--save_attention", "--dtype", "bfloat16")
    model = mha.Model(d, dtype="bfloat16")
    assert model.config["dtype"] == "bfloat16"
    r = model(TEXTS[0])
    np.testing.assert_array_equal(r["output"], np.load(os.path.join(out, "output.npy")))
    np.testing.assert_array_equal(r["attention"], np.load(os.path.join(out, "self_attention.npy")))
    f32 = mha.Model(d)(TEXTS[0])
    assert np.abs(r["output"] - f32["output"]).max() <= 0.05 * np.abs(f32["output"]).max()
    assert 0 < np.abs(r["attention"] - f32["attention"]).max() <= 0.05
    assert json.load(open(os.path.join(out, "run.json")))["dtype"] == "bfloat16"
    with pytest.raises(ValueError, match="--dtype \"float16\": expected float32 or bfloat16"):
        mha.Model(d, dtype="float16")


def test_model_against_the_reference_with_padding(tmp_path):
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    r = mha.Model(d)(TEXTS, hidden_states=True)
    lengths = np.array(r["lengths"])
    assert lengths[1] < lengths[0]  # the second row is padded
    ref = reference.forward(config, t, r["ids"].astype(np.int64), lengths)
    for b, n in enumerate(lengths):  # real tokens: every layer's maps and hidden states
        for layer in range(config["n_layer"]):
            np.testing.assert_allclose(r["attention"][layer, b, :, :n, :n],
                                       ref["attentions"][layer][b, :, :n, :n], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(r["attention"][layer, b, :, :, n:], 0)  # padded keys
        np.testing.assert_allclose(r["hidden_states"][:, b, :n], ref["hidden_states"][:, b, :n],
                                   rtol=1e-5, atol=1e-5)


def test_ids_layers_and_heads(tmp_path):
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    model = mha.Model(d)
    ids = np.array(encode(TEXTS[0])[0])
    whole = model(ids)
    part = model(ids[None, :], layer_indices=[1], head_indices=[0, 2], top_k=0)
    # Layer 0 ran the fused kernel (its maps were not asked for): layer 1's input, and so its
    # maps, agree with the whole run's to rounding, not bit for bit (docs/models.md).
    np.testing.assert_allclose(part["attention"][0], whole["attention"][1][:, [0, 2]],
                               rtol=1e-5, atol=1e-6)
    same = model(ids, layer_indices=[0, 1], head_indices=[0, 2], top_k=0)
    np.testing.assert_array_equal(same["attention"], whole["attention"][:2][:, :, [0, 2]])
    assert part["top_k"] is None and part["hidden_states"] is None
    assert model(ids, attention=False)["attention"] is None
    with pytest.raises(ValueError, match="vocabulary"):
        model(np.array([[0, 10**6]]))
    with pytest.raises(ValueError, match="layer_indices"):
        model(ids, layer_indices=[99])
    with pytest.raises(ValueError, match="max_memory"):
        mha.Model(d, max_memory=100_000)(ids)
    with pytest.raises(ValueError, match="no config.json"):
        mha.Model(str(tmp_path))


def test_view_labels_a_model_run_with_its_tokens(tmp_path):
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    out = run_cli(d, str(tmp_path / "out"), "--text", TEXTS[0], "--save_attention")
    page = str(tmp_path / "view.html")
    p = subprocess.run([MHA, "view", out, "-o", page], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    html = open(page, encoding="utf-8").read()
    tokens = json.load(open(os.path.join(out, "tokens.json")))["tokens"][0]
    m = re.search(r'"query_labels":(\[[^\]]*\])', html)
    assert m, "the page holds no query labels"
    assert json.loads(m.group(1)) == tokens


@pytest.mark.parametrize("family", [f for f in checkpoints.FAMILIES
                                    if f not in ("bert", "gpt2", "llama", "mistral", "qwen2", "qwen3")])
def test_every_new_family_from_python_and_in_view(tmp_path, family):
    """mha.Model on each family added as a file of data (docs/architecture.md): the maps and hidden
    states against the reference, the same bits as the CLI, and `mha view` opens the run."""
    config, t = checkpoints.make(family, seed=4)
    d = str(tmp_path / family)
    sd = checkpoints.write(d, config, t)
    ids = np.random.default_rng(2).integers(0, config["vocab_size"], (2, 12))
    model = mha.Model(d)
    assert model.config["model_type"] == family
    r = model(ids, hidden_states=True)
    ref = reference.forward(config, sd, ids)
    np.testing.assert_allclose(r["hidden_states"], ref["hidden_states"], rtol=1e-5, atol=1e-5)
    for layer, want in enumerate(ref["attentions"]):
        np.testing.assert_allclose(r["attention"][layer], want, rtol=1e-5, atol=1e-5)
    assert (r["top_k"] is None) == (ref["logits"] is None)
    np.save(str(tmp_path / "ids.npy"), ids)
    out = run_cli(d, str(tmp_path / "out"), "--tokens", str(tmp_path / "ids.npy"), "--save_attention")
    np.testing.assert_array_equal(r["attention"], np.load(os.path.join(out, "self_attention.npy")))
    page = str(tmp_path / "view.html")
    p = subprocess.run([MHA, "view", out, "-o", page], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert os.path.getsize(page) > 0


def test_integers_beyond_64_bits_get_the_cli_message(tmp_path):
    """top_k, threads, layer_indices, head_indices and max_memory beyond 64 bits raise the
    ValueError the CLI gives for the same flag (its integers saturate to 2^63 - 1), never
    pybind11's TypeError listing the signature."""
    d, config, t, encode = gpt2_with_tokenizer(tmp_path)
    model = mha.Model(d)
    V = config["vocab_size"]
    big = str(2 ** 63 - 1)

    def refused(match, call):
        with pytest.raises(ValueError, match=match) as e:
            call()
        assert "\n" not in str(e.value)

    out = str(tmp_path / "o")
    p = subprocess.run([MHA, "run", "--model", d, "--text", "the cat", "--top_k", str(2 ** 70),
                        "--out_dir", out], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    cli = p.stderr.strip().split("mha: error: ", 1)[1]
    assert cli == "--top_k: expected an integer from 0 to the vocabulary's %d, got %s" % (V, big)
    for top_k in (2 ** 70, 10 ** 30, np.int64(2 ** 62)):
        with pytest.raises(ValueError) as e:
            model("the cat", top_k=top_k)
        assert str(e.value) == cli.replace(big, str(min(int(top_k), 2 ** 63 - 1)))
    refused(r"^--top_k: expected an integer from 0 to the vocabulary's %d, got -%d" % (V, 2 ** 63),
            lambda: model("the cat", top_k=-2 ** 70))
    refused(r"^--threads: expected an integer from 0 to 1024 \(0 = all cores\), got " + big,
            lambda: model("the cat", threads=2 ** 70))
    refused(r"^--layer_indices: %s is outside \[0, " % big,
            lambda: model("the cat", layer_indices=[10 ** 20]))
    refused(r"^--head_indices: %s is outside \[0, " % big,
            lambda: model("the cat", head_indices=[0, 2 ** 64]))
    refused(r"top_k: expected 1 to the vocabulary's %d" % V,
            lambda: model.logit_lens("the cat", top_k=2 ** 70))
    refused(r"^--threads: ", lambda: model.loss("the cat", threads=2 ** 70))
    refused(r"^--threads: ", lambda: model.rollout("the cat", threads=-2 ** 70))
    refused(r"^--layer_indices: ", lambda: model.attention_norms("the cat", layer_indices=[2 ** 80]))
    refused(r"^--head_indices: ", lambda: model.head_scores("the cat", head_indices=[2 ** 80]))
    refused(r"^--layer_indices: ", lambda: model.ablation("the cat", layer_indices=[2 ** 80]))
    refused(r"^--max_memory: expected a size such as 512MiB, 8GiB or a number of bytes, got '%s'"
            % big, lambda: mha.Model(d, max_memory=2 ** 70))
    refused(r"^--max_memory: expected a size .* got '-1'", lambda: mha.Model(d, max_memory=-1))
    # A config key of a Layer: beyond 64 bits it is the number a config file's parser reads.
    q = np.zeros((1, 4, 8), np.float32)
    refused(r"key 'h': expected an integer in \[1, 1073741824\], got 1\.1805916207174113e\+21",
            lambda: mha.attention(q, h=2 ** 70))
    refused(r"key 'seed': ", lambda: mha.attention(q, h=2, seed=2 ** 70))
    refused(r"^--h: Value %s not in range 1 to 1073741824" % big,
            lambda: mha.convert_weights({}, "keras", h=2 ** 64))
    # Within 64 bits nothing changed: the same call works with NumPy integers.
    assert model("the cat", top_k=np.int64(2), layer_indices=[np.int32(0)])["top_k"] is not None
