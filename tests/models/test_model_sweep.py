#!/usr/bin/python3
"""`mha sweep` of whole models (docs/sweeps.md, "Sweeps of models"): a grid of checkpoints x texts
x methods, each run exactly as `mha analyze` (or `mha run --model`) run by hand, on the random
checkpoints of checkpoints.py with a byte-level BPE tokenizer.json written here:

- Grid: every run's arrays are byte for byte those of the same `mha analyze` command; the rows'
  perplexity is the float64 PyTorch reference's exp(mean cross-entropy) of the run's ids; the
  per-layer logit-lens column is recomputed from the run's logit_lens_rank.npy; the run's
  config.json reruns it with `mha analyze --config`.
- ModelRuns: without "method" each run is `mha run --model` (maps byte for byte), and `mha run
  --config DIR/config.json` reruns it.
- Resume: --resume skips complete runs, reruns one whose run.json is gone or was made from another
  config; threads do not count.
- Shards: two --shard processes and --collect give the unsharded rows; scripts/parallel_sweep.sh
  (GNU parallel) does the same.
- Corpus: corpora x models, per-layer head statistics in the rows equal to the means of
  corpus_heads.npy; --report charts them, one line per layer.
- Every row validates against schemas/results-row.schema.json.
- Errors: sweep-file keys of the wrong kind, invalid runs listed at once (exit 2, nothing run),
  a job file given to the wrong command.

  MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_model_sweep.py [CLASS]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import reference  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.environ.get("MHA_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
TEXTS = ["the cat sat on the mat", "a dog ran", "the mat sat on the cat and the dog",
         "the dog and the cat ran to the mat"]
# Fields that differ between two runs of one config (when and how long).
TIMING = {"wall_ms", "started_at", "finished_at", "shard", "total_ms", "forward_ms",
          "read_weights_ms", "ablation_ms", "patching_ms", "corpus_ms", "run_dir"}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_model_sweep_")
        tok, self.encode, V = tokenizer_files.byte_level_bpe(TEXTS)
        self.models = {}
        for family in ("gpt2", "llama"):
            config, t = checkpoints.make(family, vocab=V)
            d = self.path("models", family)
            sd = checkpoints.write(d, config, t)
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(tok, f)
            self.models[family] = (d, config, sd)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def mha(self, *args, code=0, env=None):
        p = subprocess.run([MHA] + list(args), capture_output=True, text=True, timeout=600,
                           env=env)
        self.assertEqual(p.returncode, code, f"mha {' '.join(args)}\n{p.stderr}")
        return p

    def write_sweep(self, obj, name="sweep.json"):
        with open(self.path(name), "w") as f:
            json.dump(obj, f, indent=1)
        return self.path(name)

    def sweep(self, sweep_file, out, *flags, code=0, env=None):
        return self.mha("sweep", sweep_file, "--out_dir", out, *flags, code=code, env=env)

    def rows(self, out):
        """results.jsonl's rows, each checked against schemas/results-row.schema.json."""
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        with open(os.path.join(ROOT, "schemas", "results-row.schema.json")) as f:
            schema = jsonschema.Draft202012Validator(json.load(f))
        for row in rows:
            self.assertEqual([e.message for e in schema.iter_errors(row)], [], row)
        return rows

    def model_list(self):
        return [self.models["gpt2"][0], self.models["llama"][0]]


