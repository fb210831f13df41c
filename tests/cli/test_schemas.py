#!/usr/bin/python3
"""run.json and sweep results rows against schemas/run.schema.json and
schemas/results-row.schema.json (python3-jsonschema), on runs that between them write every
optional key: attention statistics, a plot, saved weights and inputs, attention_axes, bfloat16,
and a sweep with a run that fails.

  /usr/bin/python3 tests/cli/test_schemas.py [Class]   (MHA_BIN = path to mha,
                                                       MHA_SOURCE_DIR = repository root)
"""
import copy
import json
import os
import resource
import shutil
import subprocess
import tempfile
import unittest

import jsonschema
import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))


def schema(name):
    with open(os.path.join(ROOT, "schemas", name)) as f:
        s = json.load(f)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_schemas_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def mha(self, args, code=0, **kw):
        p = subprocess.run([MHA] + args + ["-q"], capture_output=True, text=True, cwd=ROOT,
                           timeout=300, **kw)
        self.assertEqual(p.returncode, code, p.stderr)
        return p


class RunJson(Case):
    RUNS = {
        "default": ["--config", "configs/default.json"],
        "cross": ["--config", "configs/cross_attention.json", "--save_weights", "native",
                  "--save_inputs", "--plot"],
        "averaged": ["--config", "configs/float64_averaged.json"],
        "padded": ["--config", "configs/causal_padded.json"],
        "variants": ["--h", "4", "--d_model", "32", "--seq_len", "9", "--dtype", "bfloat16",
                     "--output_dtype", "float16", "--save_attention", "--kv_heads", "2",
                     "--window", "3", "--alibi", "--softcap", "30", "--causal", "bottom-right",
                     "--masked_rows", "nan", "--kv_seq_len", "5"],
        "streamed": ["--h", "2", "--d_model", "16", "--seq_len", "700", "--causal", "true"],
        "decoder": ["--layer", "decoder", "--h", "2", "--d_model", "8", "--seq_len", "4",
                    "--kv_seq_len", "5", "--num_layers", "2", "--save_attention",
                    "--save_hidden_states", "--save_weights", "--save_inputs"],
        "encoder": ["--config", "configs/encoder.json"],
    }

    def test_every_run_json_validates(self):
        v = schema("run.schema.json")
        q = os.path.join(self.dir, "q.npy")
        np.save(q, np.random.default_rng(0).random((2, 3, 4, 16), dtype=np.float32))
        runs = dict(self.RUNS, axes=["--query", q, "--h", "2", "--attention_axes", "1,2",
                                     "--save_attention"])
        seen = set()
        for name, args in runs.items():
            out = os.path.join(self.dir, name)
            self.mha(["run"] + args + ["--out_dir", out])
            with open(os.path.join(out, "run.json")) as f:
                report = json.load(f)
            errors = [e.message for e in v.iter_errors(report)]
            self.assertEqual(errors, [], f"run.json of {name}")
            self.assertEqual(report["schema_version"], 1)
            seen |= set(report)
        # the runs above write every key the schema knows
        self.assertEqual(seen, set(v.schema["properties"]))

    def test_the_schema_can_fail(self):
        v = schema("run.schema.json")
        out = os.path.join(self.dir, "d")
        self.mha(["run", "--config", "configs/default.json", "--out_dir", out])
        with open(os.path.join(out, "run.json")) as f:
            good = json.load(f)
        for change in (lambda r: r.pop("timings_ms"), lambda r: r.update(undocumented=1),
                       lambda r: r["config"].update(h="8"),
                       lambda r: r.update(schema_version=2)):
            bad = copy.deepcopy(good)
            change(bad)
            self.assertFalse(v.is_valid(bad))


class ResultsRows(Case):
    def test_rows_validate_ok_and_failed(self):
        v = schema("results-row.schema.json")
        sweep = os.path.join(self.dir, "s.json")
        with open(sweep, "w") as f:
            json.dump({"base": {"h": 2, "d_model": 8, "save_attention": True},
                       "grid": {"seq_len": [8, 1024, 16]}}, f)
        out = os.path.join(self.dir, "out")
        limit = 1 << 20  # the seq_len 1024 run cannot write its attention.npy

        def small_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        self.mha(["sweep", sweep, "--out_dir", out], code=1, preexec_fn=small_files)
        with open(os.path.join(out, "results.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["status"] for r in rows], ["ok", "failed", "ok"])
        for r in rows:
            self.assertEqual([e.message for e in v.iter_errors(r)], [], r)
            self.assertEqual(r["schema_version"], 1)
        bad = dict(rows[0], error="x")  # an ok row with an error
        self.assertFalse(v.is_valid(bad))
        self.assertFalse(v.is_valid({k: x for k, x in rows[1].items() if k != "exit_code"}))


if __name__ == "__main__":
    unittest.main(verbosity=2)
