"""mha.show (docs/python.md, "In a notebook"): the page `mha view` writes, for a result in
memory or a run's directory, in an <iframe srcdoc> a notebook cell displays. The maps in the page
are the arrays given, bit for bit; a run's directory gives `mha view`'s own bytes; bad results
and pages over max_mb raise ValueError with one line. tests/view/test_notebook.py runs the
notebook and checks the views in Chromium."""
import base64
import html
import json
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest

import mha

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402
import tokenizer_files as tokenizers  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
TEXT = "the cat sat on the mat"


def page_data(page):
    return json.loads(re.search(r'<script id="mha-data" type="application/json">(.*?)</script>',
                                page, re.S).group(1))


def page_maps(page):
    """Each map set of a page as (name, array): base64 -> inflate -> unshuffle, as attention.js."""
    out = []
    for m in page_data(page)["maps"]:
        item = 4 if m["dtype"] == "float32" else 8
        raw = zlib.decompress(base64.b64decode(m["data"]))
        n = len(raw) // item
        planes = np.frombuffer(raw, np.uint8).reshape(item, n)
        values = np.frombuffer(planes.T.copy().tobytes(), "<f4" if item == 4 else "<f8")
        out.append((m["name"], values.reshape(m["layers"], m["B"], m["h"], m["T"], m["S"])))
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("show") / "gpt2")
    tok_json, _, vocab = tokenizers.byte_level_bpe([TEXT, "a dog ran"], merges=40)
    config, t = checkpoints.make("gpt2", seed=4, vocab=vocab)
    checkpoints.write(d, config, t, "F32", 1)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok_json, f)
    return d


def test_a_model_call_is_shown_with_its_tokens_layers_and_heads(model):
    m = mha.Model(model)
    r = m(TEXT, layer_indices=[1, 2], head_indices=[0, 3])
    v = mha.show(r)
    assert isinstance(v, mha.View)
    [(name, maps)] = page_maps(v.html)
    assert name == "attention"
    np.testing.assert_array_equal(maps, r["attention"])
    data = page_data(v.html)
    assert data["query_labels"] == r["tokens"][0] and data["query_labels"][1] == "\u2423cat"
    assert data["query_pieces"] == r["pieces"][0] and data["query_pieces"][1] == "\u0120cat"
    assert data["run"]["attention"]["layers"] == [1, 2]
    assert data["run"]["attention"]["heads"] == [0, 3]
    # In a cell: the page in an iframe's srcdoc, whole, escaped for the attribute.
    frame = v._repr_html_()
    assert frame.startswith("<iframe ") and 'height: 760px' in frame
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert html.unescape(srcdoc) == v.html
    v.height = 500
    assert 'height: 500px' in v._repr_html_()