class Grid(Case):
    def test_models_by_texts_by_methods(self):
        methods = [["loss", "logit_lens"], ["rollout", "norms"]]
        s = self.write_sweep({"base": {"top_k": 3},
                              "grid": {"model": self.model_list(), "text": TEXTS[:2],
                                       "method": methods}})
        out = self.path("out")
        dry = self.sweep(s, out, "--dry_run").stdout.splitlines()
        self.assertIn("8 run(s) (2 x 2 x 2)", dry[0])
        self.assertEqual(sum(line.rstrip().endswith("valid") for line in dry[2:]), 8, dry)
        self.assertFalse(os.path.exists(out), "a dry run writes nothing")
        err = self.sweep(s, out, "--report").stderr
        self.assertIn("8 ok, 0 failed, 0 invalid, 0 without a result", err)
        self.assertIn("perplexity against", err)  # the report's default chart
        rows = self.rows(out)
        self.assertEqual([r["index"] for r in rows], list(range(8)))
        self.assertEqual(rows[0]["name"], "model=gpt2_text=the-cat-sat-on-the-mat_method=loss,logit_lens")
        i = 0
        for family in ("gpt2", "llama"):
            d, config, sd = self.models[family]
            L = reference.num_layers(config)
            for text in TEXTS[:2]:
                for m in methods:
                    row = rows[i]
                    i += 1
                    with self.subTest(family=family, text=text, method=m):
                        self.assertEqual((row["status"], row["model"], row["text"], row["method"]),
                                         ("ok", d, text, m))
                        self.assertEqual((row["model_type"], row["num_layers"], row["mode"]),
                                         (config.get("model_type"), L, "analyze"))
                        run_dir = row["run_dir"]
                        ids = np.array([self.encode(text)[0]])
                        tokens = load_json(os.path.join(run_dir, "tokens.json"))
                        self.assertEqual(tokens["ids"], ids.tolist())
                        # The same analysis by hand: the same bytes.
                        by_hand = self.path("by_hand")
                        args = ["analyze", "--model", d, "--text", text, "--top_k", "3",
                                "--out_dir", by_hand, "-q"]
                        for name in m:
                            args += ["--method", name]
                        self.mha(*args)
                        arrays = load_json(os.path.join(by_hand, "run.json"))["arrays"]
                        self.assertTrue(arrays)
                        for name in arrays:
                            self.assertEqual(read_bytes(os.path.join(run_dir, name)),
                                             read_bytes(os.path.join(by_hand, name)), name)
                        if "loss" in m:
                            z = reference.forward(config, sd, ids)["logits"]
                            lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
                            ce = lse[:, :-1] - np.take_along_axis(z[:, :-1], ids[:, 1:, None], -1)[..., 0]
                            self.assertLess(abs(row["perplexity"] / float(np.exp(ce.mean())) - 1), 1e-5)
                            self.assertAlmostEqual(row["loss"], float(ce.mean()), delta=1e-5)
                            rank = np.load(os.path.join(run_dir, "logit_lens_rank.npy"))
                            self.assertEqual(rank.shape[0], L + 1)
                            want = (rank[:, 0, :-1] == 0).mean(-1)
                            np.testing.assert_allclose(row["logit_lens_top1_per_layer"], want)
                            self.assertEqual(row["logit_lens_top1"], want[-1])
                        else:
                            self.assertNotIn("perplexity", row)
                        # config.json reruns it: `mha analyze --config` (out_dir overridden).
                        again = self.path("again")
                        self.mha("analyze", "--config", os.path.join(run_dir, "config.json"),
                                 "--out_dir", again, "-q")
                        for name in arrays:
                            self.assertEqual(read_bytes(os.path.join(run_dir, name)),
                                             read_bytes(os.path.join(again, name)), name)
                        self.assertEqual(load_json(os.path.join(again, "run.json"))["config"]["method"], m)
        self.assertTrue(os.path.getsize(os.path.join(out, "report.html")) > 0)
        self.assertTrue(os.path.getsize(os.path.join(out, "report.png")) > 0)
        with open(os.path.join(out, "results.csv")) as f:
            header = f.readline().strip().split(",")
        for col in ("model", "text", "method", "perplexity", "logit_lens_top1_per_layer"):
            self.assertIn(col, header)


class ModelRuns(Case):
    def test_runs_without_method_are_model_runs(self):
        s = self.write_sweep({"base": {"text": TEXTS[:2], "save_attention": True},
                              "grid": {"model": self.model_list(), "layer_indices": [0, [0, 1]]},
                              "name": "{model}_L{layer_indices}"})
        out = self.path("out")
        self.sweep(s, out)
        rows = self.rows(out)
        self.assertEqual([r["name"] for r in rows], ["gpt2_L0", "gpt2_L0,1", "llama_L0", "llama_L0,1"])
        for row in rows:
            with self.subTest(name=row["name"]):
                self.assertEqual(row["mode"], "model")
                self.assertEqual((row["batch"], row["tokens"]),
                                 (2, sum(len(self.encode(t)[0]) for t in TEXTS[:2])))
                self.assertIsInstance(row["next_token"], str)
                self.assertGreater(row["next_token_p"], 0)
                self.assertIn("forward_ms", row)
                layers = row["layer_indices"] if isinstance(row["layer_indices"], list) else [row["layer_indices"]]
                by_hand = self.path("by_hand")
                self.mha("run", "--model", row["model"], "--text", TEXTS[0], "--text", TEXTS[1],
                         "--save_attention", "--layer_indices", ",".join(map(str, layers)),
                         "--out_dir", by_hand, "-q")
                for name in ("self_attention.npy", "output.npy", "tokens.json"):
                    self.assertEqual(read_bytes(os.path.join(row["run_dir"], name)),
                                     read_bytes(os.path.join(by_hand, name)), name)
                again = self.path("again")
                self.mha("run", "--config", os.path.join(row["run_dir"], "config.json"),
                         "--out_dir", again, "--threads", "1", "-q")
                self.assertEqual(read_bytes(os.path.join(row["run_dir"], "self_attention.npy")),
                                 read_bytes(os.path.join(again, "self_attention.npy")))
                ran = load_json(os.path.join(again, "run.json"))["config"]
                self.assertEqual((ran["threads"], ran["out_dir"]), (1, again))


