#!/usr/bin/python3
"""Every example the user is shown runs as written: the README's Examples block and the
examples at the end of each `mha COMMAND --help`. They run in a scratch copy of what a clean
clone has after the Quickstart (configs/, data/, build/bin/mha), in order, and each must exit 0;
the README's must write into different directories.

  /usr/bin/python3 tests/cli/test_examples.py [Class]   (MHA_BIN = path to mha,
                                                        MHA_SOURCE_DIR = repository root)
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))
# --help examples may use what earlier commands' examples wrote (run's out/default)
HELP_ORDER = ["run", "inspect", "plot", "compare", "weights convert", "sweep", "bench"]


def readme_examples():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for block in blocks for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def help_examples(command):
    p = subprocess.run([MHA] + command.split() + ["--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return [line.strip() for line in p.stdout.splitlines() if line.startswith("  mha ")]


class Scratch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_examples_")
        for d in ("configs", "data"):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(self.dir, d))
        os.makedirs(os.path.join(self.dir, "build", "bin"))
        os.symlink(MHA, os.path.join(self.dir, "build", "bin", "mha"))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_line(self, line):
        argv = shlex.split(line)
        if argv[0] == "mha":
            argv[0] = "build/bin/mha"
        p = subprocess.run(argv, cwd=self.dir, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, f"`{line}` failed:\n{p.stderr}")
        self.assertNotIn("deprecated", p.stderr, line)
        return p


class Readme(Scratch):
    def test_every_readme_example_runs(self):
        lines = readme_examples()
        commands = {shlex.split(l)[1] for l in lines}
        self.assertEqual(commands, {"run", "compare", "weights", "inspect", "plot", "view", "sweep", "bench"},
                         "one example per subcommand")
        out_dirs = [shlex.split(l)[shlex.split(l).index("--out_dir") + 1] for l in lines
                    if "--out_dir" in shlex.split(l)]
        self.assertEqual(len(out_dirs), len(set(out_dirs)), f"examples share an out_dir: {out_dirs}")
        for line in lines:
            self.assertTrue(line.startswith("build/bin/mha "), line)
            self.run_line(line)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "out/causal_maps.png")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "out/seeds/results.csv")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "out/saved_keras.npz")))


class Help(Scratch):
    def test_every_help_example_runs(self):
        self.run_line("mha run --config configs/default.json")  # what "after ..." notes assume
        ran = 0
        for command in HELP_ORDER:
            examples = help_examples(command)
            self.assertGreaterEqual(len(examples), 2, command)
            for line in examples:
                self.run_line(line)
                ran += 1
        self.assertGreaterEqual(ran, 2 * len(HELP_ORDER))


if __name__ == "__main__":
    unittest.main(verbosity=2)