def test_arrays_tuples_and_analyses(model):
    rng = np.random.default_rng(2)
    att = rng.random((2, 3, 4, 5)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    [(name, maps)] = page_maps(mha.show(att).html)
    assert name == "attention"
    np.testing.assert_array_equal(maps[0], att)
    # A Layer call's (output, attention, cross): a stack's self-attention has a layer axis.
    self_att = np.broadcast_to(att[None, :, :, :, :4] / att[..., :4].sum(-1, keepdims=True),
                               (2, 2, 3, 4, 4)).astype(np.float32)
    v = mha.show((np.zeros((2, 4, 8), np.float32), self_att, att))
    assert [n for n, _ in page_maps(v.html)] == ["self_attention", "cross_attention"]
    np.testing.assert_array_equal(page_maps(v.html)[1][1][0], att)
    # A rollout (layers, B, T, T) is one map per layer, the heads' mean; tokens= labels it.
    m = mha.Model(model)
    rollout = m.rollout(TEXT)
    tokens = m(TEXT)["tokens"][0]
    v = mha.show(rollout, name="rollout", tokens=tokens)
    [(name, maps)] = page_maps(v.html)
    data = page_data(v.html)
    assert name == "rollout" and data["maps"][0]["head_axis"] is False
    np.testing.assert_array_equal(maps[:, :, 0], rollout)
    assert data["query_labels"] == tokens
    # batch_index keeps one row.
    [(_, maps)] = page_maps(mha.show(att, batch_index=1).html)
    np.testing.assert_array_equal(maps[0, 0], att[1])


def test_a_run_directory_gives_the_pages_mha_view_writes(model, tmp_path):
    out = str(tmp_path / "run")
    subprocess.run([MHA, "run", "--model", model, "--text", TEXT, "--save_attention",
                    "--out_dir", out, "-q"], check=True, timeout=300)
    subprocess.run([MHA, "view", out, "-o", str(tmp_path / "v.html"), "-q"], check=True,
                   timeout=300)
    with open(tmp_path / "v.html", encoding="utf-8") as f:
        expected = f.read()
    assert mha.show(out).html == expected
    assert mha.show(tmp_path / "run").html == expected  # a PathLike too


def test_bad_results_raise_one_line(model, tmp_path):
    def refused(match, *args, **kwargs):
        with pytest.raises(ValueError, match=match) as e:
            mha.show(*args, **kwargs)
        assert "\n" not in str(e.value)

    att = np.full((1, 2, 3, 3), 1 / 3, np.float32)
    refused(r"^mha\.show: attention: element 4 is 2; expected attention weights in \[0, 1\]",
            np.where(np.arange(18).reshape(1, 2, 3, 3) == 4, 2, att).astype(np.float32))
    refused(r"holds no attention maps .*attention=False", {"output": att})
    refused(r"save_attention=True", (att, None))
    refused(r"name 'weights'; expected attention, ", att, name="weights")
    refused(r"rollout of shape \(2, 3, 3\); expected \(layers, B, T, T\)", att[0], name="rollout")
    refused(r"a int; expected a Model or Layer call's result", 3)
    refused(r"tokens: expected a list of strings", att, tokens=[1, 2, 3])
    refused(r"^mha\.show: attention: int64 array of shape \(2, 2\); expected attention weights of "
            r"dtype float16, float32 or float64", np.zeros((2, 2), np.int64))
    refused(r"--batch_index 5: .* holds B = 1", att, batch_index=5)
    refused(r"name= and tokens= are for arrays", str(tmp_path), name="attention")
    refused(r"no such file or directory", str(tmp_path / "missing"))
    refused(r"height 10; expected 100 to 20000", att, height=10)
    refused(r"height 9223372036854775807; expected 100 to 20000", att, height=2 ** 70)
    refused(r"--batch_index 9223372036854775807: .* holds B = 1", att, batch_index=2 ** 70)
    # NaN only as a whole masked row, as `mha view` reads an attention.npy (same message).
    refused(r"^mha\.show: attention: every weight is NaN; expected attention weights in \[0, 1\]",
            np.full((1, 2, 3, 3), np.nan, np.float32))
    one = att.copy()
    one[0, 1, 2, 1] = np.nan
    refused(r"^mha\.show: attention: element 16 is nan; expected attention weights in \[0, 1\]",
            one)
    masked = att.copy()
    masked[0, 1, 2, :] = np.nan  # a fully masked query row: shown
    assert len(mha.show(masked).html) > 1000
    # Over the size cap: the size, the cap, and what to do.
    big = np.full((1, 4, 400, 400), 1 / 400, np.float32) + \
        np.random.default_rng(0).random((1, 4, 400, 400)).astype(np.float32) * 1e-4
    refused(r"^mha\.show: the view's page is [0-9.]+ MiB, above max_mb=0\.5 .*layer_indices=",
            big, max_mb=0.5)
    assert len(mha.show(big, max_mb=50).html) > 500_000


def test_an_encoder_decoder_call_shows_three_map_kinds_with_both_token_lists(tmp_path):
    config, t = checkpoints.make("t5")
    d = str(tmp_path / "t5")
    checkpoints.write(d, config, t)
    m = mha.Model(d)
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(3, config["vocab_size"], 7), rng.integers(3, config["vocab_size"], 5)
    r = m(src, target=tgt)
    v = mha.show(r)
    maps = dict(page_maps(v.html))
    assert sorted(maps) == ["cross_attention", "decoder_attention", "encoder_attention"]
    for name, array in maps.items():
        np.testing.assert_array_equal(array, r[name])
    data = page_data(v.html)
    by_name = {m_["name"]: m_ for m_ in data["maps"]}
    source, target = r["tokens"][0], r["target"]["tokens"][0]
    # Cross attention: the target's tokens on the queries, the source's on the keys.
    assert by_name["cross_attention"]["query_labels"] == target
    assert by_name["cross_attention"]["key_labels"] == source
    assert by_name["decoder_attention"]["key_labels"] == target
    assert by_name["encoder_attention"]["query_labels"] == source


def test_an_image_call_shows_the_images_on_their_patch_grid(tmp_path):
    config, t = checkpoints.make("vit")
    d = str(tmp_path / "vit")
    checkpoints.write(d, config, t)
    size = config["image_size"]
    height, width = size if isinstance(size, list) else (size, size)
    checkpoints.write_preprocessor(d, checkpoints.preprocessor_config(height, width))
    image = np.random.default_rng(2).integers(0, 256, (40, 30, 3)).astype(np.uint8)
    r = mha.Model(d)(image)
    data = page_data(mha.show(r).html)
    seen = np.frombuffer(zlib.decompress(base64.b64decode(data["images"]["data"])), np.uint8)
    np.testing.assert_array_equal(seen.reshape(r["images"].shape), r["images"])
    assert data["run"]["input"]["patch_grid"] == list(r["patch_grid"])
    assert data["query_labels"][:2] == ["[CLS]", "patch (0, 0)"]


def test_nan_maps_get_the_message_mha_view_gives(tmp_path):
    """An all-NaN attention.npy, or a NaN inside a row of weights, is refused by `mha view` and by
    mha.show with the same words; a fully masked (all-NaN) row is not."""
    for name, a in (("all_nan", np.full((1, 2, 3, 3), np.nan, np.float32)),
                    ("nan_in_row", np.where(np.arange(18).reshape(1, 2, 3, 3) == 16, np.nan,
                                            np.float32(1 / 3)).astype(np.float32))):
        path = str(tmp_path / (name + ".npy"))
        np.save(path, a)
        p = subprocess.run([MHA, "view", path, "-o", str(tmp_path / (name + ".html"))],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        cli = p.stderr.strip().split(path + ": ", 1)[1]
        with pytest.raises(ValueError) as e:
            mha.show(a)
        assert str(e.value) == "mha.show: attention: " + cli
        assert not os.path.exists(tmp_path / (name + ".html"))


def test_a_padded_batch_row_is_shown_as_its_text_alone(model):
    """Issue 50: with two texts the shorter row's statistics counted its padded queries and the
    page lost every token label. Each row's numbers equal its text's alone (to 1e-6), each row
    is labelled with its own tokens, and the padding is marked for the page to grey."""
    m = mha.Model(model)
    texts = [TEXT, "a dog ran"]
    both = m(texts)
    assert len(set(both["lengths"])) == 2  # one row is padded
    data = page_data(mha.show(both).html)["maps"][0]
    for b, text in enumerate(texts):
        alone = page_data(mha.show(m(text)).html)["maps"][0]
        for layer in range(data["layers"]):
            got, want = data["stats"][layer][b]["heads"], alone["stats"][layer][0]["heads"]
            for g, w in zip(got, want):
                assert g["rows"] == both["lengths"][b]
                for key in ("entropy", "entropy_fraction", "max_weight", "distance", "diagonal",
                            "first_key"):
                    assert abs(g[key] - w[key]) <= 1e-6, (b, layer, key, g[key], w[key])
    for b, n in enumerate(both["lengths"]):
        assert data["row_query_labels"][b][:n] == both["tokens"][b]
        assert data["row_key_pieces"][b][:n] == both["pieces"][b]
    assert data["query_lengths"] == both["lengths"] and data["key_lengths"] == both["lengths"]
