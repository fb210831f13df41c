#!/usr/bin/env python3
"""Writes the tokenizer test corpus: a JSON array of 2,000+ strings, the same on every run.

Hand-written cases first, then random mixes of fragments from each category (prose, accents,
CJK, emoji and ZWJ sequences, whitespace runs, numbers, code, contractions, special-token
spellings, unusual code points), then random strings of code points from pools of likely
trouble, then a few long strings. Every string is valid UTF-8 (no surrogates).
    make_corpus.py OUT.json
"""
import json
import random
import sys

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an "
         "they which one you were her all she there would their we him been has when who will "
         "more no if out so said what up its about into than them can only other new some time "
         "could these two may then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three tokenization transformer attention unbelievable internationalization "
         "antidisestablishmentarianism Hello World OpenAI LLaMA HuggingFace GPT BERT").split()
ACCENTS = ["café", "naïve", "résumé", "Ångström", "São Paulo", "Zürich", "piñata", "façade",
           "Dvořák", "Łódź", "Ærøskøbing", "straße", "İstanbul", "crème brûlée", "ΑΒΓ αβγ",
           "Москва", "Привет мир", "Ελληνικά", "cafe\u0301", "n\u0303o", "A\u030a", "e\u0301\u0301",
           "ﬁnance", "Ⅻ", "①②③", "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "㎏", "ﾊﾝｶｸ"]
CJK = ["中文", "你好，世界！", "我爱自然语言处理。", "東京都", "こんにちは", "カタカナ", "ひらがなとカタカナ",
       "한국어", "안녕하세요", "漢字仮名交じり文", "北京大学", "𠀀𠀁", "龘", "「引用」", "一二三四五"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇫🇷", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🤖", "✨🔥💯",
         "☺", "♀️", "1️⃣", "🫠", "🏴‍☠️", "👁‍🗨"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u2003", "\u3000",
          "    \n", "\n    ", " \t \n", "\u200b", "\u2028", "\u000b", "\u000c", "\u0085"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "3.14159", "1,000,000", "2024-01-31",
           "99999999999999999999", "0x1F", "1e-9", "-273.15", "٣٤٥", "१२३", "½", "²³", "10%"]
CODE = ["def f(x):\n    return x**2", "int main() { return 0; }", "for (i = 0; i < n; ++i)",
        "if x != y and not z:", "<div class=\"a\">b</div>", "SELECT * FROM t WHERE id=1;",
        "a->b", "x += 1  # comment", "std::vector<int> v{1, 2};", "$HOME/.bashrc", "#!/bin/sh",
        "λx.x", "foo_bar_baz", "camelCaseName", "https://example.com/a?b=c&d=e", "user@example.org",
        "{\"key\": [1, 2, null]}", "```python\nprint('hi')\n```", "    indented", "\tif (a) {"]
CONTRACTIONS = ["it's", "we're", "they'll", "I'M", "YOU'LL", "don't", "can't", "she'd", "I've",
                "John's", "'s", "'re", "'LL", "'Ve", "rock'n'roll", "o'clock", "’s", "it’s",
                "''", "'", "l'été", "aujourd'hui"]
SPECIAL = ["<|endoftext|>", "<s>", "</s>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]",
           "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<think>", "</think>",
           "<|endoftext|><|endoftext|>", " <s> ", "[cls]", "<|im_start", "<0x41>"]
ODD = ["\u0300", "a\u0308\u0301", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627",
       "\u200f\u200e", "\u202e", "\ufeff", "\u00ad", "\ue000", "\uf8ff", "\U000f0000", "\U0010fffd",
       "\ufffd", "\ufffe", "\uffff", "\U0001d400", "\U000e0041", "\u0001", "\u0000", "\u001b[31m",
       "\u007f", "\u0080", "\u009f", "\u2062", "\u034f", "\u0e01\u0e34\u0e19", "\u0915\u094d\u0937",
       "\u1100\u1161\u11a8", "\u0d9a\u0dca\u200d\u0dbb", "\U0001f3fb", "\u2060", "\u180e",
       "\u00b5\u212b\u2126", "\u1e9e", "\u0130", "\u03a3\u03c3\u03c2", "\u0587", "\u01c5"]
PUNCT = [".", ",", "!", "?", "...", "—", "–", "-", "(", ")", "\"", "«»", "“”", ";", ":", "…", "!!!",
         "?!", "@", "#", "$", "%", "^", "&", "*", "_", "~", "`", "|", "\\", "/", "¿", "¡", "§"]
CATEGORIES = [WORDS, ACCENTS, CJK, EMOJI, SPACES, NUMBERS, CODE, CONTRACTIONS, SPECIAL, ODD, PUNCT]

FIXED = ["", " ", "a", "Hello world", "Hello, world!", " Hello", "Hello ", "  leading and trailing  ",
         "The quick brown fox jumps over the lazy dog.", "I'm sure it's fine, we'll see.",
         "HOW'S IT GOING? I'LL BE THERE", "   ", "\n", "\t", "a\tb\nc\r\nd", "1234567890",
         "3.14 + 2.71 = 5.85", "中文和English混合", "😀😃😄", "👨‍👩‍👧‍👦 family", "<|endoftext|>",
         "Hello<|endoftext|>world", "[CLS] hello [SEP]", "<s>hi</s>", "naïve café", "e\u0301",
         "\u0000", "tab\tseparated\tvalues", "ﬁ ﬂ ﬀ", "x" * 120, "ab" * 60, "a " * 50,
         "1" * 40, "!" * 30, " " * 17, "\n" * 9, "Ünïcödé", "Ḁḁ Ḃḃ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "zwj\u200dtest"]


def fragment(rng):
    cat = rng.choice(CATEGORIES)
    if cat is WORDS:
        n = rng.randint(1, 8)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        if rng.random() < 0.1:
            words = [w.upper() for w in words]
        return " ".join(words)
    return rng.choice(cat)


def mixed(rng):
    parts = [fragment(rng) for _ in range(rng.randint(1, 6))]
    out = parts[0]
    for p in parts[1:]:
        out += rng.choice(["", " ", " ", " ", "\n", ", ", "  "]) + p
    return out


# Code point pools for random strings: ASCII, the spaces each library counts differently,
# Latin with accents, combining marks, CJK (BMP and Extension B), emoji, Arabic, private use,
# controls and noncharacters, case-mapping oddities (İ, Σ, ẞ, ŉ, ǰ, ligatures, Kelvin), digits
# of other scripts and numeric symbols.
POOLS = [list(range(0x20, 0x7F)),
         [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0xA0, 0x1680, 0x2000, 0x2028, 0x2029, 0x202F, 0x205F,
          0x3000, 0xFEFF, 0x200B, 0x200D, 0x180E],
         list(range(0xC0, 0x250)), list(range(0x300, 0x370)), list(range(0x4E00, 0x4E40)),
         list(range(0x20000, 0x20010)), list(range(0x1F600, 0x1F650)), list(range(0x600, 0x660)),
         list(range(0xE000, 0xE010)),
         [0x0, 0x1, 0x1F, 0x7F, 0xFFFD, 0xFFFE, 0xFFFF, 0x10FFFF, 0x130, 0x3A3, 0x1E9E, 0xDF, 0x149,
          0x1F0, 0xFB00, 0xFB01, 0x2126, 0x212A],
         list(range(0x30, 0x3A)) + [0x660, 0x661, 0x966, 0xFF10, 0xBD, 0xB2, 0x2160]]


def random_code_points(rng):
    return "".join(chr(rng.choice(rng.choice(POOLS))) for _ in range(rng.randint(1, 40)))


def long_text(rng, n):
    out = []
    while sum(len(p) for p in out) < n:
        out.append(mixed(rng))
    return " ".join(out)


def corpus():
    rng = random.Random(20240531)
    texts = list(FIXED)
    while len(texts) < 2000:
        texts.append(mixed(rng))
    texts += [random_code_points(rng) for _ in range(400)]
    texts += [long_text(rng, n) for n in (1000, 3000, 8000)]
    texts.append(" ".join(rng.choice(WORDS) for _ in range(2000)))  # long plain prose
    return texts


def main():
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(corpus(), f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
