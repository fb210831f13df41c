#!/usr/bin/python3
"""`mha analyze` (docs/analyses.md) against the float64 PyTorch references of reference.py on the
random checkpoints of checkpoints.py, and the independent checks each method has:

- loss: each next token's cross-entropy from the reference's logits; perplexity = exp(mean).
- logit lens: state s through the final norm and the LM head equals the reference forward of the
  same checkpoint cut to its first s layers (config num_hidden_layers = s); the last state is the
  model's own output logits.
- rollout: 0.5 A + 0.5 I (heads' mean of the reference's maps, rows renormalised), multiplied from
  layer 0 up; a one-layer model's rollout is that matrix itself.
- value-weighted norms: the reference's maps times ||(x W_V^h + b_V^h) W_O^h|| computed here from
  the stored tensors (GPT-2, LLaMA), and on every model_type from the values the reference's
  attention takes and the stored output projection.
- detectors: TransformerLens's previous-token, duplicate-token and induction patterns written
  here, sum(A * P) / sum(A) on the reference's maps; a hand-set induction head scores ~1.
- zero ablation: equals the reference run of a checkpoint whose W_O rows for that head are zeroed
  in the file; mean ablation differs from it.
- patching: clean = corrupt gives 0 everywhere; patching the one position where two texts differ
  at layer 0 gives 1; heads against a reference run with the head's output copied.
- bad input: one line naming the flag, exit 2, nothing written; the same bytes for 1 and 2 threads.

  MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_analyze.py [CLASS]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import reference  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
TOL = dict(rtol=1e-5, atol=1e-5)
CAUSAL = [f for f in checkpoints.FAMILIES if f not in ("bert", "roberta", "xlm-roberta")]
# Each family's output projection and the axis of its input features (a head's rows to zero).
W_O = {"gpt2": ("h.{l}.attn.c_proj.weight", 0), "llama": ("model.layers.{l}.self_attn.o_proj.weight", 1),
       "gemma2": ("model.layers.{l}.self_attn.o_proj.weight", 1),
       "gpt_neox": ("gpt_neox.layers.{l}.attention.dense.weight", 1),
       "phi3": ("model.layers.{l}.self_attn.o_proj.weight", 1),
       "opt": ("model.decoder.layers.{l}.self_attn.out_proj.weight", 1)}


def sizes(config):
    L = reference.num_layers(config)
    h = config.get("num_attention_heads", config.get("n_head"))
    E = config.get("hidden_size", config.get("n_embd"))
    return L, h, E, config.get("head_dim") or E // h


class AnalyzeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_analyze_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def model(self, family, name=None, T=12, B=2, seed=0, **kw):
        config, t = checkpoints.make(family, seed=seed, **kw)
        d = self.path(name or family)
        sd = checkpoints.write(d, config, t)
        ids = np.random.default_rng(seed + 5).integers(0, config["vocab_size"], (B, T))
        np.save(self.path("ids.npy"), ids)
        return d, config, t, sd, ids

    def analyze(self, d, *args, out="out", code=0, tokens=True):
        out = self.path(out)
        cmd = [MHA, "analyze", "--model", d, "--out_dir", out, "-q"] + \
            (["--tokens", self.path("ids.npy")] if tokens else []) + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, code, f"{' '.join(cmd)}\n{p.stderr}")
        return out, p

    def load(self, out, name):
        return np.load(os.path.join(out, name))

    def run_json(self, out):
        with open(os.path.join(out, "run.json")) as f:
            return json.load(f)


class Summary(AnalyzeTest):
    """Every method prints a short summary on stdout, its figures those of the arrays it wrote."""

    def test_each_method_summarised_from_its_arrays(self):
        d, config, t, sd, ids = self.model("gpt2", B=2, T=9)
        methods = ["loss", "logit_lens", "rollout", "flow", "norms", "detectors", "ablation"]
        out, p = self.analyze(d, *sum([["--method", m] for m in methods], []))
        lines = p.stdout.splitlines()
        for m in methods:
            self.assertTrue(any(x.startswith(m + ": ") for x in lines), (m, p.stdout))
        with open(os.path.join(out, "tokens.json")) as f:
            tokens = json.load(f)["tokens"]

        def top(values, labels):  # the summary's "label value" of the largest entry
            i = int(np.argmax(values))
            return f"{labels[i]} {float(values[i]):.3g}"

        L = sizes(config)[0]
        for name, arr in (("rollout", self.load(out, "rollout.npy")[L - 1]), ("flow", self.load(out, "flow.npy"))):
            for b in range(2):
                line = [x for x in lines if x.startswith(f"{name}: row {b}, ")]
                self.assertEqual(len(line), 1, p.stdout)
                labels = [json.dumps(x) for x in tokens[b]]
                self.assertIn(" from " + top(arr[b, 8, :9], labels), line[0])
        norms = self.load(out, "attention_norms.npy")  # (L, B, h, T, T)
        per_head = norms.sum(axis=(1, 3, 4)) / (2 * 9)
        line = [x for x in lines if x.startswith("norms: ")][0]
        self.assertIn(": " + top(per_head.ravel(), [f"L{l}H{h}" for l in range(L) for h in range(per_head.shape[1])]),
                      line)
        scores = self.load(out, "head_scores.npy")
        names = self.run_json(out)["summary"]["detectors"]
        for k, det in enumerate(names):
            line = [x for x in lines if x.startswith(f"detectors: {det}: ")][0]
            if scores[k].max() > 0:
                self.assertIn(top(scores[k].ravel(), [f"L{l}H{h}" for l in range(L) for h in range(scores.shape[2])]),
                              line)
            else:
                self.assertTrue(line.endswith("all 0"), line)
        agree = self.run_json(out)["summary"]["logit_lens"]["top1_accuracy_per_state"]
        line = [x for x in lines if x.startswith("logit_lens: ")][0]
        self.assertTrue(line.endswith(" ".join(f"{a:.2f}" for a in agree)), line)


class Lens(AnalyzeTest):
    def test_loss_and_logit_lens_every_causal_family(self):
        for family in CAUSAL:
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family)
                out, _ = self.analyze(d, "--method", "loss", "--method", "logit_lens", "--top_k", "3",
                                      out="out_" + family)
                ref = reference.forward(config, sd, ids)
                z = ref["logits"]
                lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
                want = lse[:, :-1] - np.take_along_axis(z[:, :-1], ids[:, 1:, None], -1)[..., 0]
                loss = self.load(out, "loss.npy")
                np.testing.assert_allclose(loss[:, :-1], want, **TOL)
                self.assertTrue(np.isnan(loss[:, -1]).all())
                summary = self.run_json(out)["summary"]["loss"]
                self.assertLess(abs(summary["perplexity"] / float(np.exp(want.mean())) - 1), 1e-5)
                L = reference.num_layers(config)
                p_next = self.load(out, "logit_lens_p_next.npy")
                rank = self.load(out, "logit_lens_rank.npy")
                self.assertEqual(p_next.shape, (L + 1, 2, 12))
                for s in range(L + 1):  # state s = the model cut to s layers
                    cut = dict(config, **{"num_hidden_layers" if "num_hidden_layers" in config else "n_layer": s})
                    zs = reference.forward(cut, sd, ids)["logits"]
                    ps = np.exp(zs - zs.max(-1, keepdims=True))
                    ps /= ps.sum(-1, keepdims=True)
                    want_p = np.take_along_axis(ps[:, :-1], ids[:, 1:, None], -1)[..., 0]
                    np.testing.assert_allclose(p_next[s, :, :-1], want_p, err_msg=f"state {s}", **TOL)
                    target = np.take_along_axis(zs[:, :-1], ids[:, 1:, None], -1)
                    want_rank = (zs[:, :-1] > target).sum(-1)
                    np.testing.assert_array_equal(rank[s, :, :-1], want_rank, err_msg=f"state {s}")
                    top = self.load(out, "logit_lens_top_ids.npy")[s]
                    np.testing.assert_array_equal(top[..., 0], zs.argmax(-1), err_msg=f"state {s}")
                np.testing.assert_allclose(p_next[L, :, :-1],  # the last state is the model's output
                                           np.take_along_axis(np.exp(z - lse[..., None])[:, :-1],
                                                              ids[:, 1:, None], -1)[..., 0], **TOL)

    def test_bert_has_no_lm_head(self):
        d, config, t, sd, ids = self.model("bert")
        out, p = self.analyze(d, "--method", "logit_lens", code=2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("has no LM head", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "run.json")))


class Maps(AnalyzeTest):
    def test_rollout_norms_detectors(self):
        for family in ("gpt2", "llama", "bert", "gemma2"):
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family)
                out, _ = self.analyze(d, "--method", "rollout", "--method", "norms", "--method",
                                      "detectors", out="out_" + family)
                ref = reference.forward(config, sd, ids)
                L, h, E, dh = sizes(config)
                R = None
                rollout = self.load(out, "rollout.npy")
                for layer, A in enumerate(ref["attentions"]):
                    Ahat = 0.5 * A.mean(1) + 0.5 * np.eye(A.shape[-1])
                    Ahat /= Ahat.sum(-1, keepdims=True)
                    R = Ahat if R is None else Ahat @ R
                    np.testing.assert_allclose(rollout[layer], R, err_msg=f"layer {layer}", **TOL)
                scores = self.load(out, "head_scores.npy")
                self.assertEqual(self.run_json(out)["summary"]["detectors"],
                                 ["previous_token", "duplicate_token", "induction"])
                for k, pattern in enumerate((previous_token, duplicate_token, induction)):
                    for layer, A in enumerate(ref["attentions"]):
                        want = np.mean([(A[b] * pattern(ids[b])).sum((-1, -2)) / A[b].sum((-1, -2))
                                        for b in range(len(ids))], 0)
                        np.testing.assert_allclose(scores[k, layer], want, err_msg=f"{k} {layer}", **TOL)
                norms = self.load(out, "attention_norms.npy")
                self.assertEqual(norms.shape, (L, 2, h, 12, 12))
                if family in ("gpt2", "llama"):
                    for layer, A in enumerate(ref["attentions"]):
                        f = value_norms(family, config, sd, ref["hidden_states"][layer], layer)
                        np.testing.assert_allclose(norms[layer], A * f[:, :, None, :],
                                                   err_msg=f"layer {layer}", **TOL)

    def test_rollout_over_several_row_blocks(self):
        """Rollout's product runs in blocks of 64 rows (a third of the work for causal maps, whose
        products stay lower triangular): at 150 tokens, three blocks, causal and bidirectional,
        against the reference, with the same bytes for 1 and 2 threads."""
        for family in ("gpt2", "bert"):
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family, T=150, B=1, max_positions=160)
                outs = []
                for threads in ("1", "2"):
                    out, _ = self.analyze(d, "--method", "rollout", "--threads", threads,
                                          out=f"rollout_{family}_{threads}")
                    outs.append(out)
                with open(os.path.join(outs[0], "rollout.npy"), "rb") as f1, \
                        open(os.path.join(outs[1], "rollout.npy"), "rb") as f2:
                    self.assertEqual(f1.read(), f2.read())
                rollout = self.load(outs[0], "rollout.npy")
                R = None
                for layer, A in enumerate(reference.forward(config, sd, ids)["attentions"]):
                    Ahat = 0.5 * A.mean(1) + 0.5 * np.eye(A.shape[-1])
                    Ahat /= Ahat.sum(-1, keepdims=True)
                    R = Ahat if R is None else Ahat @ R
                    np.testing.assert_allclose(rollout[layer], R, err_msg=f"layer {layer}", **TOL)
                if family == "gpt2":  # causal: exactly 0 above the diagonal
                    self.assertTrue((np.triu(rollout[-1, 0], 1) == 0).all())

    def test_value_norms_every_family(self):
        """||a_ij f_h(x_j)|| on every model_type: f_h(x_j) = v_h[j] W_O^h, with v_h[j] (bias included)
        the value the reference's own attention takes (captured from reference.attend) and W_O^h
        the head's rows of the stored output projection."""
        captured = []
        attend = reference.attend

        def capture(q, k, v, *args, **kw):
            captured.append(v.numpy())
            return attend(q, k, v, *args, **kw)

        for family in checkpoints.FAMILIES:
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family, T=9)
                out, _ = self.analyze(d, "--method", "norms", out="norms_" + family)
                del captured[:]
                reference.attend = capture
                try:
                    ref = reference.forward(config, sd, ids)
                finally:
                    reference.attend = attend
                L, h, E, dh = sizes(config)
                norms = self.load(out, "attention_norms.npy")
                self.assertEqual(norms.shape, (L, 2, h, 9, 9))
                self.assertEqual(len(captured), L)
                for layer, (A, v) in enumerate(zip(ref["attentions"], captured)):
                    Wo = output_projection(sd, layer)  # (h * dh, E)
                    f = np.stack([np.linalg.norm(v[:, head] @ Wo[head * dh:(head + 1) * dh], axis=-1)
                                  for head in range(h)], 1)  # (B, h, T)
                    np.testing.assert_allclose(norms[layer], A * f[:, :, None, :],
                                               err_msg=f"layer {layer}", **TOL)

    def test_attention_flow(self):
        """Attention flow (Abnar & Zuidema 2020) against an Edmonds-Karp max flow written here on
        the layers' graph of the reference's maps; longer than 128 tokens is refused."""
        for family in ("gpt2", "llama"):
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family, T=7)
                out, _ = self.analyze(d, "--method", "flow", out="flow_" + family)
                got = self.load(out, "flow.npy")
                maps = reference.forward(config, sd, ids)["attentions"]
                for b in range(len(ids)):
                    caps = []
                    for A in maps:
                        a = 0.5 * A[b].mean(0) + 0.5 * np.eye(7)
                        caps.append(a / a.sum(-1, keepdims=True))
                    for i in range(7):
                        for j in range(7):
                            self.assertAlmostEqual(float(got[b, i, j]), max_flow(caps, j, i), delta=1e-5)
        d, config, t, sd, ids = self.model("gpt2", T=130, max_positions=160, name="long")
        out, p = self.analyze(d, "--method", "flow", out="long_out", code=2)
        self.assertIn("up to 128 tokens", p.stderr)

    def test_one_layer_rollout(self):
        d, config, t, sd, ids = self.model("gpt2", layers=1)
        out, _ = self.analyze(d, "--method", "rollout")
        A = reference.forward(config, sd, ids)["attentions"][0].mean(1)
        want = 0.5 * A + 0.5 * np.eye(12)
        np.testing.assert_allclose(self.load(out, "rollout.npy")[0], want / want.sum(-1, keepdims=True), **TOL)

    def test_a_hand_set_induction_head(self):
        """A one-layer, one-head GPT-2 whose query for token a looks for the key of the token
        that followed a: on a random sequence repeated twice, every query of the second half
        attends to the token after its earlier copy. TransformerLens's score counts every query
        row in sum(A), and the first half's rows have no earlier copy, so a perfect head scores
        (n - 1/2) / 2n here, just under 0.5; a previous-token head's score stays near 0."""
        V, E, T = 64, 64 * 3, 20
        config, t = checkpoints.make("gpt2", layers=1, hidden=E, heads=1, vocab=V, max_positions=64)
        # embeddings: token one-hot in [0, V), position one-hot in [V, 2V); the previous token's
        # one-hot is written by hand into [2V, 3V) of the key side through wpe-free mixing:
        # keys see "token at s - 1", queries see "token at t" -> match = induction
        rng = np.random.default_rng(0)
        seq = rng.permutation(V)[:T // 2]
        ids = np.concatenate([seq, seq])[None]
        wte = np.zeros((V, E), np.float32)
        wte[np.arange(V), np.arange(V)] = 1
        wpe = np.zeros((64, E), np.float32)
        for k, n in t.items():
            if k.startswith("h.0.") and ("ln_" in k):
                t[k] = np.ones_like(n) if k.endswith("weight") else np.zeros_like(n)
        t["wte.weight"], t["wpe.weight"] = wte, wpe
        # previous-token features: the key of position s is token[s - 1], built into the ids'
        # embedding row of position s by summing position-specific one-hots is not possible with
        # token-only embeddings, so the keys' rows come from the tokens directly and the query is
        # the next token: P[t, s] high when token[s - 1] == token[t] <=> token[s] == next(token[t]).
        succ = {int(a): int(b) for a, b in zip(seq[:-1], seq[1:])}
        Wq = np.zeros((E, E), np.float32)
        for a, b in succ.items():
            Wq[a, b] = 40.0  # the query of token a looks for key token succ(a)
        Wk = np.eye(E, dtype=np.float32)
        Wv = np.zeros((E, E), np.float32)
        W = np.concatenate([Wq, Wk, Wv], 1)
        t["h.0.attn.c_attn.weight"], t["h.0.attn.c_attn.bias"] = W, np.zeros(3 * E, np.float32)
        d = self.path("induction")
        checkpoints.write(d, config, t)
        np.save(self.path("ids.npy"), ids)
        out, _ = self.analyze(d, "--method", "detectors")
        scores = self.load(out, "head_scores.npy")
        self.assertGreater(scores[2, 0, 0], 0.45, scores[:, 0, 0])  # induction, near its 0.5 bound
        self.assertLess(scores[0, 0, 0], 0.15, scores[:, 0, 0])     # not previous-token
        # the second half's queries (but the last, whose token ends the sequence): all their
        # weight on the induction key
        run = self.path("maps")
        p = subprocess.run([MHA, "run", "--model", d, "--tokens", self.path("ids.npy"), "--out_dir", run,
                            "--save_attention", "-q"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        A = np.load(os.path.join(run, "self_attention.npy"))[0, 0, 0]
        P = induction(ids[0])
        self.assertGreater((A * P)[T // 2:T - 1].sum(-1).min(), 0.95)


def max_flow(caps, source, sink):
    """Edmonds-Karp on the graph of node (l, i): edge (l - 1, j) -> (l, i) of capacity
    caps[l - 1][i, j]; from input `source` to the last layer's position `sink`."""
    L, n = len(caps), caps[0].shape[0]
    N = (L + 1) * n
    C = np.zeros((N, N))
    for l, a in enumerate(caps):
        C[l * n:(l + 1) * n, (l + 1) * n:(l + 2) * n] = a.T  # from (l, j) to (l + 1, i)
    s, t, total = source, L * n + sink, 0.0
    while True:
        parent = [-1] * N
        parent[s] = s
        queue = [s]
        for u in queue:
            for v in np.nonzero(C[u] > 1e-15)[0]:
                if parent[v] < 0:
                    parent[v] = u
                    queue.append(v)
        if parent[t] < 0:
            return total
        f, v = np.inf, t
        while v != s:
            f, v = min(f, C[parent[v], v]), parent[v]
        v = t
        while v != s:
            C[parent[v], v] -= f
            C[v, parent[v]] += f
            v = parent[v]
        total += f


def previous_token(tokens):
    n = len(tokens)
    P = np.zeros((n, n))
    P[np.arange(1, n), np.arange(n - 1)] = 1
    return P


def duplicate_token(tokens):
    P = (tokens[None, :] == tokens[:, None]).astype(float)
    np.fill_diagonal(P, 0)
    return np.tril(P)


def induction(tokens):
    dup = duplicate_token(tokens)
    shifted = np.roll(dup, 1, axis=1)
    shifted[:, 0] = 0
    return np.tril(shifted)


def output_projection(sd, layer):
    """The stored attention output projection of `layer` as (inputs h * dh, outputs E), whatever
    the family calls it (GPT-2's Conv1D is stored that way; nn.Linear's weight is transposed)."""
    conv1d = [k for k in sd if k.endswith(f"h.{layer}.attn.c_proj.weight")]
    if conv1d:
        return np.asarray(sd[conv1d[0]], np.float64)
    suffixes = (f"layers.{layer}.self_attn.o_proj.weight", f"layers.{layer}.attention.dense.weight",
                f"layers.{layer}.self_attn.out_proj.weight", f"layer.{layer}.attention.output.dense.weight")
    keys = [k for k in sd if k.endswith(suffixes)]
    assert len(keys) == 1, (layer, keys)
    return np.asarray(sd[keys[0]], np.float64).T


def value_norms(family, config, sd, x, layer):
    """||(x_j W_V^h + b_V^h) W_O^h|| (B, h, T) from the stored tensors, x the layer's input."""
    L, h, E, dh = sizes(config)
    sd = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    if family == "gpt2":
        p = f"h.{layer}."
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        y = (x - mu) / np.sqrt(var + config.get("layer_norm_epsilon", 1e-5)) * sd[p + "ln_1.weight"] + sd[p + "ln_1.bias"]
        v = y @ sd[p + "attn.c_attn.weight"][:, 2 * E:] + sd[p + "attn.c_attn.bias"][2 * E:]
        Wo = sd[p + "attn.c_proj.weight"]  # (in, out)
        kv = h
    else:
        p = f"model.layers.{layer}."
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + config.get("rms_norm_eps", 1e-6)) * sd[p + "input_layernorm.weight"]
        v = y @ sd[p + "self_attn.v_proj.weight"].T
        Wo = sd[p + "self_attn.o_proj.weight"].T
        kv = config.get("num_key_value_heads") or h
    B, T, _ = x.shape
    out = np.zeros((B, h, T))
    for head in range(h):
        g = head // (h // kv)
        f = v[..., g * dh:(g + 1) * dh] @ Wo[head * dh:(head + 1) * dh]
        out[:, head] = np.linalg.norm(f, axis=-1)
    return out


class Interventions(AnalyzeTest):
    def test_zero_ablation_equals_zeroed_weights(self):
        for family, (name, axis) in W_O.items():
            with self.subTest(family=family):
                d, config, t, sd, ids = self.model(family, T=10)
                L, h, E, dh = sizes(config)
                out, _ = self.analyze(d, "--method", "ablation", out="out_" + family)
                got = self.load(out, "ablation.npy")
                self.assertEqual(got.shape, (2, L, h))
                base = reference.forward(config, sd, ids)

                def mean_loss(r):
                    z = r["logits"]
                    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
                    return (lse[:, :-1] - np.take_along_axis(z[:, :-1], ids[:, 1:, None], -1)[..., 0]).mean(-1)
                clean = mean_loss(base)
                np.testing.assert_allclose(self.run_json(out)["summary"]["ablation"]["clean"], clean, **TOL)
                for layer, head in ((0, 0), (L - 1, h - 1), (L // 2, 1)):
                    zeroed = dict(sd)
                    w = np.array(sd[name.format(l=layer)], np.float64)
                    if axis == 0:
                        w[head * dh:(head + 1) * dh] = 0
                    else:
                        w[:, head * dh:(head + 1) * dh] = 0
                    zeroed[name.format(l=layer)] = w
                    want = mean_loss(reference.forward(config, zeroed, ids)) - clean
                    np.testing.assert_allclose(got[:, layer, head], want, err_msg=f"{layer}.{head}", **TOL)
                out2, _ = self.analyze(d, "--method", "ablation", "--ablation", "mean", out="mean_" + family)
                mean = self.load(out2, "ablation.npy")
                self.assertTrue(np.isfinite(mean).all())
                self.assertGreater(np.abs(mean - got).max(), 1e-4)

    def test_logit_diff_and_kl(self):
        tok, encode, V = tokenizer_files.byte_level_bpe(["the cat sat on the mat", " Paris Rome"])
        config, t = checkpoints.make("gpt2", vocab=V)
        d = self.path("gpt2")
        sd = checkpoints.write(d, config, t)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        text = "the cat sat on the mat"
        ids = np.array([encode(text)[0]])
        target, foil = encode(" Paris")[0], encode(" Rome")[0]
        self.assertEqual((len(target), len(foil)), (1, 1))  # the learned merges keep them whole
        out, _ = self.analyze(d, "--text", text, "--method", "ablation", "--target", " Paris",
                              "--foil", " Rome", tokens=False)
        z = reference.forward(config, sd, ids)["logits"][0, -1]
        clean = self.run_json(out)["summary"]["ablation"]
        self.assertEqual(clean["metric"], "logit_diff")
        self.assertAlmostEqual(clean["clean"][0], z[target[0]] - z[foil[0]], delta=1e-4)
        out, _ = self.analyze(d, "--text", text, "--method", "ablation", "--metric", "kl", out="kl",
                              tokens=False)
        kl = self.load(out, "ablation.npy")
        self.assertTrue((kl >= -1e-9).all() and kl.max() > 0)
        out, p = self.analyze(d, "--text", text, "--method", "ablation", "--target", " Paris Rome",
                              "--foil", " Rome", out="bad", code=2, tokens=False)
        self.assertIn("--target", p.stderr)
        self.assertIn("expected exactly one", p.stderr)

    def test_patching(self):
        tok, encode, V = tokenizer_files.byte_level_bpe(["the cat sat on the mat", "the dog sat on the mat"])
        config, t = checkpoints.make("llama", vocab=V)
        d = self.path("llama")
        checkpoints.write(d, config, t)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
        a, b = encode(clean)[0], encode(corrupt)[0]
        self.assertEqual(len(a), len(b))
        out, _ = self.analyze(d, "--method", "patching", "--clean", clean, "--corrupt", clean,
                              out="same", tokens=False)
        np.testing.assert_allclose(self.load(out, "patch_heads.npy"), 0, atol=1e-6)
        np.testing.assert_allclose(self.load(out, "patch_resid.npy"), 0, atol=1e-6)
        out, _ = self.analyze(d, "--method", "patching", "--clean", clean, "--corrupt", corrupt,
                              tokens=False)
        resid = self.load(out, "patch_resid.npy")
        where = [i for i in range(len(a)) if a[i] != b[i]]
        self.assertEqual(len(where), 1)
        self.assertAlmostEqual(float(resid[0, where[0]]), 1.0, delta=1e-5)  # all that differs
        others = [i for i in range(len(a)) if i != where[0]]
        np.testing.assert_allclose(resid[0, others], 0, atol=1e-5)  # identical positions
        out, p = self.analyze(d, "--method", "patching", "--clean", clean, "--corrupt", "a dog",
                              out="bad", code=2, tokens=False)
        self.assertIn("expected texts of equal token length", p.stderr)

    def test_same_bytes_for_any_thread_count(self):
        d, config, t, sd, ids = self.model("qwen2")
        outs = []
        for threads in ("1", "2"):
            out, _ = self.analyze(d, "--method", "rollout", "--method", "ablation", "--method", "norms",
                                  "--threads", threads, out="t" + threads)
            outs.append(out)
        for name in ("rollout.npy", "ablation.npy", "attention_norms.npy"):
            with open(os.path.join(outs[0], name), "rb") as f1, open(os.path.join(outs[1], name), "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), name)


class Corpus(AnalyzeTest):
    TEXTS = ["the cat sat on the mat", "a dog ran", "the mat sat on the cat and the dog",
             "cat", "the dog and the cat ran to the mat"]

    def setUp(self):
        super().setUp()
        self.tok, self.encode, V = tokenizer_files.byte_level_bpe(self.TEXTS)
        self.config, t = checkpoints.make("gpt2", vocab=V)
        self.d = self.path("gpt2")
        self.sd = checkpoints.write(self.d, self.config, t)
        with open(os.path.join(self.d, "tokenizer.json"), "w") as f:
            json.dump(self.tok, f)

    def test_statistics_over_a_corpus(self):
        """Per head, over every text's query rows: the mean entropy, distance, first-token and
        own-token weight of the reference's maps, and the detectors' mean over texts; batches of
        2 texts (padded) give the same as one text at a time, plain lines as JSON Lines."""
        with open(self.path("c.txt"), "w") as f:
            f.write("\n".join(self.TEXTS[:2]) + "\n\n" + "\n".join(self.TEXTS[2:]) + "\n")
        with open(self.path("c.jsonl"), "w") as f:
            for t in self.TEXTS:
                f.write(json.dumps({"text": t, "id": 1}) + "\n")
        with open(self.path("c.json"), "w") as f:  # as `mha tokenize --texts` takes them
            json.dump(self.TEXTS, f)
        L, h, E, dh = sizes(self.config)
        rows = {k: np.zeros((L, h)) for k in ("entropy", "distance", "first", "diag")}
        det = np.zeros((3, L, h))
        n_rows = 0
        for text in self.TEXTS:
            ids = np.array([self.encode(text)[0]])
            maps = reference.forward(self.config, self.sd, ids)["attentions"]
            T = ids.shape[1]
            n_rows += T
            for layer, A in enumerate(maps):
                a = A[0]  # (h, T, T)
                with np.errstate(divide="ignore", invalid="ignore"):
                    rows["entropy"][layer] += np.nansum(np.where(a > 0, -a * np.log(a), 0), (-1, -2))
                dist = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
                rows["distance"][layer] += (a * dist).sum((-1, -2))
                rows["first"][layer] += a[:, :, 0].sum(-1)
                rows["diag"][layer] += np.trace(a, axis1=-2, axis2=-1)
                for k, pattern in enumerate((previous_token, duplicate_token, induction)):
                    P = pattern(ids[0])
                    det[k, layer] += (a * P).sum((-1, -2)) / a.sum((-1, -2)) / len(self.TEXTS)
        want = np.stack([rows["entropy"] / n_rows, rows["distance"] / n_rows, rows["first"] / n_rows,
                         rows["diag"] / n_rows, det[0], det[1], det[2]])
        outs = []
        for name, batch in (("c.txt", "2"), ("c.jsonl", "1"), ("c.json", "5")):
            out, _ = self.analyze(self.d, "--method", "corpus", "--texts", self.path(name), "--batch", batch,
                                  out="out_" + name, tokens=False)
            got = self.load(out, "corpus_heads.npy")
            np.testing.assert_allclose(got, want, err_msg=name, **TOL)
            summary = self.run_json(out)["summary"]["corpus"]
            self.assertEqual(summary["texts"], len(self.TEXTS))
            self.assertEqual(summary["statistics"], ["entropy", "distance", "first_token", "diagonal",
                                                     "previous_token", "duplicate_token", "induction"])
            with open(os.path.join(out, "corpus_heads.csv")) as f:
                lines = f.read().splitlines()
            self.assertEqual(lines[0], "layer,head," + ",".join(summary["statistics"]))
            self.assertEqual(len(lines), 1 + L * h)
            self.assertAlmostEqual(float(lines[1].split(",")[2]), float(got[0, 0, 0]), delta=1e-6)
            outs.append(got)
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(outs[0], outs[2], rtol=1e-6, atol=1e-7)

    def test_bad_corpus_files(self):
        open(self.path("empty.txt"), "w").write("\n  \n")
        open(self.path("bad.jsonl"), "w").write('{"text": "a"}\n{"text": 3}\n')
        open(self.path("notjson.jsonl"), "w").write('{"text": "a"}\n\nnot json\n')
        for name, fragment in (("empty.txt", "holds no text"), ("bad.jsonl", "line 2"),
                               ("notjson.jsonl", "line 3: not JSON")):
            with self.subTest(file=name):
                out, p = self.analyze(self.d, "--method", "corpus", "--texts", self.path(name),
                                      out="bad", code=2, tokens=False)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(name, p.stderr)
                self.assertIn(fragment, p.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "run.json")))
        out, p = self.analyze(self.d, "--method", "loss", "--texts", self.path("empty.txt"),
                              out="bad", code=2, tokens=False)
        self.assertIn("--texts: used by --method corpus only", p.stderr)

    def test_corpus_errors_name_the_file_and_line(self):
        """A line over the model's positions, or not UTF-8, is named by its file and line (a JSON
        array's text by its element), as the corpus reader's own errors are."""
        P = self.config["n_positions"]
        long_txt, long_json = "the cat " * P, "a dog " * P
        with open(self.path("long.txt"), "w") as f:
            f.write("the cat\n\n" + long_txt + "\na dog\n")
        with open(self.path("long.json"), "w") as f:
            json.dump(["the cat", long_json], f)
        n_txt, n_json = len(self.encode(long_txt)[0]), len(self.encode(long_json)[0])
        self.assertGreater(min(n_txt, n_json), P)
        with open(self.path("bad.txt"), "wb") as f:
            f.write(b"the cat\r\na \xff dog\r\n")
        with open(self.path("bad.jsonl"), "wb") as f:
            f.write(b'{"text": "the cat"}\n{"text": "a \xc0\xaf dog"}\n')
        for name, fragment in (("long.txt", "long.txt: line 3: %d tokens are more than the model's %d "
                                            "positions" % (n_txt, P)),
                               ("long.json", "long.json: element 1: %d tokens are more than the "
                                             "model's %d positions" % (n_json, P)),
                               ("bad.txt", 'bad.txt: line 2: "a \\xff dog": invalid UTF-8 at byte 2 '
                                           '(0xff); expected UTF-8 text'),
                               ("bad.jsonl", 'bad.jsonl: line 2: "{"text": "a \\xc0\\xaf dog"}": '
                                             'invalid UTF-8 at byte 12 (0xc0)')):
            with self.subTest(file=name):
                out, p = self.analyze(self.d, "--method", "corpus", "--texts", self.path(name),
                                      out="bad", code=2, tokens=False)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(fragment, p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_text_that_is_not_utf8_is_refused_by_every_command(self):
        """Invalid UTF-8 in any text option: exit 2, one line naming the option, the text and the
        byte, in run, analyze and tokenize alike; nothing written."""
        cases = [
            (["run", "--model", self.d, "--text", b"the \xff cat"], '--text "the \\xff cat": invalid '
             "UTF-8 at byte 4 (0xff); expected UTF-8 text"),
            (["run", "--model", self.d, "--text", "the cat", "--text", b"a \xed\xa0\x80"],
             '--text "a \\xed\\xa0\\x80": invalid UTF-8 at byte 2 (0xed)'),
            (["analyze", "--model", self.d, "--method", "loss", "--text", b"the \xff cat"],
             '--text "the \\xff cat": invalid UTF-8 at byte 4 (0xff)'),
            (["analyze", "--model", self.d, "--method", "patching", "--clean", b"the \xc0\xaf",
              "--corrupt", "the cat"], '--clean "the \\xc0\\xaf": invalid UTF-8 at byte 4 (0xc0)'),
            (["analyze", "--model", self.d, "--method", "ablation", "--text", "the cat",
              "--target", b"\xf8"], '--target "\\xf8": invalid UTF-8 at byte 0 (0xf8)'),
            (["tokenize", self.d, "--text", b"the \xff cat"], '--text "the \\xff cat": invalid UTF-8 '
             "at byte 4 (0xff)"),
        ]
        for args, fragment in cases:
            with self.subTest(args=args):
                out = self.path("bad_utf8")
                argv = [MHA] + args + (["--out_dir", out] if args[0] != "tokenize" else [])
                p = subprocess.run(argv, capture_output=True, timeout=120)
                self.assertEqual(p.returncode, 2, p.stderr)
                err = p.stderr.decode("utf-8")  # the message itself is UTF-8
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(fragment, err)
                self.assertEqual(p.stdout, b"")
                self.assertFalse(os.path.exists(out))


class Errors(AnalyzeTest):
    def test_refusals(self):
        d, config, t, sd, ids = self.model("gpt2")
        cases = [
            ((), "--method: expected one or more"),
            (("--method", "rolout"), "--method \"rolout\""),
            (("--method", "loss", "--method", "loss"), "given twice"),
            (("--method", "patching"), "expected --clean TEXT and --corrupt TEXT"),
            (("--method", "ablation", "--ablation", "half"), "--ablation \"half\""),
            (("--method", "ablation", "--metric", "logit_diff"), "expected --target TEXT and --foil"),
            (("--method", "ablation", "--target", " Paris"), "--target"),
            (("--method", "loss", "--layer_indices", "9"), "layer_indices"),
        ]
        for args, fragment in cases:
            with self.subTest(args=args):
                out, p = self.analyze(d, *args, out="bad", code=2)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(fragment, p.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "run.json")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
