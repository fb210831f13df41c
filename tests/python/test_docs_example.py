"""docs/python.md's examples run as written (in a temporary directory, where models/gpt2 is a
small random GPT-2 checkpoint with a tokenizer.json)."""
import json
import os
import re
import subprocess
import sys

import mha

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402
import tokenizer_files  # noqa: E402


def test_worked_example_runs(tmp_path):
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 3
    tok_json, _, vocab = tokenizer_files.byte_level_bpe(["The cat sat on the mat."], merges=30)
    config, t = checkpoints.make("gpt2", vocab=vocab)
    checkpoints.write(str(tmp_path / "models" / "gpt2"), config, t)
    with open(tmp_path / "models" / "gpt2" / "tokenizer.json", "w") as f:
        json.dump(tok_json, f)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(mha.__file__)))
    for block in blocks:
        p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        for diff in re.findall(r"max difference from PyTorch: (\S+)", p.stdout):
            assert float(diff) < 1e-5
    assert (tmp_path / "attention_heads.png").read_bytes()[:4] == b"\x89PNG"
    page = (tmp_path / "view.html").read_text()
    assert '"qk":{' in page and '"name":"attention"' in page
