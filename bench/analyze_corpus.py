#!/usr/bin/python3
"""Per-head statistics over a corpus: `mha analyze --method corpus` against the PyTorch loop
people write (a forward per text returning the maps, then the statistics in torch).

The model: GPT-2-small shapes with a 4,096-token vocabulary and random weights (the checkpoint
bench/analyze_ablation.py writes, here with a byte-level BPE tokenizer.json added). The corpus:
--texts random texts of --words words each (about 64 tokens with the bench's 40 merges), one a
line. Statistics per head: mean entropy, attended distance, first-token and own-token weight
over every query row, and TransformerLens's previous-token, duplicate-token and induction scores.

  mha     `mha analyze --method corpus --texts FILE --batch 8 --threads N` (wall time), and its
          peak RSS (`/usr/bin/time -f %M`) for the corpus and for a tenth of it: memory flat.
  torch   PyTorch 1.13 in this process, float32, torch.set_num_threads(N), no_grad: per text
          a GPT-2 forward returning every layer's maps (bench/model_forward.py's), then the
          statistics with torch ops. --torch_texts times that many and scales.
The two sets of statistics are compared (max |difference|).

  /usr/bin/python3 bench/analyze_corpus.py [--texts 1000] [--threads 2] [--torch_texts 100]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import analyze_ablation  # noqa: E402
import model_forward  # noqa: E402
import safetensors_write as st  # noqa: E402
import tokenizer_files  # noqa: E402

WORDS = ("the cat sat on mat dog ran home fast slow red blue house tree river stone light dark "
         "old new big small one two three four").split()


def stats_torch(maps, ids):
    """(7, L, h) for one text: sums over rows of entropy, distance, first, diagonal, and the
    three detector scores (TransformerLens, mul), plus the row count."""
    T = ids.shape[0]
    pos = torch.arange(T)
    dist = (pos[:, None] - pos[None, :]).abs().float()
    prev = torch.zeros(T, T)
    prev[1:, :-1] = torch.eye(T - 1)
    dup = (ids[None, :] == ids[:, None]).float()
    dup.fill_diagonal_(0)
    dup = torch.tril(dup)
    ind = torch.roll(dup, 1, 1)
    ind[:, 0] = 0
    ind = torch.tril(ind)
    out = []
    for A in maps:  # (1, h, T, T)
        a = A[0]
        ent = -(a * torch.where(a > 0, a.log(), torch.zeros_like(a))).sum((-1, -2))
        rows = [ent, (a * dist).sum((-1, -2)), a[:, :, 0].sum(-1), a.diagonal(0, -2, -1).sum(-1)]
        total = a.sum((-1, -2))
        rows += [(a * p).sum((-1, -2)) / total for p in (prev, dup, ind)]
        out.append(torch.stack(rows))
    return torch.stack(out, 1)  # (7, L, h)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--words", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch_texts", type=int, default=100)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default="/tmp/mha_bench_ablation")
    a = ap.parse_args(argv)
    model = os.path.join(a.cache, "gpt2-small-v4096")
    analyze_ablation.ensure_checkpoint(model)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, a.words)) for _ in range(a.texts)]
    tok, encode, V = tokenizer_files.byte_level_bpe(texts[:50], merges=40)
    with open(os.path.join(model, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    ids = [encode(t)[0] for t in texts]
    corpus = os.path.join(a.cache, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(texts) + "\n")
    tenth = os.path.join(a.cache, "corpus_tenth.txt")
    with open(tenth, "w") as f:
        f.write("\n".join(texts[:max(1, a.texts // 10)]) + "\n")
    runs = {}
    for name, path in (("tenth", tenth), ("all", corpus)):
        out = os.path.join(a.cache, "corpus_" + name)
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", a.mha, "analyze", "--model", model, "--method",
                            "corpus", "--texts", path, "--batch", "8", "--threads", str(a.threads),
                            "--out_dir", out, "-q"], capture_output=True, text=True, check=True)
        runs[name] = (time.perf_counter() - t0, int(p.stderr.strip().splitlines()[-1]) / 1024, out)
    got = np.load(os.path.join(runs["all"][2], "corpus_heads.npy"))
    torch.set_num_threads(a.threads)
    w = {k: torch.from_numpy(np.array(v, dtype=np.float32))
         for k, v in st.load_file(os.path.join(model, "model.safetensors")).items()}
    n = min(a.torch_texts, a.texts)
    sums, rows = torch.zeros(7, 12, 12, dtype=torch.float64), 0
    with torch.no_grad():
        t0 = time.perf_counter()
        for i in range(n):
            x = torch.as_tensor(ids[i])[None]
            _, maps = model_forward.torch_gpt2(w, x, 12, 12)
            s = stats_torch(maps, x[0]).double()
            sums[:4] += s[:4]
            sums[4:] += s[4:]
            rows += x.shape[1]
        torch_s = (time.perf_counter() - t0) * a.texts / n
    want = torch.cat([sums[:4] / rows, sums[4:] / n]).numpy()
    if n == a.texts:
        diff = float(np.abs(got - want).max())
    else:  # statistics of a part of the corpus cannot be compared with the whole's
        diff = None
    mha_s, rss, _ = runs["all"]
    print(f"{a.texts} texts of ~{np.mean([len(i) for i in ids]):.0f} tokens, GPT-2-small shapes, {a.threads} threads")
    print(f"  mha analyze corpus {mha_s:8.2f} s   peak RSS {rss:.0f} MiB (a tenth of the corpus: "
          f"{runs['tenth'][1]:.0f} MiB)")
    print(f"  torch loop         {torch_s:8.2f} s   ({n} texts timed)   {torch_s / mha_s:.1f}x")
    if diff is not None:
        print(f"  max |mha - torch| of the statistics: {diff:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
