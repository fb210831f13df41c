#!/usr/bin/python3
"""The command line's spelling (docs/interface.md) against the real binary: each subcommand's
--help lists exactly the options of the table, every multi-word option is accepted with dashes,
renamed options still work with a deprecation warning (silent under -q), and every --help ends
with examples.

  /usr/bin/python3 tests/cli/test_interface.py [Class]   (MHA_BIN = path to mha,
                                                         MHA_SOURCE_DIR = repository root)
"""
import os
import pty
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.environ.get("MHA_SOURCE_DIR", os.getcwd())
COMMANDS = ["run", "weights convert", "compare", "bench", "sweep", "inspect", "plot", "view",
            "tokenize"]


def run(args, cwd=None):
    p = subprocess.run([MHA] + args, capture_output=True, text=True, cwd=cwd, timeout=120)
    return p.returncode, p.stdout, p.stderr


def help_options(command):
    rc, out, err = run(command.split() + ["--help"])
    assert rc == 0, err
    options = []
    for line in out.splitlines():
        m = re.match(r"^  ((?:-[a-z],)?--[a-z_0-9-]+(?:,--[a-z_0-9-]+)*)", line)
        if m:
            options.append(m.group(1))
    return options, out


def documented_options():
    """The first table of docs/interface.md: command -> its option spellings."""
    with open(os.path.join(ROOT, "docs", "interface.md")) as f:
        text = f.read()
    table = {}
    for line in text.splitlines():
        if table and not line.startswith("|"):
            break  # the first table only
        m = re.match(r"^\| (run|weights convert|compare|bench|sweep|inspect|plot|view|tokenize|\(all\)) \| (.*) \|$",
                     line)
        if m:
            table[m.group(1)] = re.findall(r"`(-[^`]+)`", m.group(2))
    return table


class Spelling(unittest.TestCase):
    def test_help_matches_the_documented_table(self):
        table = documented_options()
        self.assertEqual(sorted(table), sorted(COMMANDS + ["(all)"]))
        for command in COMMANDS:
            got, _ = help_options(command)
            want = ["-h,--help"] + table[command]
            self.assertEqual(sorted(got), sorted(want), f"mha {command} --help vs docs/interface.md")

    def test_one_spelling_each_with_underscores(self):
        for command in COMMANDS:
            for spelling in help_options(command)[0]:
                longs = [n for n in spelling.split(",") if n.startswith("--")]
                self.assertEqual(len(longs), 1, f"mha {command}: {spelling} has several long names")
                self.assertNotIn("-", longs[0][2:], f"mha {command}: {spelling} uses dashes")

    def test_a_name_means_one_thing(self):
        # the clashes docs/interface.md resolves: no subcommand but run has --batch or --scale
        for command in COMMANDS:
            names = {n for s in help_options(command)[0] for n in s.split(",")}
            if command != "run":
                self.assertNotIn("--batch", names, command)
                self.assertNotIn("--scale", names, command)
            self.assertNotIn("--heads", names, command)
            self.assertNotIn("--average", names, command)

    def test_every_help_ends_with_examples(self):
        for command in COMMANDS:
            _, out = help_options(command)
            examples = [l for l in out.splitlines() if l.startswith("  mha ")]
            self.assertGreaterEqual(len(examples), 2, f"mha {command} --help has no examples")
            self.assertIn("Examples", out)


def help_groups(command):
    """mha <command> --help's option groups: heading -> [(option, its value hint or None)]."""
    rc, out, err = run(command.split() + ["--help"])
    assert rc == 0, err
    groups, heading = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            groups[heading] = []
            continue
        m = re.match(r"^  (?:-[a-z],)?(--[a-z_0-9]+)(?: ([A-Z]+))?", line)
        if m and heading is not None:
            groups[heading].append((m.group(1), m.group(2)))
    return {h: opts for h, opts in groups.items() if opts}


