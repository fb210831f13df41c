#!/usr/bin/python3
"""The viewer's pages in a real browser (headless Chromium over the DevTools protocol,
tests/view/browser.py): `mha view` of a known attention.npy (pixels of chosen cells against
viridis of their weights (the table held to matplotlib by draw.viridis_matplotlib), shared,
per-head, per-row and log scales, a synthetic hover's exact weight and tokens, batch switching,
the enlarged head and its zoom, the sortable statistics, the token view), `mha run --html` of
the default config, of a causal run (it opens on per_row; the legend of each scale) and of a
Transformer stack, a 12 x 512 x 512 page,
and `mha sweep --report` (one series per group with the runs' points, and the PNG). Bad inputs
exit 2 with one line and write nothing (these run without a browser too).

  /usr/bin/python3 tests/view/test_view.py [Class]   (MHA_BIN = path to mha,
                                                     MHA_SOURCE_DIR = repository root)
Exits 77 (ctest: skipped) when Chromium is missing and a browser test was asked for (1 under
MHA_REQUIRE_ALL unless MHA_ALLOW_SKIPS lists it: tests/skips.py).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, require_chromium  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))
READY = ("document.body.dataset.ready === '1' || "
         "!document.getElementById('error').hidden")


def viridis():
    """The 256 viridis entries, read from the library's table (entry i at i / 255)."""
    with open(os.path.join(ROOT, "lib/src/draw/viridis_table.inc")) as f:
        rows = re.findall(r"\{\s*(\d+),\s*(\d+),\s*(\d+)\}", f.read())
    assert len(rows) == 256, len(rows)
    return [tuple(int(v) for v in r) for r in rows]


VIRIDIS = viridis()


def color(v, lo, hi):
    x = min(1.0, max(0.0, (v - lo) / (hi - lo)))
    return VIRIDIS[int(np.floor(x * 255 + 0.5))]


def set_scale(b, scale):
    """Picks `scale` in the colour scale selector, as a user does."""
    b.evaluate("(() => { const s = document.getElementById('scale'); s.value = %s;"
               " s.dispatchEvent(new Event('change')); })()" % json.dumps(scale))
    assert b.evaluate("mhaView.state.scale") == scale


def js_exponential(v):
    """v as JavaScript's toExponential(2) writes it: 9.03e-5, not 9.03e-05."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", "%.2e" % v)


def legend(b):
    """The legend's low end, high end and note."""
    return b.evaluate("['legend-lo', 'legend-hi', 'legend-note']"
                      ".map(id => document.getElementById(id).textContent)")


def mha(*args, cwd=None):
    return subprocess.run([MHA, *args], capture_output=True, text=True, cwd=cwd or ROOT)