class Resume(Case):
    def test_resume_skips_complete_runs_and_reruns_changed_ones(self):
        sweep = {"base": {"method": "loss"},
                 "grid": {"model": self.model_list(), "text": TEXTS[:3]}}
        s, out = self.write_sweep(sweep), self.path("out")
        self.sweep(s, out)
        rows = self.rows(out)
        self.assertEqual(len(rows), 6)
        err = self.sweep(s, out, "--resume").stderr
        self.assertIn("0 to do (6 already complete)", err)
        # Threads do not change results: still complete.
        sweep["base"]["threads"] = 1
        s = self.write_sweep(sweep)
        self.assertIn("0 to do (6 already complete)", self.sweep(s, out, "--resume").stderr)
        # A run.json gone, and one made from another config: those two run again.
        os.remove(os.path.join(rows[1]["run_dir"], "run.json"))
        other = os.path.join(rows[4]["run_dir"], "run.json")
        j = load_json(other)
        j["config"]["text"] = ["another text"]
        with open(other, "w") as f:
            json.dump(j, f)
        dry = self.sweep(s, out, "--dry_run", "--resume").stdout
        self.assertEqual(dry.count("valid, done (--resume skips it)"), 4, dry)
        err = self.sweep(s, out, "--resume").stderr
        self.assertIn("2 to do (4 already complete)", err)
        again = self.rows(out)
        for a, b in zip(rows, again):
            self.assertEqual({k: v for k, v in a.items() if k not in TIMING | {"threads"}},
                             {k: v for k, v in b.items() if k not in TIMING | {"threads"}})


class Shards(Case):
    def make(self):
        return self.write_sweep({"base": {"method": ["loss", "detectors"]},
                                 "grid": {"model": self.model_list(), "text": TEXTS}})

    def strip(self, rows):
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]

    def test_two_shards_then_collect(self):
        s = self.make()
        whole = self.path("whole")
        self.sweep(s, whole)
        out = self.path("out")
        for i in range(2):
            self.assertIn(f"shard {i}/2 finished", self.sweep(s, out, "--shard", f"{i}/2").stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "results.jsonl")))
        err = self.sweep(s, out, "--collect").stderr
        self.assertIn("8 run(s): 8 ok, 0 failed, 0 invalid, 0 without a result yet", err)
        self.assertEqual(self.strip(self.rows(out)), self.strip(self.rows(whole)))
        for r in self.rows(out):
            self.assertEqual(r["shard"], f"{r['index'] % 2}/2")

    def test_gnu_parallel(self):
        parallel = shutil.which("parallel")
        self.assertIsNotNone(parallel, "GNU parallel is missing: scripts/setup.sh --test installs it")
        s, out = self.make(), self.path("out")
        env = dict(os.environ, HOME=self.tmp, MHA=MHA)
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "parallel_sweep.sh"), s, "2",
                            "--out_dir", out], capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("8 run(s): 8 ok, 0 failed, 0 invalid, 0 without a result yet", p.stderr)
        rows = self.rows(out)
        self.assertEqual([r["index"] for r in rows], list(range(8)))
        self.assertTrue(all("perplexity" in r for r in rows))


