#!/usr/bin/python3
"""Small tokenizer.json files in the Hugging Face `tokenizers` format, with plain-Python encoders
that follow the same published algorithms (not this tool's code), for `mha run --model --text`:

- byte_level_bpe(texts, merges): GPT-2's tokenizer: ByteLevel pre-tokenizer (GPT-2's split
  pattern; the texts here are ASCII, where \\p{L} and \\p{N} are [A-Za-z] and [0-9]), the 256
  byte symbols of bytes_to_unicode as ids 0..255, then `merges` BPE merges learned from the
  texts (ids 256..), then <|endoftext|> as an added special token; no special tokens added to
  a text (post_processor ByteLevel).
- wordpiece(words): BERT's (bert-base-uncased's layout): BertNormalizer (lowercase),
  BertPreTokenizer (whitespace, then each punctuation character alone), WordPiece with "##"
  continuations and [UNK] for a word it cannot cover, TemplateProcessing [CLS] A [SEP].

Each returns (tokenizer_json: dict, encode: str -> (ids, token strings), vocab_size).
"""
import re
from collections import Counter

GPT2_PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters (encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _bpe_word(symbols, ranks):
    symbols = list(symbols)
    while len(symbols) > 1:
        pairs = [(ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
        pairs = [(r, i) for r, i in pairs if r is not None]
        if not pairs:
            break
        r, _ = min(pairs)
        a, b = next(p for p, rank in ranks.items() if rank == r)
        out, i = [], 0
        while i < len(symbols):  # merge every occurrence of the pair, left to right
            if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return symbols


def byte_level_bpe(texts, merges=40):
    b2u = bytes_to_unicode()
    vocab = {c: i for i, c in enumerate(b2u.values())}
    words = Counter("".join(b2u[b] for b in w.encode()) for t in texts for w in GPT2_PATTERN.findall(t))
    seqs = {w: list(w) for w in words}
    merge_list = []
    for _ in range(merges):  # learn merges: the most frequent adjacent pair, ties by the pair
        pairs = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merge_list.append((a, b))
        vocab[a + b] = len(vocab)
        ranks = {m: r for r, m in enumerate(merge_list)}
        seqs = {w: _bpe_word(list(w), ranks) for w in words}
    ranks = {m: r for r, m in enumerate(merge_list)}
    eot = len(vocab)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merge_list]},
    }

    def encode(text):
        toks = []
        for w in GPT2_PATTERN.findall(text):
            toks += _bpe_word(["".join(b2u[b]) for b in w.encode()], ranks)
        return [vocab[t] for t in toks], toks

    return tok, encode, eot + 1


SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _bert_words(text):
    out = []
    for w in text.lower().split():
        cur = ""
        for ch in w:
            if re.match(r"[!-/:-@\[-`{-~]", ch):  # ASCII punctuation, each alone
                if cur:
                    out.append(cur)
                out.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            out.append(cur)
    return out


def wordpiece(pieces):
    """pieces: vocabulary entries after the specials (words and ##continuations)."""
    vocab = {t: i for i, t in enumerate(SPECIAL + list(pieces))}
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s in SPECIAL],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }

    def encode(text):
        toks = ["[CLS]"]
        for w in _bert_words(text):
            start, sub = 0, []
            while start < len(w):  # greedy longest match from the start
                end = len(w)
                while end > start and (("##" if start else "") + w[start:end]) not in vocab:
                    end -= 1
                if end == start:
                    sub = ["[UNK]"]
                    break
                sub.append(("##" if start else "") + w[start:end])
                start = end
            toks += sub
        toks.append("[SEP]")
        return [vocab[t] for t in toks], toks

    return tok, encode, len(vocab)