def known_maps(B=2, h=3, T=4, S=6, seed=5):
    """Softmax rows of float32; head 2 spans only about 0.1 to 0.25 (a flat map on a scale from 0)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(B, h, T, S)) * np.array([2.0, 1.0, 0.3])[None, :, None, None]
    w = np.exp(logits)
    w /= w.sum(-1, keepdims=True)
    return w.astype(np.float32)


class BrowserCase(unittest.TestCase):
    browser = None

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="mha_view_")
        cls.browser = Browser(1400, 1000)

    @classmethod
    def tearDownClass(cls):
        if cls.browser:
            cls.browser.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def open(self, page):
        b = self.browser
        b.open(page)
        b.wait_for(READY, 30)
        self.assertEqual(b.evaluate("document.getElementById('error').textContent"), "")
        return b

    def assert_clean(self):
        self.assertEqual(self.browser.errors, [])
        # Self-contained: the page fetched nothing but itself.
        self.assertEqual(self.browser.requests, [self.browser.url])

    def cell_center(self, selector, t, s):
        """Page coordinates of cell (t, s) of a full-resolution canvas."""
        g = self.browser.evaluate(
            "(() => { const c = document.querySelector(%s); const r = c.getBoundingClientRect();"
            " return [r.left, r.top, r.width / c.width, +c.dataset.cell, +c.dataset.factor,"
            " +c.dataset.left, +c.dataset.top]; })()" % json.dumps(selector))
        left, top, css, cell, factor, ml, mt = g
        self.assertEqual(factor, 1, "the canvas is downsampled")
        return (left + (ml + (s + 0.5) * cell) * css, top + (mt + (t + 0.5) * cell) * css)

    def tooltip(self):
        return self.browser.evaluate("document.getElementById('tooltip').textContent")


class AttentionPage(BrowserCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.w = known_maps()
        np.save(os.path.join(cls.dir, "attention.npy"), cls.w)
        cls.queries = ["the", "cat", "sat", "<down>"]
        cls.keys = ["k0", "k1", "k2", "k3", "k4", "k&5"]
        for name, labels in (("q.txt", cls.queries), ("k.txt", cls.keys)):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write("\n".join(labels) + "\n")
        cls.page = os.path.join(cls.dir, "page.html")
        r = mha("view", os.path.join(cls.dir, "attention.npy"), "--labels",
                os.path.join(cls.dir, "q.txt"), "--key_labels", os.path.join(cls.dir, "k.txt"),
                "-o", cls.page)
        assert r.returncode == 0, r.stderr

    def setUp(self):
        self.open(self.page)

    def check_pixels(self, b, ranges=None, position=None):
        """Cells of every head of batch b have viridis of (w - lo) / (hi - lo), or of
        position(head, t, s) in [0, 1] when given."""
        _, _, rows = self.browser.screenshot()
        for head in range(self.w.shape[1]):
            for t, s in ((0, 0), (1, 4), (3, 5), (2, 2)):
                x, y = self.cell_center('#grid canvas[data-head="%d"]' % head, t, s)
                got = rows[int(y)][int(x)]
                want = (color(position(head, t, s), 0.0, 1.0) if position else
                        color(float(self.w[b, head, t, s]), *ranges[head]))
                self.assertEqual(got, want, "batch %d head %d cell (%d, %d) weight %r" %
                                 (b, head, t, s, self.w[b, head, t, s]))

    def test_panels_and_shared_colors(self):
        self.assertEqual(self.browser.evaluate("document.querySelectorAll('#grid canvas').length"), 3)
        self.check_pixels(0, [(0.0, float(self.w[0].max()))] * 3)
        self.assert_clean()

    def test_per_head_scale(self):
        b = self.browser
        b.evaluate("(() => { const s = document.getElementById('scale'); s.value = 'per_head';"
                   " s.dispatchEvent(new Event('change')); })()")
        self.check_pixels(0, [(0.0, float(self.w[0, i].max())) for i in range(3)])
        # The flat head 2 now uses the whole scale: its largest weight is viridis' top.
        caption = b.evaluate("document.querySelectorAll('#grid figcaption')[2].textContent")
        self.assertIn("head 2", caption)
        self.assertIn("%.3f" % self.w[0, 2].max(), caption)
        self.assert_clean()

    def test_per_row_and_log_scales(self):
        b = self.browser
        # Not causal (weight above the diagonal): the page opens on the shared scale.
        self.assertEqual(b.evaluate("[mhaView.causal()[0], document.getElementById('scale').value]"),
                         [False, "shared"])
        w = self.w[0].astype(np.float64)
        set_scale(b, "per_row")
        self.check_pixels(0, position=lambda i, t, s: w[i, t, s] / w[i, t].max())
        hi = float(w.max())
        set_scale(b, "log")
        self.check_pixels(0, position=lambda i, t, s: max(0.0, 1 + np.log10(w[i, t, s] / hi) / 4))
        self.assertEqual(legend(b)[:2], ["1e-4·max = " + js_exponential(hi * 1e-4), "max = %.3f" % hi])
        self.assert_clean()

    def test_batch_switch(self):
        self.browser.evaluate("(() => { const s = document.getElementById('batch'); s.value = '1';"
                              " s.dispatchEvent(new Event('change')); })()")
        self.check_pixels(1, [(0.0, float(self.w[1].max()))] * 3)

    def test_hover_shows_exact_weight_and_tokens(self):
        b = self.browser
        for head, t, s in ((1, 2, 3), (0, 3, 5), (2, 0, 0)):
            x, y = self.cell_center('#grid canvas[data-head="%d"]' % head, t, s)
            b.mouse_move(x, y)
            text = self.tooltip()
            self.assertIn("head %d" % head, text)
            self.assertIn('query %d "%s"' % (t, self.queries[t]), text)
            self.assertIn('key %d "%s"' % (s, self.keys[s]), text)
            shown = re.search(r"weight (\S+)", text).group(1)
            self.assertEqual(np.float32(shown), self.w[0, head, t, s], text)
            # The shortest decimal that reads back as the stored float32.
            self.assertLessEqual(len(shown.replace("0.", "", 1)), 9)
        self.assert_clean()

    def test_enlarge_zoom_and_hover(self):
        b = self.browser
        x, y = self.cell_center('#grid canvas[data-head="1"]', 0, 0)
        b.click(x, y)
        b.wait_for("!document.getElementById('detail-section').hidden")
        self.assertIn("head 1", b.evaluate("document.getElementById('detail-title').textContent"))
        self.assertEqual(b.evaluate("document.getElementById('head').value"), "1")
        # Drag from cell (1, 2) to (2, 4): the region becomes queries 1-2, keys 2-4.
        x0, y0 = self.cell_center("#detail", 1, 2)
        x1, y1 = self.cell_center("#detail", 2, 4)
        b.mouse_move(x0, y0)
        b.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x0, "y": y0,
                                            "button": "left", "buttons": 1, "clickCount": 1})
        b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x1, "y": y1,
                                            "button": "left", "buttons": 1})
        b.send("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x1, "y": y1,
                                            "button": "left", "buttons": 0, "clickCount": 1})
        self.assertEqual(b.evaluate("JSON.stringify(mhaView.state.region)"),
                         json.dumps({"t0": 1, "t1": 3, "s0": 2, "s1": 5}, separators=(",", ":")))
        x, y = self.cell_center("#detail", 1, 2)  # region cell (1, 2) = map cell (2, 4)
        b.mouse_move(x, y)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", self.tooltip()).group(1)),
                         self.w[0, 1, 2, 4])
        self.assert_clean()

    def test_head_selector_enlarges_and_closes(self):
        b = self.browser
        b.evaluate("(() => { const s = document.getElementById('head'); s.value = '2';"
                   " s.dispatchEvent(new Event('change')); })()")
        self.assertFalse(b.evaluate("document.getElementById('detail-section').hidden"))
        self.assertIn("head 2", b.evaluate("document.getElementById('detail-title').textContent"))
        self.assertTrue(b.evaluate("document.querySelector('#grid figure:nth-child(3)')"
                                   ".classList.contains('selected')"))
        b.evaluate("(() => { const s = document.getElementById('head'); s.value = '';"
                   " s.dispatchEvent(new Event('change')); })()")
        self.assertTrue(b.evaluate("document.getElementById('detail-section').hidden"))
        self.assert_clean()

    def test_statistics_table_sorts(self):
        b = self.browser
        heads = lambda: [int(v) for v in b.evaluate(  # noqa: E731
            "[...document.querySelectorAll('#stats tbody tr')].map(r => r.dataset.head)")]
        self.assertEqual(heads(), [0, 1, 2])
        w = self.w[0].astype(np.float64)
        entropy = -(w * np.log(w)).sum(-1).mean(-1)  # per head, over its rows
        b.evaluate("document.querySelector('#stats th[data-key=\"entropy\"]').click()")
        self.assertEqual(heads(), list(np.argsort(entropy)))
        b.evaluate("document.querySelector('#stats th[data-key=\"entropy\"]').click()")
        self.assertEqual(heads(), list(np.argsort(-entropy)))
        cells = b.evaluate("[...document.querySelectorAll('#stats tbody tr')]"
                           ".map(r => +r.children[1].textContent)")
        np.testing.assert_allclose(cells, np.sort(entropy)[::-1], atol=6e-5)
        self.assertIn("no run.json", b.evaluate("document.getElementById('config').textContent"))

    def test_token_view(self):
        b = self.browser
        self.assertFalse(b.evaluate("document.getElementById('tokens-section').hidden"))
        texts = b.evaluate("[...document.querySelectorAll('#tokens text')].map(t => t.textContent)")
        self.assertEqual(texts, self.queries + self.keys)
        # Lines of weight above 0.005, one per (head, query, key), opacity = weight.
        lines = b.evaluate("[...document.querySelectorAll('#tokens line')].map(l =>"
                           " [+l.dataset.head, +l.dataset.query, +l.dataset.key,"
                           " +l.getAttribute('stroke-opacity')])")
        want = {(i, t, s) for i in range(3) for t in range(4) for s in range(6)
                if self.w[0, i, t, s] > 0.005}
        self.assertEqual({tuple(l[:3]) for l in lines}, want)
        for head, t, s, opacity in lines:
            self.assertAlmostEqual(opacity, float(self.w[0, head, t, s]), places=6)
        # Unticking head 0 removes its lines; hovering query 1 leaves only its lines shown.
        b.evaluate("document.querySelector('#head-picks input[data-head=\"0\"]').click()")
        self.assertEqual(b.evaluate("document.querySelectorAll('#tokens line[data-head=\"0\"]').length"), 0)
        b.evaluate("document.querySelector('#tokens text[data-query=\"1\"]')"
                   ".dispatchEvent(new Event('mouseenter'))")
        shown = b.evaluate("[...document.querySelectorAll('#tokens line')]"
                           ".filter(l => l.style.display !== 'none').map(l => +l.dataset.query)")
        self.assertTrue(shown and set(shown) == {1}, shown)
        self.assert_clean()


    def test_long_token_labels_not_cut_off(self):
        # Issue 50: the token view's last label was cut off (the SVG a fixed 600 px wide, keys
        # from x = 430): a long last key and a long first query now fit inside the SVG.
        queries = ["a very long query label at the start"] + self.queries[1:]
        keys = self.keys[:-1] + ["the last key label, long enough to pass the right edge"]
        for name, labels in (("q_long.txt", queries), ("k_long.txt", keys)):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write("\n".join(labels) + "\n")
        page = os.path.join(self.dir, "long_labels.html")
        r = mha("view", os.path.join(self.dir, "attention.npy"), "--labels",
                os.path.join(self.dir, "q_long.txt"), "--key_labels", os.path.join(self.dir, "k_long.txt"),
                "-o", page)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(page)
        self.assertEqual(b.evaluate("[...document.querySelectorAll('#tokens text')].map(t => t.textContent)"),
                         queries + keys)
        cut = b.evaluate(
            "(() => { const r = document.getElementById('tokens').getBoundingClientRect();"
            " return [...document.querySelectorAll('#tokens text')].filter(t => {"
            " const q = t.getBoundingClientRect(); return q.left < r.left || q.right > r.right ||"
            " q.top < r.top || q.bottom > r.bottom; }).map(t => t.textContent); })()")
        self.assertEqual(cut, [])
        b.save_screenshot(os.path.join(self.dir, "long_labels.png"))
        self.assert_clean()


class RunHtml(BrowserCase):
    def test_default_config(self):
        out = os.path.join(self.dir, "default")
        r = mha("run", "--config", "configs/default.json", "--html", "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("view.html", r.stderr)
        b = self.open(os.path.join(out, "view.html"))
        w = np.load(os.path.join(out, "attention.npy"))
        run = json.load(open(os.path.join(out, "run.json")))
        self.assertEqual(b.evaluate("document.querySelectorAll('#grid canvas').length"), 8)
        b.evaluate("(() => { const s = document.getElementById('stats-scope'); s.value = 'all';"
                   " s.dispatchEvent(new Event('change')); })()")
        shown = b.evaluate("[...document.querySelectorAll('#stats tbody tr')]"
                           ".map(r => +r.children[1].textContent)")
        want = [h["entropy"] for h in run["attention_stats"]["heads"]]
        np.testing.assert_allclose(shown, want, atol=6e-5)
        x, y = self.cell_center('#grid canvas[data-head="5"]', 3, 1)
        b.mouse_move(x, y)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", self.tooltip()).group(1)),
                         w[0, 5, 3, 1])
        self.assertIn('"seq_len": 5', b.evaluate("document.getElementById('config').textContent"))
        self.assert_clean()
        self.browser.save_screenshot(os.path.join(self.dir, "default.png"))

    def test_causal_map_default_scale(self):
        # A causal run: row 0's weight of 1 would set a shared linear scale and leave the rest
        # near its bottom, so a causal map (no weight on a key s > t, seen in the weights)
        # opens on per_row; forcing shared darkens the panels, which the measure must notice.
        out = os.path.join(self.dir, "causal")
        r = mha("run", "--h", "4", "--d_model", "64", "--seq_len", "32", "--batch", "1",
                "--causal", "true", "--html", "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "view.html"))
        w = np.load(os.path.join(out, "attention.npy"))[0].astype(np.float64)  # (h, T, S)
        self.assertEqual(b.evaluate("[mhaView.causal()[0], document.getElementById('scale').value]"),
                         [True, "per_row"])
        index = {rgb: i for i, rgb in enumerate(VIRIDIS)}

        def lit_fractions():
            """Per head panel: the fraction of its on-screen pixels (screenshot) that are lit:
            a viridis colour at least a quarter up the map (entry >= 64 of 256), clearly
            brighter than its darkest colour, not a shade off it. Nearly every pixel of a
            panel must be a viridis colour, so the measure counts what is drawn."""
            _, _, rows = b.screenshot()
            rects = b.evaluate("[...document.querySelectorAll('#grid canvas')].map(c => {"
                               " const r = c.getBoundingClientRect();"
                               " return [r.left, r.top, r.right, r.bottom]; })")
            out = []
            for x0, y0, x1, y1 in rects:
                px = [rows[y][x] for y in range(int(np.ceil(y0)), int(y1))
                      for x in range(int(np.ceil(x0)), int(x1))]
                known = [index[p] for p in px if p in index]
                self.assertGreater(len(known), 0.99 * len(px))
                out.append(sum(1 for i in known if i >= 64) / len(px))
            return out

        lit = lit_fractions()
        self.assertEqual(len(lit), 4)
        self.assertTrue(all(f >= 0.05 for f in lit), "per_row: %r" % lit)
        self.assertEqual(legend(b), ["0", "row max", "linear, each query row its own maximum"
                                     " (the default for causal maps)"])
        b.save_screenshot(os.path.join(self.dir, "causal_per_row.png"))
        set_scale(b, "shared")
        lit = lit_fractions()
        self.assertTrue(any(f < 0.05 for f in lit), "shared: %r" % lit)
        hi = float(w.max())
        self.assertEqual(legend(b), ["0.000", "%.3f" % hi, "linear, shared by the heads of this view"])
        set_scale(b, "per_head")
        self.assertEqual(legend(b), ["min(0, head min)", "head max",
                                     "linear, each head its own range (in its title)"])
        set_scale(b, "log")
        self.assertEqual(legend(b), ["1e-4·max = " + js_exponential(hi * 1e-4), "max = %.3f" % hi,
                                     "log10, 4 decades, shared by the heads of this view;"
                                     " 0 at the bottom"])
        # The user's pick wins over the default, and the hover still gives the exact weight.
        self.assertEqual(b.evaluate("document.getElementById('scale').value"), "log")
        x, y = self.cell_center('#grid canvas[data-head="1"]', 20, 3)
        b.mouse_move(x, y)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", self.tooltip()).group(1)),
                         np.float32(w[1, 20, 3]))
        self.assert_clean()

    def test_layers_overview(self):
        out = os.path.join(self.dir, "encoder")
        r = mha("run", "--config", "configs/encoder.json", "--html", "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "view.html"))
        self.assertFalse(b.evaluate("document.getElementById('layer-pick').hidden"))
        self.assertEqual(b.evaluate("document.querySelectorAll('#overview canvas').length"), 2 * 4)
        w = np.load(os.path.join(out, "self_attention.npy"))  # (layers, B, h, T, T)
        b.evaluate("(() => { const s = document.getElementById('layer'); s.value = '1';"
                   " s.dispatchEvent(new Event('change')); })()")
        x, y = self.cell_center('#grid canvas[data-head="2"]', 1, 0)
        b.mouse_move(x, y)
        text = self.tooltip()
        self.assertIn("layer 1", text)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", text).group(1)), w[1, 0, 2, 1, 0])
        self.assert_clean()


    def test_attention_axes_run_is_viewed_flattened(self):
        # Keras' N-D layout (B, 5, h, 3, 4, 3, 4) is the flattened run's (10, h, 12, 12).
        grid = os.path.join(self.dir, "grid.npy")
        np.save(grid, np.random.default_rng(1).normal(size=(2, 5, 3, 4, 16)).astype(np.float32))
        out = os.path.join(self.dir, "grid")
        r = mha("run", "--query", grid, "--h", "4", "--attention_axes", "2,3", "--html",
                "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "view.html"))
        self.assertIn("B = 10, h = 4, T = 12, S = 12",
                      b.evaluate("document.getElementById('subtitle').textContent"))
        w = np.load(os.path.join(out, "attention.npy")).reshape(10, 4, 12, 12)
        b.evaluate("(() => { const s = document.getElementById('batch'); s.value = '7';"
                   " s.dispatchEvent(new Event('change')); })()")
        x, y = self.cell_center('#grid canvas[data-head="3"]', 5, 11)
        b.mouse_move(x, y)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", self.tooltip()).group(1)),
                         w[7, 3, 5, 11])
        self.assert_clean()


class LargePage(BrowserCase):
    def test_12_heads_of_512(self):
        out = os.path.join(self.dir, "large")
        r = mha("run", "--h", "12", "--d_model", "768", "--seq_len", "512", "--batch", "1",
                "--html", "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        page = os.path.join(out, "view.html")
        self.assertLess(os.path.getsize(page), 15 * 1000 * 1000)
        b = self.open(page)
        self.assertEqual(b.evaluate("document.querySelectorAll('#grid canvas').length"), 12)
        self.assertGreater(b.evaluate("+document.querySelector('#grid canvas').dataset.factor"), 1)
        # Zoom the enlarged head to 40 x 40 cells: full resolution, exact weights.
        b.evaluate("mhaView.openDetail(7)")
        b.evaluate("mhaView.state.region = {t0: 100, t1: 140, s0: 300, s1: 340}; mhaView.render()")
        self.assertIn("full resolution", b.evaluate("document.getElementById('detail-title').textContent"))
        w = np.load(os.path.join(out, "attention.npy"), mmap_mode="r")
        x, y = self.cell_center("#detail", 5, 9)
        b.mouse_move(x, y)
        text = self.tooltip()
        self.assertIn("query 105", text)
        self.assertIn("key 309", text)
        self.assertEqual(np.float32(re.search(r"weight (\S+)", text).group(1)), w[0, 7, 105, 309])
        self.assert_clean()

    def test_png_of_the_first_view(self):
        # A plain headless --screenshot was often taken before the page had inflated its
        # data (blank); `mha view --png` captures it drawn.
        out = os.path.join(self.dir, "png")
        r = mha("run", "--h", "12", "--d_model", "768", "--seq_len", "256", "--batch", "1",
                "--save_attention", "--out_dir", out, "-q")
        self.assertEqual(r.returncode, 0, r.stderr)
        shot = os.path.join(out, "view.png")
        env = dict(os.environ, MHA_CHROMIUM=require_chromium("view.LargePage"))
        r = subprocess.run([MHA, "view", out, "--png", shot], capture_output=True, text=True,
                           env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "view.html")))
        with open(shot, "rb") as f:
            from browser import decode_png
            w, h, rows = decode_png(f.read())
        self.assertEqual((w, h), (1400, 1000))
        # The 12 heads' maps are drawn: many pixels of viridis colours (a blank page has none).
        palette = set(VIRIDIS)
        drawn = sum(1 for row in rows[:600] for px in row if px in palette)
        self.assertGreater(drawn, 12 * 40 * 40, "the heads were not drawn")

    def test_map_longer_than_a_page_side(self):
        # 3000 x 3000 is longer than a page's 2896: the page holds 1500 x 1500 blocks of 2 x 2
        # weights, each their max, and says so; hovering a block gives the file's ranges.
        a = np.zeros((3000, 3000), np.float32)
        a[:, 1] = 0.75
        a[27, 0] = 1.0
        path = os.path.join(self.dir, "long.npy")
        np.save(path, a)
        page = os.path.join(self.dir, "long.html")
        r = mha("view", path, "-o", page)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(page)
        self.assertIn("T = 3000, S = 3000 (float32), shown as 1500 × 1500 blocks of 2 × 2 (max)",
                      b.evaluate("document.getElementById('subtitle').textContent"))
        b.evaluate("mhaView.openDetail(0)")
        b.evaluate("mhaView.state.region = {t0: 10, t1: 40, s0: 0, s1: 30}; mhaView.render()")
        self.assertIn("queries 20–79, keys 0–59",
                      b.evaluate("document.getElementById('detail-title').textContent"))
        x, y = self.cell_center("#detail", 3, 0)
        b.mouse_move(x, y)
        text = self.tooltip()
        self.assertIn("queries 26–27, keys 0–1", text)
        self.assertIn("max weight 1 ", text)
        x, y = self.cell_center("#detail", 4, 0)
        b.mouse_move(x, y)
        self.assertIn("max weight 0.75 ", self.tooltip())
        self.assert_clean()


class SweepReport(BrowserCase):
    def test_chart_series_and_png(self):
        sweep = os.path.join(self.dir, "sweep.json")
        out = os.path.join(self.dir, "sweep")
        with open(sweep, "w") as f:
            json.dump({"base": {"d_model": 32, "batch": 1, "seed": 0, "save_attention": True},
                       "grid": {"h": [1, 2, 4], "seq_len": [8, 16, 32, 64]}, "out_dir": out}, f)
        r = mha("sweep", sweep, "--report")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl"))]
        b = self.open(os.path.join(out, "report.html"))
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.data.map(p => [p.x, p.y])])")
        self.assertEqual([g[0] for g in got], ["h=1", "h=2", "h=4"])
        for label, points in got:
            h = int(label.split("=")[1])
            want = sorted((r["seq_len"], r["compute_ms"]) for r in rows if r["h"] == h)
            self.assertEqual([tuple(p) for p in points], want)
        # Another column and grouping: entropy per head against h, one line per head.
        b.evaluate("(() => { const y = document.getElementById('y'), x = document.getElementById('x'),"
                   " g = document.getElementById('group'); y.value = 'attention_entropy_per_head';"
                   " x.value = 'h'; g.value = ''; g.dispatchEvent(new Event('change')); })()")
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.data.map(p => [p.x, p.y])])")
        # Each seq_len is its own series: runs of different lengths are not averaged.
        self.assertEqual([g[0] for g in got][:5], ["seq_len=8 · head 0", "seq_len=16 · head 0",
                                                   "seq_len=32 · head 0", "seq_len=64 · head 0",
                                                   "seq_len=8 · head 1"])
        # Unless asked: the mean over seq_len, one line per head.
        b.evaluate("(() => { const m = document.getElementById('mean'); m.value = 'seq_len';"
                   " m.dispatchEvent(new Event('change')); })()")
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.data.map(p => [p.x, p.y])])")
        self.assertEqual([g[0] for g in got], ["head 0", "head 1", "head 2", "head 3"])
        self.assertIn("mean over seq_len", b.evaluate("mhaChart.options.plugins.title.text"))
        head3 = dict(got[3][1])
        self.assertEqual(sorted(head3), [4])  # only h = 4 runs have a head 3
        want = np.mean([r["attention_entropy_per_head"][3] for r in rows if r["h"] == 4])
        self.assertAlmostEqual(head3[4], want, places=9)
        self.assert_clean()
        with open(os.path.join(out, "report.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # mha view of the directory writes the same report.
        r = mha("view", out, "--y", "attention_entropy", "-o", os.path.join(self.dir, "again.html"),
                "--png", "-")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("attention_entropy against seq_len for each h", r.stderr)


    def test_model_sweep_categorical_and_not_averaged(self):
        # A model sweep's rows (checkpoints x texts x methods): perplexities of two texts
        # that differ by a factor of 7 stay two points, and checkpoints are named, not joined.
        out = os.path.join(self.dir, "models")
        os.makedirs(out, exist_ok=True)
        rows, ppl = [], {}
        models = ["models/gpt2", "models/qwen2"]
        texts = ["The Eiffel Tower is in", "The capital of France is"]
        methods = [["loss", "logit_lens"], ["rollout", "norms"]]
        for m in models:
            for t in texts:
                for meth in methods:
                    row = {"schema_version": 1, "index": len(rows), "name": "r%d" % len(rows),
                           "status": "ok", "model": m, "text": t, "method": meth,
                           "forward_ms": 10.0 + len(rows), "run_dir": out}
                    if "loss" in meth:
                        row["perplexity"] = ppl[m, t] = (1.24e6 if t == texts[0] else 1.72e5) * (
                            1 + models.index(m))
                    rows.append(row)
        with open(os.path.join(out, "results.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(os.path.join(out, "sweep.json"), "w") as f:
            json.dump({"schema_version": 1, "sweep_file": "m.json",
                       "swept_keys": ["model", "text", "method"], "runs": len(rows)}, f)
        png = os.path.join(out, "report.png")
        r = mha("view", out, "-o", os.path.join(out, "report.html"), "--png", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "report.html"))
        b.save_screenshot("/tmp/pages_model_sweep.png")
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.showLine,"
                         " d.data.map(p => [p.x, p.y])])")
        points = {}
        for label, show_line, data in got:
            self.assertFalse(show_line, label)
            for x, y in data:
                points.setdefault(x, []).append(y)
        # Every point is one run's perplexity; none is a mean of two texts.
        self.assertEqual(sorted(points), [0, 1])
        for i, m in enumerate(models):
            self.assertEqual(sorted(points[i]), sorted(ppl[m, t] for t in texts))
        ticks = b.evaluate("mhaChart.scales.x.ticks.map(t => t.label)")
        self.assertEqual([t for t in ticks if t], models)
        self.assertEqual(b.evaluate("[mhaChart.scales.x.min, mhaChart.scales.x.max]"), [-0.5, 1.5])
        self.assertNotIn("averaged", b.evaluate("document.getElementById('chart-note').textContent"))
        self.assert_clean()
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Asked for: the mean over texts, one point per checkpoint.
        r = mha("view", out, "-o", os.path.join(out, "mean.html"), "--png", "-", "--mean", "text")
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "mean.html"))
        got = b.evaluate("mhaChart.data.datasets.map(d => d.data.map(p => [p.x, p.y]))")
        self.assertEqual(len([d for d in got if d]), 1)
        want = [[i, np.mean([ppl[m, t] for t in texts])] for i, m in enumerate(models)]
        mine = [d for d in got if d][0]
        for (x, y), (wx, wy) in zip(mine, want):
            self.assertEqual(x, wx)
            self.assertAlmostEqual(y, wy, delta=1e-6 * wy)
        r = mha("view", out, "-o", os.path.join(out, "bad.html"), "--mean", "model")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--mean model: not a swept key", r.stderr)

    def test_bundled_heads_vs_length(self):
        # The example: compute time against seq_len, one line per h.
        out = os.path.join(self.dir, "hvl")
        r = mha("sweep", "configs/sweeps/heads_vs_length.json", "--report", "--out_dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "report.html"))
        # repeat 5: the median of the timed calls, with their min and max as bars.
        self.assertEqual(b.evaluate("mhaChart.options.plugins.title.text"),
                         "compute_ms (median, bars: min to max) against seq_len for each h")
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.data.map(p => p.x)])")
        self.assertEqual(got, [["h=%d" % h, [32, 128, 512]] for h in (1, 2, 4, 8)])
        rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl"))]
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.data.map(p => p.y), d.ranges])")
        for h, (ys, ranges) in zip((1, 2, 4, 8), got):
            mine = sorted((r["seq_len"], r["compute_ms_median"], r["compute_ms_min"],
                           r["compute_ms_max"]) for r in rows if r["h"] == h)
            self.assertEqual(ys, [m[1] for m in mine])
            self.assertEqual(ranges, [[m[2], m[3]] for m in mine])
        self.assert_clean()

    def test_repeat_error_bars(self):
        # Rows as a sweep with repeat writes them, with bars wide enough to find on the canvas.
        out = os.path.join(self.dir, "ranged")
        os.makedirs(out, exist_ok=True)
        rows = []
        for i, (h, T) in enumerate((h, T) for h in (1, 2) for T in (8, 16, 32)):
            median = 10.0 * h + T / 8
            rows.append({"schema_version": 1, "index": i, "name": "h%d_T%d" % (h, T),
                         "status": "ok", "h": h, "seq_len": T, "compute_ms": median + 30,
                         "compute_ms_median": median, "compute_ms_min": median - 4,
                         "compute_ms_max": median + 6, "run_dir": out})
        with open(os.path.join(out, "results.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(os.path.join(out, "sweep.json"), "w") as f:
            json.dump({"schema_version": 1, "sweep_file": "x.json", "swept_keys": ["h", "seq_len"],
                       "runs": len(rows)}, f)
        r = mha("view", out, "-o", os.path.join(out, "report.html"), "--png", "-")
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.open(os.path.join(out, "report.html"))
        self.assertEqual(b.evaluate("mhaChart.options.plugins.title.text"),
                         "compute_ms (median, bars: min to max) against seq_len for each h")
        got = b.evaluate("mhaChart.data.datasets.map(d => [d.label, d.data.map(p => [p.x, p.y]),"
                         " d.ranges])")
        for label, points, ranges in got:
            h = int(label.split("=")[1])
            mine = [r for r in rows if r["h"] == h]
            self.assertEqual(points, [[r["seq_len"], r["compute_ms_median"]] for r in mine])
            self.assertEqual(ranges, [[r["compute_ms_min"], r["compute_ms_max"]] for r in mine])
        # The axis holds every bar, and each bar is drawn in its series' colour: the pixels
        # just inside its ends (above and below the marker) are painted.
        lo, hi = b.evaluate("[mhaChart.scales.y.min, mhaChart.scales.y.max]")
        self.assertLessEqual(lo, min(r["compute_ms_min"] for r in rows))
        self.assertGreaterEqual(hi, max(r["compute_ms_max"] for r in rows))
        painted = b.evaluate("""(() => {
          const c = mhaChart, ctx = c.ctx, dpr = c.currentDevicePixelRatio, out = [];
          c.data.datasets.forEach((d, i) => c.getDatasetMeta(i).data.forEach((p, j) => {
            const [lo, hi] = d.ranges[j];
            for (const y of [c.scales.y.getPixelForValue(hi) + 1, c.scales.y.getPixelForValue(lo) - 1]) {
              // The most opaque of the 3 device pixels across the 1.5-pixel line.
              const row = ctx.getImageData(Math.round(p.x * dpr) - 1, Math.round(y * dpr), 3, 1).data;
              let best = 0;
              for (let k = 1; k < 3; ++k) if (row[4 * k + 3] > row[4 * best + 3]) best = k;
              out.push([d.borderColor, Array.from(row.slice(4 * best, 4 * best + 4))]);
            }
          }));
          return out; })()""")
        self.assertEqual(len(painted), 12)
        for colour, (r_, g_, b_, a_) in painted:
            want = tuple(int(colour[k:k + 2], 16) for k in (1, 3, 5))
            self.assertGreater(a_, 128, (colour, (r_, g_, b_, a_)))
            self.assertLess(max(abs(r_ - want[0]), abs(g_ - want[1]), abs(b_ - want[2])), 40,
                            (colour, (r_, g_, b_, a_)))
        # Another column has no bars.
        b.evaluate("(() => { const y = document.getElementById('y'); y.value = 'compute_ms_min';"
                   " y.dispatchEvent(new Event('change')); })()")
        self.assertEqual(b.evaluate("mhaChart.data.datasets.map(d => d.ranges)"), [None, None])
        self.assertEqual(b.evaluate("mhaChart.options.plugins.title.text"),
                         "compute_ms_min against seq_len for each h")
        self.assert_clean()


class AnalysisPage(BrowserCase):
    """`mha view` of `mha analyze` runs: rollout and the value-weighted norms as map sets beside
    each other (same selector, token labels), the loss per token, the logit lens's top tokens,
    the ablation grid and, on a patching run with no maps, the patching grids alone; each
    cell's colour is viridis of its value on the table's range and its tooltip the value."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
        import checkpoints
        import tokenizer_files
        texts = ["the cat sat on the mat", "the dog sat on the mat"]
        tok, cls.encode, V = tokenizer_files.byte_level_bpe(texts)
        config, t = checkpoints.make("gpt2", vocab=V)
        cls.model = os.path.join(cls.dir, "gpt2")
        checkpoints.write(cls.model, config, t)
        with open(os.path.join(cls.model, "tokenizer.json"), "w") as f:
            json.dump(tok, f)

    def analyze(self, out, *args):
        p = mha("analyze", "--model", self.model, "--out_dir", out, "-q", *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = mha("view", out, "-q")
        self.assertEqual(p.returncode, 0, p.stderr)
        return os.path.join(out, "view.html")

    def cells(self, caption):
        """[(text, title, rgb)] of the table whose caption starts with `caption`."""
        return self.browser.evaluate(
            "(() => { const t = Array.from(document.querySelectorAll('#analyses table'))"
            ".find((t) => t.caption.textContent.startsWith(%s));"
            " return t ? Array.from(t.querySelectorAll('td')).map((td) => [td.textContent, td.title,"
            " getComputedStyle(td).backgroundColor]) : null; })()" % json.dumps(caption))

    def assert_texts(self, cells, values):  # 3 decimals, as toFixed(3) writes them
        self.assertEqual(len(cells), len(values))
        for (text, title, rgb), v in zip(cells, values):
            self.assertAlmostEqual(float(text), v, delta=0.0005001)

    def assert_hover(self, title, prefix, value):  # the value to 6 significant digits
        self.assertTrue(title.startswith(prefix), (title, prefix))
        self.assertAlmostEqual(float(title[len(prefix):]), float(value), delta=abs(value) * 1e-5 + 1e-12)

    def check_colours(self, cells, values):
        lo, hi = min(values), max(values)
        for (text, title, rgb), v in zip(cells, values):
            want = "rgb(%d, %d, %d)" % VIRIDIS[int(round(255 * (v - lo) / (hi - lo)))]
            self.assertEqual(rgb, want, (text, v))

    def test_maps_loss_lens_and_ablation(self):
        out = os.path.join(self.dir, "a")
        page = self.analyze(out, "--text", "the cat sat on the mat", "--method", "loss", "--method",
                            "logit_lens", "--method", "rollout", "--method", "norms", "--method", "ablation")
        b = self.open(page)
        names = b.evaluate("Array.from(document.getElementById('map').options).map((o) => o.textContent)")
        self.assertEqual(names, ["rollout", "attention_norms"])
        tokens = json.load(open(os.path.join(out, "tokens.json")))["tokens"][0]
        self.assertEqual(b.evaluate("window.mhaView.data.query_labels"), tokens)
        loss = np.load(os.path.join(out, "loss.npy"))[0]
        cells = self.cells("Loss of the next token")
        self.assertEqual(len(cells), len(tokens))
        real = [v for v in loss if np.isfinite(v)]
        for (text, title, rgb), v in zip(cells, loss):
            self.assertEqual(text, "%.3f" % v if np.isfinite(v) else "—")
        self.check_colours(cells[:len(real)], real)
        lens = self.cells("Logit lens")
        top = json.load(open(os.path.join(out, "logit_lens.json")))["top_tokens"]
        self.assertEqual([c[0] for c in lens], [cell[0] for state in top for cell in state[0]])
        self.assertIn(json.dumps(top[0][0][0][1], ensure_ascii=False), lens[0][1])  # the top k
        ablation = np.load(os.path.join(out, "ablation.npy"))[0]
        cells = self.cells("Head ablation")
        self.assert_texts(cells, ablation.ravel())
        self.assertIn("layer 1, head 2: %.6g" % ablation[1, 2], [c[1] for c in cells])
        self.check_colours(cells, ablation.ravel())
        # the norms' maps: per-key quantities above 1 are drawn, not refused
        b.evaluate("(() => { const s = document.getElementById('map'); s.value = 1;"
                   " s.dispatchEvent(new Event('change')); })()")
        self.assertEqual(b.evaluate("window.mhaView.state.map"), 1)
        b.save_screenshot(os.path.join(self.dir, "analysis.png"))
        self.assert_clean()

    def test_patching_alone(self):
        out = os.path.join(self.dir, "p")
        page = self.analyze(out, "--method", "patching", "--clean", "the cat sat on the mat",
                            "--corrupt", "the dog sat on the mat")
        b = self.open(page)
        self.assertTrue(b.evaluate("document.getElementById('maps-section').hidden"))
        resid = np.load(os.path.join(out, "patch_resid.npy"))
        cells = self.cells("Activation patching, residual")
        self.assert_texts(cells, resid.ravel())
        self.check_colours(cells, resid.ravel())
        heads = np.load(os.path.join(out, "patch_heads.npy"))
        self.assertEqual(len(self.cells("Activation patching, heads")), heads.size)
        # The page uses its width: the small grids side by side, the run as wide as the page
        # (they used to leave half the width empty).
        boxes = b.evaluate("Array.from(document.querySelectorAll('#analyses table')).map(t => {"
                           " const r = t.getBoundingClientRect(); return [r.left, r.top, r.right]; })")
        self.assertEqual(len(boxes), 2)
        self.assertEqual(boxes[0][1], boxes[1][1])
        self.assertGreater(boxes[1][0], boxes[0][2])
        width = b.evaluate("document.documentElement.clientWidth")
        run = b.evaluate("document.getElementById('config').getBoundingClientRect().width")
        self.assertGreater(run, 0.8 * width)
        b.save_screenshot("/tmp/pages_patching.png")
        self.assert_clean()

    def test_rollout_and_flow_headings(self):
        # They used to read "Per-head statistics" over a row "mean over heads", and "flow 1 layers".
        out = os.path.join(self.dir, "rf")
        page = self.analyze(out, "--text", "the cat sat on the mat", "--method", "rollout",
                            "--method", "flow")
        b = self.open(page)
        names = b.evaluate("mhaView.data.maps.map(m => m.name)")
        self.assertEqual(names, ["rollout", "flow"])
        self.assertNotIn("flow 1 layers", b.evaluate("document.getElementById('subtitle').textContent"))
        for i, name in enumerate(names):
            b.evaluate("mhaView.state.map = %d; mhaView.render()" % i)
            self.assertEqual(b.evaluate("document.getElementById('stats-title').textContent"),
                             "Statistics of the map (%s)" % name)
        b.save_screenshot("/tmp/pages_flow.png")
        self.assert_clean()

    def test_corpus_table(self):
        # A corpus run alone used to exit 2 ("nothing the page draws").
        out = os.path.join(self.dir, "corpus")
        texts = os.path.join(self.dir, "corpus.txt")
        with open(texts, "w") as f:
            f.write("the cat sat on the mat\nthe dog sat\nthe mat sat on the cat the cat\n")
        page = self.analyze(out, "--method", "corpus", "--texts", texts, "--batch", "2")
        b = self.open(page)
        b.save_screenshot("/tmp/pages_corpus.png")
        self.assertTrue(b.evaluate("document.getElementById('maps-section').hidden"))
        stats = np.load(os.path.join(out, "corpus_heads.npy"))  # (7, layers, heads)
        S, L, H = stats.shape
        cells = self.cells("Corpus statistics of each head")
        self.assertIsNotNone(cells)
        # A row per head (layer-major), a column per statistic, as corpus_heads.csv.
        want = stats.reshape(S, L * H).T
        self.assert_texts(cells, want.ravel())
        self.assert_hover(cells[S + 2][1], "layer 0, head 1, first_token: ", want[1, 2])
        # Each column on its own range: its lowest cell is viridis 0, its highest viridis 255.
        for c in range(S):
            col = [cells[r * S + c] for r in range(L * H)]
            self.check_colours(col, want[:, c])
        self.assert_clean()

    def test_detector_scores(self):
        out = os.path.join(self.dir, "det")
        page = self.analyze(out, "--method", "detectors", "--text", "the cat sat on the mat the cat sat")
        b = self.open(page)
        b.save_screenshot("/tmp/pages_detectors.png")
        scores = np.load(os.path.join(out, "head_scores.npy"))  # (3, layers, heads)
        for i, name in enumerate(["previous_token", "duplicate_token", "induction"]):
            cells = self.cells("Head detector: " + name)
            self.assertIsNotNone(cells, name)
            self.assert_texts(cells, scores[i].ravel())
            if scores[i].max() > scores[i].min():
                self.check_colours(cells, scores[i].ravel())
            self.assert_hover(cells[1][1], name + ", layer 0, head 1: ", scores[i, 0, 1])
        self.assert_clean()


def page_data(page):
    with open(page, encoding="utf-8") as f:
        return json.loads(re.search(r'<script id="mha-data" type="application/json">(.*?)</script>',
                                    f.read(), re.S).group(1))


def numpy_head_stats(a, n):
    """Per-head entropy, max weight, distance, diagonal and first key of maps (h, T, S) over
    their first n queries and n keys (a padded row's real tokens), in NumPy."""
    a = np.asarray(a, np.float64)[:, :n, :n]
    t, s = np.arange(n)[:, None], np.arange(n)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(a > 0, a * np.log(a), 0).sum(-1)
    return {"entropy": ent.mean(-1), "max_weight": a.max(-1).mean(-1),
            "distance": (a * np.abs(t - s)).sum(-1).mean(-1),
            "diagonal": np.diagonal(a, axis1=1, axis2=2).mean(-1), "first_key": a[:, :, 0].mean(-1)}


class PaddedRuns:
    """A GPT-2 checkpoint with its tokenizer; two texts of 7 and 10 tokens run as one padded
    batch and each alone (issue 50: padding counted as tokens, labels lost with two texts)."""
    TEXTS = ["The cat sat on the mat.", "Hello world, this is a longer second text."]

    @classmethod
    def make(cls, top):
        sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
        import checkpoints
        import tokenizer_files
        tok, _, V = tokenizer_files.byte_level_bpe(cls.TEXTS)
        config, t = checkpoints.make("gpt2", vocab=V)
        cls.model = os.path.join(top, "gpt2")
        checkpoints.write(cls.model, config, t)
        with open(os.path.join(cls.model, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        cls.runs = {}
        for name, texts in (("batch", cls.TEXTS), ("alone0", cls.TEXTS[:1]), ("alone1", cls.TEXTS[1:])):
            out = os.path.join(top, name)
            args = ["run", "--model", cls.model, "--save_attention", "--out_dir", out, "-q"]
            for text in texts:
                args += ["--text", text]
            r = mha(*args)
            assert r.returncode == 0, r.stderr
            cls.runs[name] = out
        with open(os.path.join(cls.runs["batch"], "tokens.json")) as f:
            cls.tokens = json.load(f)
        cls.lengths = cls.tokens["lengths"]
        assert cls.lengths[0] < cls.lengths[1]  # row 0 is padded

    @classmethod
    def view(cls, name, *args):
        page = os.path.join(cls.runs[name], "view%s.html" % "".join(args).replace("-", "_"))
        r = mha("view", cls.runs[name], "-o", page, "-q", *args)
        assert r.returncode == 0, r.stderr
        return page


class PaddedBatchNumbers(unittest.TestCase, PaddedRuns):
    """The per-head statistics of a padded batch row are those of its text run alone: in
    `mha view`'s page (each row) and `mha inspect` (over the batch: the alone runs' rows
    together), to 1e-6, and NumPy's over the row's real tokens; inspect names the axes and the
    file, and counts real query rows only."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="mha_view_padded_")
        cls.make(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_view_statistics_of_each_row_are_the_text_alone(self):
        batch = page_data(self.view("batch"))["maps"][0]
        maps = np.load(os.path.join(self.runs["batch"], "self_attention.npy"))
        for b in range(2):
            alone = page_data(self.view("alone%d" % b))["maps"][0]
            for layer in range(batch["layers"]):
                got, want = batch["stats"][layer][b], alone["stats"][layer][0]
                ref = numpy_head_stats(maps[layer, b], self.lengths[b])
                for i, (g, w) in enumerate(zip(got["heads"], want["heads"])):
                    self.assertEqual(g["rows"], self.lengths[b])  # no padded query row
                    for key in ("entropy", "entropy_fraction", "max_weight", "distance", "diagonal",
                                "first_key", "max_above_diagonal"):
                        self.assertAlmostEqual(g[key], w[key], delta=1e-6, msg=(b, layer, i, key))
                    for key, values in ref.items():
                        self.assertAlmostEqual(g[key], values[i], delta=1e-6, msg=(b, layer, i, key))
                    self.assertAlmostEqual(g["entropy_fraction"],
                                           ref["entropy"][i] / np.log(self.lengths[b]), delta=1e-6)
                for key in ("entropy", "max_weight", "distance"):
                    self.assertAlmostEqual(got["mean"][key], want["mean"][key], delta=1e-6)
        self.assertEqual(batch["query_lengths"], self.lengths)
        self.assertEqual(batch["key_lengths"], self.lengths)

    def test_inspect_counts_real_tokens_only(self):
        def inspect(name):
            r = mha("inspect", os.path.join(self.runs[name], "self_attention.npy"), "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)["attention"]
        got, parts = inspect("batch"), [inspect("alone0"), inspect("alone1")]
        layers, h = 3, 4
        self.assertEqual(got["layout"], "(layers, B, h, T, S)")
        self.assertEqual(got["distribution_rows"], layers * h * sum(self.lengths))
        self.assertEqual(got["padded_rows"], layers * h * (2 * max(self.lengths) - sum(self.lengths)))
        self.assertEqual(got["batch_axis"], 1)
        for i in range(h):
            rows = [p["heads"][i]["rows"] for p in parts]
            self.assertEqual(got["heads"][i]["rows"], sum(rows))
            for key in ("entropy", "max_weight", "distance", "diagonal", "first_key"):
                want = sum(p["heads"][i][key] * n for p, n in zip(parts, rows)) / sum(rows)
                self.assertAlmostEqual(got["heads"][i][key], want, delta=1e-6, msg=(i, key))
            # each row's entropy over log of its own keys
            want = sum(p["heads"][i]["entropy_fraction"] * n for p, n in zip(parts, rows)) / sum(rows)
            self.assertAlmostEqual(got["heads"][i]["entropy_fraction"], want, delta=1e-6)
        text = mha("inspect", os.path.join(self.runs["batch"], "self_attention.npy")).stdout
        self.assertIn("(layers, B, h, T, S) = (3, 2, 4, 10, 10)", text)
        self.assertIn("(named self_attention.npy)", text)
        self.assertIn("%d distributions" % (layers * h * sum(self.lengths)), text)


    def test_plot_draws_a_row_s_real_tokens(self):
        """mha plot of a padded row draws its real tokens only, labelled: the size of its text's
        plot alone; on main it drew the 10 x 10 padded map without labels."""
        def plot(name, b):
            png = os.path.join(self.dir, "%s_%d.png" % (name, b))
            r = mha("plot", os.path.join(self.runs[name], "self_attention.npy"), "--layer_index", "1",
                    "--batch_index", str(b), "-o", png)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(png, "rb") as f:
                head = f.read(24)
            return r.stderr, (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
        for b in range(2):
            n = self.lengths[b]
            log, size = plot("batch", b)
            self.assertIn("panel(s) of %dx%d cells" % (n, n), log)
            self.assertEqual(size, plot("alone%d" % b, 0)[1])


    def test_bad_lengths_refused(self):
        """A tokens.json whose lengths are not one count per row within padded_length: exit 2,
        one line naming it, nothing written."""
        for lengths, needle in (([7], '"lengths" is not a list of 2 row lengths'),
                                ([7, 11], '"lengths" holds 11; expected each row\'s count'),
                                ([7, "x"], '"lengths" holds "x"')):
            bad = os.path.join(self.dir, "bad")
            shutil.rmtree(bad, ignore_errors=True)
            shutil.copytree(self.runs["batch"], bad)
            with open(os.path.join(bad, "tokens.json")) as f:
                tokens = json.load(f)
            tokens["lengths"] = lengths
            with open(os.path.join(bad, "tokens.json"), "w") as f:
                json.dump(tokens, f)
            for args in (["view", bad, "-o", os.path.join(bad, "v.html")],
                         ["inspect", os.path.join(bad, "self_attention.npy")],
                         ["plot", os.path.join(bad, "self_attention.npy"), "--layer_index", "0",
                          "-o", os.path.join(bad, "p.png")]):
                r = mha(*args)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                self.assertEqual(r.stdout, "")
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                self.assertIn("tokens.json: " + needle, r.stderr)
            self.assertEqual(sorted(os.listdir(bad)), sorted(os.listdir(self.runs["batch"])))


class PaddedBatchPage(BrowserCase, PaddedRuns):
    """`mha view` of a two-text run in Chromium: each batch row labelled with its own tokens
    (token view, hover, axis labels), padded cells drawn in the padding grey, not viridis, and
    left out of the tokens; --batch_index 1 keeps row 1's tokens and says so (B = 2, row 1)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.make(cls.dir)

    def token_texts(self, attr):
        return self.browser.evaluate(
            "Array.from(document.querySelectorAll('#tokens text[data-%s]')).map((t) => t.firstChild.textContent)" % attr)

    def pick_batch(self, b):
        self.browser.evaluate("(() => { const s = document.getElementById('batch'); s.value = '%d';"
                              " s.dispatchEvent(new Event('change')); })()" % b)

    def test_rows_labelled_and_padding_grey(self):
        b = self.open(self.view("batch"))
        self.assertEqual(b.evaluate("Array.from(document.getElementById('batch').options).map((o) => o.textContent)"),
                         ["0", "1"])
        # row 0: its 7 tokens, no padded ones, in the token view
        self.assertEqual(self.token_texts("query"), self.tokens["tokens"][0])
        self.assertEqual(self.token_texts("key"), self.tokens["tokens"][0])
        n = self.lengths[0]
        set_scale(b, "shared")
        _, _, rows = b.screenshot()
        for (t, s) in ((n, 0), (max(self.lengths) - 1, 2), (0, n)):  # padded query rows and keys
            x, y = self.cell_center('#grid canvas[data-head="0"]', t, s)
            self.assertEqual(rows[int(y)][int(x)], (232, 232, 232), (t, s))
        x, y = self.cell_center('#grid canvas[data-head="0"]', n - 1, 1)
        self.assertNotEqual(rows[int(y)][int(x)], (232, 232, 232))
        b.mouse_move(x, y)
        self.assertIn('query %d "%s"' % (n - 1, self.tokens["tokens"][0][n - 1]), self.tooltip())
        self.assertIn('key 1 "%s"' % self.tokens["tokens"][0][1], self.tooltip())
        b.save_screenshot("/tmp/mha_padded_row0.png")
        # row 1: its own 10 tokens
        self.pick_batch(1)
        self.assertEqual(self.token_texts("query"), self.tokens["tokens"][1])
        x, y = self.cell_center('#grid canvas[data-head="0"]', 8, 3)
        b.mouse_move(x, y)
        self.assertIn('query 8 "%s"' % self.tokens["tokens"][1][8], self.tooltip())
        self.assertIn("batch row 1", self.tooltip())
        b.save_screenshot("/tmp/mha_padded_row1.png")
        self.assert_clean()

    def labels_inside_token_view(self):
        """Each token view label whose box (the font's full height and the text's width) does
        not lie inside the SVG's box, i.e. is cut off."""
        return self.browser.evaluate(
            "(() => { const r = document.getElementById('tokens').getBoundingClientRect();"
            " return [...document.querySelectorAll('#tokens text')].filter(t => {"
            " const q = t.getBoundingClientRect(); return q.left < r.left || q.right > r.right ||"
            " q.top < r.top || q.bottom > r.bottom; }).map(t => t.firstChild.textContent); })()")

    def margin_ink(self, head, side):
        """Dark (text) pixels in a grid panel's left or top margin, read from its canvas."""
        return self.browser.evaluate(
            "(() => { const c = document.querySelector('#grid canvas[data-head=\"%d\"]');"
            " const w = %s; if (!(w > 0)) return 0;"
            " const d = c.getContext('2d').getImageData(0, 0, %s, %s).data; let n = 0;"
            " for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 128 && d[i] < 100) n++; return n; })()"
            % (head, "+c.dataset.%s" % side, "side === 'left' ? w : c.width".replace("side", json.dumps(side)),
               "side === 'left' ? c.height : w".replace("side", json.dumps(side))))

    def test_every_label_shown_on_the_grid_and_in_the_token_view(self):
        # Issue 50: the token view's last label was cut off, and the grid's heatmaps had no
        # token labels on their axes. Each row's real tokens only (row 0: 7 of 10 positions).
        b = self.open(self.view("batch"))
        for row in (0, 1):
            self.pick_batch(row)
            n = self.lengths[row]
            self.assertEqual(len(self.token_texts("query")), n)
            self.assertEqual(self.labels_inside_token_view(), [], "row %d" % row)
            for head in range(2):
                got = b.evaluate("(() => { const c = document.querySelector('#grid canvas[data-head=\"%d\"]');"
                                 " return [+c.dataset.queryLabels, +c.dataset.keyLabels]; })()" % head)
                self.assertEqual(got, [n, n], "row %d head %d" % (row, head))
                self.assertGreater(self.margin_ink(head, "left"), 20, "row %d head %d" % (row, head))
                self.assertGreater(self.margin_ink(head, "top"), 20, "row %d head %d" % (row, head))
        b.save_screenshot("/tmp/mha_grid_labels.png")
        self.assert_clean()

    def test_batch_index_keeps_the_row_and_says_which(self):
        b = self.open(self.view("batch", "--batch_index", "1"))
        self.assertEqual(b.evaluate("Array.from(document.getElementById('batch').options).map((o) => o.textContent)"),
                         ["1"])
        self.assertIn("B = 2 (row 1 shown)", b.evaluate("document.getElementById('subtitle').textContent"))
        self.assertEqual(self.token_texts("query"), self.tokens["tokens"][1])
        self.assert_clean()


class BadInputs(unittest.TestCase):
    """Exit 2, one line naming the file and what was expected, nothing written."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_view_bad_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def p(self, *parts):
        return os.path.join(self.dir, *parts)

    def refuse(self, args, needle):
        before = set(os.listdir(self.dir))
        r = mha(*args)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(needle, lines[0])
        self.assertEqual(set(os.listdir(self.dir)), before, "something was written")

    def test_bad_inputs(self):
        np.save(self.p("output.npy"), np.full((2, 5, 8), 3.5, np.float32))
        self.refuse(["view", self.p("output.npy")], "expected attention weights in [0, 1]")
        np.save(self.p("ints.npy"), np.ones((2, 3, 4, 4), np.int64))
        self.refuse(["view", self.p("ints.npy")], "expected attention weights of dtype")
        np.save(self.p("flat.npy"), np.full(7, 0.5, np.float32))
        self.refuse(["view", self.p("flat.npy")], "expected attention weights (T, S)")
        np.save(self.p("a.npy"), known_maps())
        with open(self.p("three.txt"), "w") as f:
            f.write("a\nb\nc\n")
        self.refuse(["view", self.p("a.npy"), "--labels", self.p("three.txt")], "three.txt")
        self.refuse(["view", self.p("a.npy"), "--batch_index", "2"], "--batch_index 2")
        os.mkdir(self.p("empty_run"))
        self.refuse(["view", self.p("empty_run")], "no attention.npy")
        os.mkdir(self.p("sweep"))
        open(self.p("sweep", "results.jsonl"), "w").close()
        self.refuse(["view", self.p("sweep")], "no finished (ok) run")
        self.refuse(["view", self.p("missing.npy")], "missing.npy")
        # Too many weights for a page: refused from the header (a sparse 64 MiB file).
        big = np.lib.format.open_memmap(self.p("big.npy"), mode="w+", dtype=np.float32,
                                        shape=(4, 16, 512, 512))
        del big
        self.refuse(["view", self.p("big.npy")], "a page holds at most 8388608")

    def test_png_without_chromium(self):
        run = self.p("run")
        self.assertEqual(mha("run", "--h", "2", "--d_model", "8", "--seq_len", "4",
                             "--save_attention", "--out_dir", run, "-q").returncode, 0)
        env = dict(os.environ, PATH="/nonexistent", MHA_CHROMIUM="")
        r = subprocess.run([MHA, "view", run, "--png", self.p("v.png")], capture_output=True,
                           text=True, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--png " + self.p("v.png") + ": no Chromium", r.stderr)
        self.assertEqual(sorted(os.listdir(run)), ["attention.npy", "output.npy", "run.json"])
        self.assertFalse(os.path.exists(self.p("v.png")))

    def test_sweep_report_errors(self):
        # No run finished: results are still written, the report is refused, exit 2.
        out = self.p("failed")
        with open(self.p("f.json"), "w") as f:
            json.dump({"base": {"d_model": 16, "batch": 1, "seq_len": 4,
                                "weights": self.p("nonexistent.npz")},
                       "grid": {"h": [1, 2]}, "out_dir": out}, f)
        r = mha("sweep", self.p("f.json"), "--report", "--skip_invalid")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--report: " + os.path.join(out, "results.jsonl") + ": no finished (ok) run",
                      r.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "results.jsonl")))
        self.assertFalse(os.path.exists(os.path.join(out, "report.html")))
        # A chart key that is not swept is refused before any run.
        r = mha("sweep", self.p("f.json"), "--report", "--x", "seq_len", "--out_dir", self.p("x"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--x seq_len: not a swept key", r.stderr)
        self.assertFalse(os.path.exists(self.p("x")))
        r = mha("sweep", self.p("f.json"), "--y", "compute_ms", "--out_dir", self.p("y"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("give --report too", r.stderr)

    def test_bad_chart_choices(self):
        out = self.p("s")
        with open(self.p("s.json"), "w") as f:
            json.dump({"base": {"d_model": 16, "batch": 1, "seq_len": 4}, "grid": {"h": [1, 2]},
                       "out_dir": out}, f)
        self.assertEqual(mha("sweep", self.p("s.json")).returncode, 0)
        self.refuse(["view", out, "--y", "nonsense"], "--y nonsense: not a numeric column")
        self.refuse(["view", out, "--x", "seq_len"], "--x seq_len: not a swept key")
        self.refuse(["view", out, "--labels", self.p("s.json")], "is a sweep directory")


if __name__ == "__main__":
    wanted = sys.argv[1:]
    browser_tests = {"AttentionPage", "RunHtml", "LargePage", "SweepReport"}
    needing = sorted(set(wanted) & browser_tests if wanted else browser_tests)
    if needing:
        require_chromium(["view." + g for g in needing])
    unittest.main(argv=[sys.argv[0], *wanted], verbosity=2)