class Corpus(Case):
    def test_corpora_by_models_and_report(self):
        for i, name in enumerate(("c1.txt", "c2.txt")):
            with open(self.path(name), "w") as f:
                f.write("\n".join(TEXTS[i:i + 3]) + "\n")
        s = self.write_sweep({"base": {"method": "corpus", "batch": 2},
                              "grid": {"texts": [self.path("c1.txt"), self.path("c2.txt")],
                                       "model": self.model_list()}})
        out = self.path("out")
        self.sweep(s, out)
        rows = self.rows(out)
        self.assertEqual([r["name"] for r in rows],
                         ["texts=c1.txt_model=gpt2", "texts=c1.txt_model=llama",
                          "texts=c2.txt_model=gpt2", "texts=c2.txt_model=llama"])
        stats = ["entropy", "distance", "first_token", "diagonal", "previous_token",
                 "duplicate_token", "induction"]
        for row in rows:
            heads = np.load(os.path.join(row["run_dir"], "corpus_heads.npy"))
            self.assertEqual(row["corpus_texts"], 3)
            for k, stat in enumerate(stats):
                np.testing.assert_allclose(row[f"corpus_{stat}_per_layer"], heads[k].mean(-1),
                                           rtol=1e-12, err_msg=stat)
        self.mha("view", out, "--y", "corpus_induction_per_layer", "--x", "texts", "--group", "model",
                 "-o", self.path("report.html"), "--png", self.path("report.png"))
        with open(self.path("report.html")) as f:
            page = f.read()
        self.assertIn("corpus_induction_per_layer", page)
        self.assertIn("_per_layer') ? 'layer ' : 'head '", page)  # the page's series names


class Errors(Case):
    def one_line(self, p, fragment):
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(fragment, lines[0])

    def test_sweep_files(self):
        models = self.model_list()
        cases = [
            ({"base": {"h": 2}, "grid": {"model": models}},
             "base: 'h' is not a key of a model run"),
            ({"base": {"text": "a"}, "grid": {"model": models, "seq_len": [4]}},
             "grid: 'seq_len' is not a key of a model run"),
            ({"base": {"d_model": 8}, "grid": {"method": ["loss"]}},
             "'method' is a key of model runs; give \"model\""),
            ({"base": {"text": "a"}, "grid": {"model": models, "methd": ["loss"]}},
             "unknown key of a model run 'methd' (did you mean 'method'?)"),
        ]
        for sweep, fragment in cases:
            with self.subTest(fragment=fragment):
                p = self.sweep(self.write_sweep(sweep), self.path("out"), "--dry_run", code=2)
                self.one_line(p, fragment)
                self.assertFalse(os.path.exists(self.path("out")))

    def test_invalid_runs_are_listed_before_anything_runs(self):
        models = self.model_list() + [self.path("models", "missing")]
        s = self.write_sweep({"base": {"text": "the cat"},
                              "grid": {"model": models,
                                       "method": ["loss", "flow", "patching", "rolout"]}})
        out = self.path("out")
        p = self.sweep(s, out, code=2)
        for fragment in ("missing: not a directory", "--method patching: expected --clean",
                         "--method \"rolout\"", "8 of the runs in shard 0/1 are invalid"):
            self.assertIn(fragment, p.stderr)
        self.assertFalse(os.path.exists(out), "nothing runs, nothing is written")
        # --skip_invalid runs the rest: loss and flow on the two models.
        p = self.sweep(s, out, "--skip_invalid")
        self.assertIn("4 ok, 0 failed, 8 invalid, 0 without a result", p.stderr)
        # Types are checked per run, by name.
        s = self.write_sweep({"base": {"text": 3}, "grid": {"model": models[:1]}})
        p = self.sweep(s, self.path("out2"), "--dry_run", code=2)
        self.assertIn("\"text\": expected a string or a non-empty list of strings, got 3", p.stdout)

    def test_job_files_given_to_the_wrong_command(self):
        d = self.models["gpt2"][0]
        analysis, run = self.path("analysis.json"), self.path("run.json")
        with open(analysis, "w") as f:
            json.dump({"model": d, "text": "the cat", "method": "loss"}, f)
        with open(run, "w") as f:
            json.dump({"model": d, "text": "the cat"}, f)
        self.one_line(self.mha("run", "--config", analysis, code=2),
                      "holds an analysis (\"method\"); run it with `mha analyze --config")
        self.one_line(self.mha("analyze", "--config", run, code=2),
                      "holds a model run without \"method\"; run it with `mha run --config")
        self.one_line(self.mha("run", "--config", run, "--h", "2", code=2),
                      "expected no other flag than --out_dir, --threads, --max_memory and --json (got --h)")
        self.one_line(self.mha("analyze", "--config", analysis, "--method", "rollout", code=2),
                      "(got --method)")
        self.one_line(self.mha("analyze", "--method", "loss", code=2),
                      "--model: expected a checkpoint directory (or --config FILE)")


if __name__ == "__main__":
    unittest.main()