class RunGroups(unittest.TestCase):
    """mha run --help groups its options by the runs they apply to (run/model_options.hpp's
    table): every option of "Model runs" is refused without --model, every option of "Layer
    runs" with it, and those of "Every run" are taken by both; each refusal names the option."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_groups_")
        self.groups = help_groups("run")
        heads = list(self.groups)
        self.assertEqual(len(heads), 3, heads)
        self.every, self.layer, self.model = (self.groups[h] for h in heads)
        self.assertEqual(heads[0], "Every run")
        self.assertTrue(heads[1].startswith("Layer runs"), heads[1])
        self.assertTrue(heads[2].startswith("Model runs"), heads[2])

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def given(option, hint):
        return [option] if hint is None else [option, {"INT": "1", "BOOL": "true"}.get(hint, "x")]

    def test_the_groups(self):
        names = lambda group: {o for o, _ in group}
        every, layer, model = names(self.every), names(self.layer), names(self.model)
        self.assertFalse(every & layer or every & model or layer & model)
        listed, _ = help_options("run")
        self.assertEqual(len(listed), len(every | layer | model))  # each option in one group
        self.assertEqual(model, {"--model", "--text", "--tokens", "--image", "--target_text",
                                 "--target_tokens", "--layer_indices", "--head_indices",
                                 "--save_qk", "--save_sites", "--top_k"})
        for o in ("--help", "--config", "--json", "--html", "--out_dir", "--save_attention",
                  "--save_hidden_states", "--threads", "--max_memory", "--dtype"):
            self.assertIn(o, every)
        for o in ("--h", "--d_model", "--causal", "--repeat", "--weights"):
            self.assertIn(o, layer)

    def test_a_model_option_without_model_is_refused_by_name(self):
        for option, hint in self.model:
            if option == "--model":
                continue
            out = os.path.join(self.dir, "out")
            rc, _, err = run(["run", *self.given(option, hint), "--out_dir", out], cwd=self.dir)
            self.assertEqual(rc, 2, f"{option}: {err}")
            self.assertIn(f"{option}: an option of whole-model runs", err)
            self.assertIn("give --model DIR", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertFalse(os.path.exists(out))

    def test_a_layer_option_with_model_is_refused_by_name(self):
        model = os.path.join(self.dir, "no_model")
        for option, hint in self.layer:
            rc, _, err = run(["run", "--model", model, "--text", "hi", *self.given(option, hint)],
                             cwd=self.dir)
            self.assertEqual(rc, 2, f"{option}: {err}")
            said = "not supported with --model" if option == "--repeat" else "not used with --model"
            self.assertIn(f"{option}: {said}", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_every_run_options_are_taken_with_model(self):
        # Taken, not refused: the run goes on to the checkpoint, which is missing.
        model = os.path.join(self.dir, "no_model")
        for option, hint in self.every:
            if option in ("--help", "--config"):
                continue
            value = {"--dtype": ["bfloat16"], "--max_memory": ["1GiB"],
                     "--out_dir": [os.path.join(self.dir, "o")]}.get(option)
            args = [option, *value] if value else self.given(option, hint)
            rc, _, err = run(["run", "--model", model, "--text", "hi", *args], cwd=self.dir)
            self.assertEqual(rc, 2, f"{option}: {err}")
            self.assertIn(model, err)
            self.assertNotIn("with --model", err)

    def test_float64_is_a_layer_runs_dtype(self):
        model = os.path.join(self.dir, "no_model")
        rc, _, err = run(["run", "--model", model, "--text", "hi", "--dtype", "float64"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--dtype \"float64\": expected float32 or bfloat16 for a model (model runs "
                      "compute in float32, or in bfloat16", err)
        out = os.path.join(self.dir, "layer")
        rc, _, err = run(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--dtype", "float64",
                          "--out_dir", out, "-q"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(np.load(os.path.join(out, "output.npy")).dtype, np.float64)


class Aliases(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_interface_")
        a = np.random.default_rng(0).random((2, 3, 4, 5)).astype(np.float32)
        self.attn = os.path.join(self.dir, "a.npy")
        np.save(self.attn, a / a.sum(-1, keepdims=True))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def png(self, name, *args, quiet=False):
        out = os.path.join(self.dir, name)
        rc, _, err = run(["plot", self.attn, "-o", out] + list(args) + (["-q"] if quiet else []))
        self.assertEqual(rc, 0, err)
        with open(out, "rb") as f:
            return f.read(), err

    def test_dashes_spell_the_same_option(self):
        new, _ = self.png("new.png", "--batch_index", "1", "--max_cells", "2")
        dashed, err = self.png("dashed.png", "--batch-index", "1", "--max-cells=2")
        self.assertEqual(new, dashed)
        self.assertNotIn("deprecated", err)
        out = os.path.join(self.dir, "run")
        rc, _, err = run(["run", "--h", "2", "--d-model", "8", "--seq-len", "3", "--out-dir", out,
                          "--save-attention", "-q"])
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(os.path.join(out, "attention.npy")))

    def test_old_plot_names_work_and_warn(self):
        new, _ = self.png("new.png", "--batch_index", "1", "--head_indices", "0,2",
                          "--average_heads", "--color_scale", "log")
        old, err = self.png("old.png", "--batch", "1", "--heads", "0,2", "--average",
                            "--scale", "log")
        self.assertEqual(new, old)
        warnings = [l for l in err.splitlines() if "deprecated" in l]
        self.assertEqual(len(warnings), 4, err)
        self.assertIn("mha: warning: mha plot: --batch is deprecated and will be removed; use "
                      "--batch_index", warnings[0])
        _, err = self.png("quiet.png", "--heads", "0", quiet=True)
        self.assertEqual(err, "")

    def test_old_inspect_and_run_names(self):
        rc, out, err = run(["inspect", "--heads-axis", "1", "--json", self.attn])
        self.assertEqual(rc, 0, err)
        self.assertIn("--head_axis", err)
        rc2, out2, _ = run(["inspect", "--head_axis", "1", "--json", self.attn])
        self.assertEqual(out, out2)
        rc, out, err = run(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--out_dir",
                            os.path.join(self.dir, "r"), "--print-json"])
        self.assertEqual(rc, 0, err)
        self.assertIn('"schema_version"', out)
        self.assertIn("use --json", err)

    def test_unknown_option_is_named(self):
        rc, out, err = run(["plot", self.attn, "--batch-idx", "1"])
        self.assertEqual(rc, 2)
        self.assertIn("unknown option --batch-idx", err)
        self.assertEqual(out, "")


def run_on_tty(args, env_extra):
    """Runs mha with stderr on a pseudo-terminal; returns (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    env = dict(os.environ, **env_extra)
    p = subprocess.Popen([MHA] + args, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(timeout=120), got.decode(errors="replace")


class ProgressLine(unittest.TestCase):
    # 1024 blocks of causal attention with maps: about a second on 2 cores
    LONG = ["run", "--h", "4", "--d_model", "64", "--seq_len", "4096", "--batch", "2",
            "--causal", "true", "--save_attention"]

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_progress_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_a_terminal_gets_stages_blocks_and_eta(self):
        rc, tty = run_on_tty(self.LONG + ["--out_dir", os.path.join(self.dir, "a")],
                             {"MHA_PROGRESS_AFTER_MS": "0"})
        self.assertEqual(rc, 0, tty)
        lines = [l for l in re.split(r"[\r\n]", tty) if "mha run: " in l]
        self.assertTrue(any(re.search(r"mha run: compute  \d+/\d+ blocks \(\d+%\)  "
                                      r"\d\d:\d\d elapsed  ETA \d\d:\d\d", l) for l in lines), tty)
        # the line is erased before the run's own messages, which stay whole
        self.assertIn("\r\x1b[K", tty)
        self.assertRegex(tty, r"\r\x1b\[Kmha: info: wrote ")

    def test_silent_under_q_on_a_pipe_and_for_short_runs(self):
        rc, tty = run_on_tty(self.LONG + ["-q", "--out_dir", os.path.join(self.dir, "q")],
                             {"MHA_PROGRESS_AFTER_MS": "0"})
        self.assertEqual((rc, tty), (0, ""))
        p = subprocess.run([MHA] + self.LONG + ["--out_dir", os.path.join(self.dir, "p")],
                           capture_output=True, text=True, env=dict(os.environ,
                                                                    MHA_PROGRESS_AFTER_MS="0"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("mha run: ", p.stderr)
        self.assertNotIn("\x1b", p.stderr)
        # a run shorter than the default 2 s draws nothing, even on a terminal
        rc, tty = run_on_tty(["run", "--h", "2", "--d_model", "8", "--seq_len", "4", "--out_dir",
                              os.path.join(self.dir, "s")], {})
        self.assertEqual(rc, 0, tty)
        self.assertNotIn("mha run: ", tty)


if __name__ == "__main__":
    unittest.main(verbosity=2)
