"""docs/python.md's examples run as written (in a temporary directory)."""
import os
import re
import subprocess
import sys

import mha

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_worked_example_runs(tmp_path):
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 2
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(mha.__file__)))
    for block in blocks:
        p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        for diff in re.findall(r"max difference from PyTorch: (\S+)", p.stdout):
            assert float(diff) < 1e-5
    assert (tmp_path / "attention_heads.png").read_bytes()[:4] == b"\x89PNG"
