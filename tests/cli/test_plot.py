#!/usr/bin/env python3
"""End-to-end tests of attention plots through the real binary: `mha run --plot` (attention.png
beside attention.npy, or alone) and `mha plot FILE.npy` on NumPy- and PyTorch-made files (size,
cell colors, options, logs), and its errors (exit 2, one stderr line, nothing written).

PNGs are decoded here with the standard library only (zlib and struct, PNG's scanline filters
undone by hand); the expected colors come from the committed lib/src/draw/viridis_table.inc.

Run by ctest, one TestCase class per test:
  /usr/bin/python3 tests/cli/test_plot.py [Class]   (MHA_BIN = path to mha,
                                                    MHA_SOURCE_DIR = repository root)
"""
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest
import zlib

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.environ.get("MHA_SOURCE_DIR", os.getcwd())


def viridis_table():
    with open(os.path.join(ROOT, "lib", "src", "draw", "viridis_table.inc")) as f:
        rows = re.findall(r"\{\s*(\d+),\s*(\d+),\s*(\d+)\}", f.read())
    assert len(rows) == 256, len(rows)
    return [tuple(int(c) for c in r) for r in rows]


VIRIDIS = viridis_table()


def viridis(v):
    """The table's nearest entry, as the tool picks it: index round(255 v)."""
    return VIRIDIS[int(np.clip(np.round(v * 255), 0, 255))]


def read_png(path):
    """(width, height, pixels): pixels[y][x] = (r, g, b), for 8-bit RGB non-interlaced PNGs,
    with every chunk's CRC checked."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert (depth, color, interlace) == (8, 2, 0), header  # RGB8, not interlaced
    raw = zlib.decompress(b"".join(idat))
    stride, bpp = 3 * width, 3
    assert len(raw) == height * (stride + 1)
    prev = np.zeros(stride, np.int64)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = np.frombuffer(raw, np.uint8, stride, start + 1).astype(np.int64)
        if kind == 1:  # Sub: running sums per channel
            line = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            line = (line + prev) % 256
        elif kind in (3, 4):  # Average, Paeth: sequential
            out = [0] * stride
            lst, up = line.tolist(), prev.tolist()
            for i in range(stride):
                a = out[i - bpp] if i >= bpp else 0
                b = up[i]
                if kind == 3:
                    pred = (a + b) >> 1
                else:
                    c = up[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                out[i] = (lst[i] + pred) & 255
            line = np.array(out, np.int64)
        else:
            assert kind == 0, f"unknown filter {kind}"
        rows.append(line)
        prev = line
    pixels = np.stack(rows).astype(np.uint8).reshape(height, width, 3)
    return width, height, pixels


def rgb(pixels, x, y):
    return tuple(int(c) for c in pixels[y, x])


def find(pixels, color, x0=0, y0=0):
    """The first pixel of `color` scanning rows from y0 down, each from x0 rightwards."""
    match = np.all(pixels[y0:, x0:] == np.array(color, np.uint8), axis=2)
    ys, xs = np.nonzero(match)
    if len(ys) == 0:
        return None
    k = np.lexsort((xs, ys))[0]
    return int(xs[k]) + x0, int(ys[k]) + y0


def run(args, cwd=ROOT):
    p = subprocess.run([MHA] + args, cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_plot_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def ok(self, args):
        rc, out, err = run(args)
        self.assertEqual(rc, 0, f"mha {' '.join(args)} failed: {err}")
        return out, err

    def save(self, name, array):
        np.save(self.path(name), array)
        return self.path(name)

    def logged_size(self, err, png):
        m = re.search(re.escape(png) + r" \((\d+)x(\d+) px", err)
        self.assertIsNotNone(m, err)
        return int(m.group(1)), int(m.group(2))


class RunPlot(Case):
    def test_run_writes_attention_png_beside_attention_npy(self):
        out = self.path("out")
        _, err = self.ok(["run", "--h", "4", "--d_model", "32", "--seq_len", "5", "--plot",
                          "--save_attention", "--out_dir", out])
        self.assertEqual(sorted(os.listdir(out)),
                         ["attention.npy", "attention.png", "output.npy", "run.json"])
        self.assertIn(f"wrote {out}/attention.png", err)
        with open(os.path.join(out, "run.json")) as f:
            report = json.load(f)
        self.assertIs(report["config"]["plot"], True)
        entry = report["outputs"]["attention.png"]
        width, height, pixels = read_png(os.path.join(out, "attention.png"))
        self.assertEqual((entry["width"], entry["height"]), (width, height))
        self.assertEqual((entry["panels"], entry["cells"], entry["downsample"]), (4, [5, 5], 1))
        # Cell (0, 0) of head 0 holds attention[0, 0, 0, 0] on the linear scale from 0 to the
        # largest weight of batch 0; it is found as the first pixel of that color.
        a = np.load(os.path.join(out, "attention.npy"))
        self.assertEqual(entry["color_range"], [0.0, float(a[0].max())])
        self.assertEqual(entry["cell_px"][0], entry["cell_px"][1])  # square
        cell = entry["cell_px"][0]
        self.assertGreaterEqual(cell, 24)
        expected = [[viridis(v / a[0].max()) for v in row] for row in a[0, 0]]
        x0, y0 = find(pixels, expected[0][0])
        for i in range(5):
            for j in range(5):
                self.assertEqual(rgb(pixels, x0 + j * cell + cell // 2, y0 + i * cell + cell // 2),
                                 expected[i][j], f"cell ({i}, {j})")

    def test_plot_alone_writes_no_attention_npy(self):
        out = self.path("out")
        self.ok(["run", "--h", "2", "--d_model", "16", "--seq_len", "300", "--causal", "--plot",
                 "--average_heads", "--out_dir", out])
        self.assertEqual(sorted(os.listdir(out)), ["attention.png", "output.npy", "run.json"])
        with open(os.path.join(out, "run.json")) as f:
            report = json.load(f)
        self.assertEqual(report["outputs"]["attention.png"]["panels"], 1)
        self.assertNotIn("attention.npy", report["outputs"])
        self.assertIn("attention_stats", report)  # the sink feeds the statistics too
        read_png(os.path.join(out, "attention.png"))

    def test_long_run_is_downsampled_and_says_so(self):
        out = self.path("out")
        _, err = self.ok(["run", "--h", "1", "--d_model", "8", "--seq_len", "1100", "--plot",
                          "--out_dir", out])
        self.assertIn("attention.png: batch 0 downsampled 1100x1100 to 367x367 cells by block max",
                      err)
        width, height, _ = read_png(os.path.join(out, "attention.png"))
        self.assertLess(max(width, height), 1000)


class PlotCommand(Case):
    def maps(self):
        """(2, 3, 5, 5): batch 1 has a one-hot diagonal (head 0), uniform weights (head 1) and
        everything on key 0 (head 2); batch 0 is uniform."""
        a = np.full((2, 3, 5, 5), 0.2, np.float32)
        a[1, 0] = np.eye(5)
        a[1, 2] = 0
        a[1, 2, :, 0] = 1
        return self.save("attention.npy", a)

    def test_numpy_file_cells_and_size(self):
        f = self.maps()
        _, err = self.ok(["plot", f, "--batch_index", "1", "--cell", "20"])
        png = self.path("attention.png")  # beside the input, .npy replaced
        self.assertEqual(sorted(os.listdir(self.tmp)), ["attention.npy", "attention.png"])
        width, height, pixels = read_png(png)
        self.assertEqual(self.logged_size(err, png), (width, height))
        # Head 0's cell (0, 0) is the first pixel of viridis(1) (the bar is right of it).
        x0, y0 = find(pixels, VIRIDIS[255])
        for i in range(5):
            for j in range(5):
                want = VIRIDIS[255] if i == j else VIRIDIS[0]
                self.assertEqual(rgb(pixels, x0 + 20 * j + 10, y0 + 20 * i + 10), want)
        # Head 1, to the right on the same rows: 0.2 everywhere.
        x1, y1 = find(pixels, viridis(0.2), x0 + 100)
        self.assertEqual(y1, y0)
        self.assertEqual(rgb(pixels, x1 + 90, y1 + 90), viridis(0.2))
        # 3 heads tile 2 x 2: 10 px more per cell widens and heightens the image by 2 x 5 x 10.
        _, err = self.ok(["plot", f, "--batch_index", "1", "--cell", "30", "-o", self.path("big.png")])
        w30, h30, _ = read_png(self.path("big.png"))
        self.assertEqual((w30 - width, h30 - height), (100, 100))

    def test_heads_average_and_shapes(self):
        f = self.maps()
        _, err = self.ok(["plot", f, "--batch_index", "1", "--head_indices", "2", "-o", self.path("h2.png")])
        self.assertIn("1 panel(s) of 5x5 cells", err)
        _, _, pixels = read_png(self.path("h2.png"))
        x, y = find(pixels, VIRIDIS[255])
        cell = (find(pixels, VIRIDIS[0], x)[0] - x)  # key 1 starts one cell to the right
        self.assertGreaterEqual(cell, 24)
        self.assertEqual(rgb(pixels, x + cell // 2, y + 4 * cell + cell // 2), VIRIDIS[255])
        # --average: heads 0 and 2 average to 1 on (0, 0), 0.5 on the rest of the diagonal and
        # of key 0, 0 elsewhere; the color range ends at 1.
        _, err = self.ok(["plot", f, "--batch_index", "1", "--head_indices", "0,2", "--average_heads",
                          "--cell", "10", "-o", self.path("mean.png")])
        self.assertIn("color linear, 0 to 1", err)
        _, _, pixels = read_png(self.path("mean.png"))
        x, y = find(pixels, VIRIDIS[255])
        self.assertEqual(rgb(pixels, x + 15, y + 15), viridis(0.5))
        self.assertEqual(rgb(pixels, x + 5, y + 25), viridis(0.5))
        self.assertEqual(rgb(pixels, x + 25, y + 5), VIRIDIS[0])
        # (B, T, S) float64 and (T, S) float16, default output names.
        three = self.save("mean3.npy", np.eye(4)[None].repeat(2, axis=0))
        two = self.save("two.npy", np.eye(3, dtype=np.float16))
        self.ok(["plot", three, "--batch_index", "1"])
        self.ok(["plot", two])
        read_png(self.path("mean3.png"))
        read_png(self.path("two.png"))

    def test_labels_log_scale_and_downsampling(self):
        tokens = self.path("tokens.txt")
        with open(tokens, "w") as f:
            f.write("The\nquick\nbrown\nfox\n.\n")
        f = self.maps()
        _, err = self.ok(["plot", f, "--labels", tokens, "--color_scale", "log", "-o", self.path("l.png")])
        self.assertNotIn("left out", err)
        self.assertIn("color log", err)
        _, err = self.ok(["plot", f, "--labels", tokens, "--cell", "4", "-o", self.path("s.png")])
        self.assertIn("warning: token labels left out: cells of 4 px are too small", err)
        big = np.zeros((1, 1, 600, 600), np.float32)
        big[0, 0, np.arange(600), np.arange(600)] = 1
        g = self.save("big.npy", big)
        _, err = self.ok(["plot", g, "--reduce", "mean", "--max_cells", "100"])
        self.assertIn("downsampled 600x600 to 100x100 cells by block mean (6x6 weights per cell)",
                      err)
        width, height, pixels = read_png(self.path("big.png"))
        # Block means of a one-hot diagonal: 6 ones in 36 weights, so every diagonal cell is the
        # maximum, 1/6, and takes the top color.
        cell = int(re.search(r"at (\d+) px", err).group(1))
        x, y = find(pixels, VIRIDIS[255])
        self.assertEqual(rgb(pixels, x + 99 * cell, y + 99 * cell), VIRIDIS[255])
        self.assertEqual(rgb(pixels, x + cell, y), VIRIDIS[0])

    def two_ranges(self):
        """(1, 2, 4, 4) float64: head 0 in [0, 1], head 1 in [0, 0.1], each with its largest value
        at (0, 0) and a zero at (3, 3)."""
        rng = np.random.default_rng(7)
        a = rng.uniform(0.0, 1.0, (1, 2, 4, 4))
        a[0, 0] /= a[0, 0].max()
        a[0, 1] = 0.1 * a[0, 1] / a[0, 1].max()
        for h in range(2):
            k = np.argmax(a[0, h])
            a[0, h].flat[k], a[0, h, 0, 0] = a[0, h, 0, 0], a[0, h].flat[k]
            a[0, h, 3, 3] = 0
        return a, self.save("ranges.npy", a)

    def cells(self, png, first_color, cell, heads):
        """The center colors of the 4 x 4 cells of `heads` panels side by side, found from the
        first pixel of each panel's cell (0, 0) color."""
        _, _, pixels = read_png(png)
        out, x = [], 0
        for color in first_color[:heads]:
            x0, y0 = find(pixels, color, x)
            out.append([[rgb(pixels, x0 + j * cell + cell // 2, y0 + i * cell + cell // 2)
                         for j in range(4)] for i in range(4)])
            x = x0 + 4 * cell + 1
        return out

    def test_per_head_color_range(self):
        a, f = self.two_ranges()
        png = self.path("per_head.png")
        _, err = self.ok(["plot", f, "--color_range", "per_head", "--cell", "20", "-o", png])
        self.assertIn("color linear per head, 0 to 1 over all panels", err)
        # Each head on its own range [0, its max]: both cells (0, 0) take the top color.
        got = self.cells(png, [VIRIDIS[255], VIRIDIS[255]], 20, 2)
        for h in range(2):
            want = [[viridis(v / a[0, h].max()) for v in row] for row in a[0, h]]
            self.assertEqual(got[h], want, f"head {h}")
        # Shared (the default): head 1 on head 0's range, so nothing of it reaches the top.
        shared = self.path("shared.png")
        self.ok(["plot", f, "--cell", "20", "-o", shared])
        got = self.cells(shared, [VIRIDIS[255], viridis(0.1)], 20, 2)
        self.assertEqual(got[1], [[viridis(v) for v in row] for row in a[0, 1]])
        # Per head with log colors: each from its smallest positive value to its largest.
        logs = self.path("log.png")
        self.ok(["plot", f, "--color_range", "per_head", "--color_scale", "log", "--cell", "20",
                 "-o", logs])
        got = self.cells(logs, [VIRIDIS[255], VIRIDIS[255]], 20, 2)
        for h in range(2):
            m = a[0, h]
            lo, hi = m[m > 0].min(), m.max()
            want = [[viridis(np.log10(v / lo) / np.log10(hi / lo)) if v > 0 else VIRIDIS[0]
                     for v in row] for row in m]
            self.assertEqual(got[h], want, f"head {h}")

    def test_vmin_vmax(self):
        a, f = self.two_ranges()
        png = self.path("fixed.png")
        _, err = self.ok(["plot", f, "--vmin", "0.2", "--vmax", "0.6", "--cell", "20", "-o", png])
        self.assertIn("color linear, 0.2 to 0.6", err)
        # Head 0's (0, 0) holds 1, above vmax: it takes the top color, as do all above 0.6;
        # head 1 lies below vmin everywhere: the bottom color.
        got = self.cells(png, [VIRIDIS[255], VIRIDIS[0]], 20, 2)
        want = [[viridis(np.clip((v - 0.2) / 0.4, 0, 1)) for v in row] for row in a[0, 0]]
        self.assertEqual(got[0], want)
        self.assertEqual(got[1], [[VIRIDIS[0]] * 4] * 4)
        # Per head with vmax: every panel's top is 0.05, its bottom its own (0).
        png = self.path("per_head_vmax.png")
        self.ok(["plot", f, "--color_range", "per_head", "--vmax", "0.05", "--cell", "20",
                 "-o", png])
        got = self.cells(png, [VIRIDIS[255], VIRIDIS[255]], 20, 2)
        for h in range(2):
            want = [[viridis(min(v / 0.05, 1)) for v in row] for row in a[0, h]]
            self.assertEqual(got[h], want, f"head {h}")
        # Only one end: the other from the data; log with fixed ends.
        self.ok(["plot", f, "--vmax", "0.5", "-o", self.path("top.png")])
        _, err = self.ok(["plot", f, "--vmin", "0.01", "--vmax", "0.1", "--color_scale", "log",
                          "-o", self.path("log.png")])
        self.assertIn("color log, 0.01 to 0.1", err)

    def test_pytorch_attention_weights(self):
        import torch  # python3-torch (scripts/setup.sh --test); imported here so others start fast
        torch.manual_seed(0)
        layer = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        x = torch.rand(2, 7, 16)
        _, w = layer(x, x, x, need_weights=True, average_attn_weights=False)  # (B, h, T, S)
        f = self.save("torch_attention.npy", w.detach().numpy())
        _, err = self.ok(["plot", f, "--head_indices", "3"])
        _, _, pixels = read_png(self.path("torch_attention.png"))
        a = w.detach().numpy()[0, 3]
        x0, y0 = find(pixels, viridis(a[0, 0] / a.max()))
        cell = int(re.search(r"at (\d+) px", err).group(1))
        self.assertEqual(rgb(pixels, x0 + 6 * cell + cell // 2, y0 + 6 * cell + cell // 2),
                         viridis(a[6, 6] / a.max()))


class PlotErrors(Case):
    def expect_error(self, args, fragment):
        before = sorted(os.listdir(self.tmp))
        rc, out, err = run(args)
        self.assertEqual(rc, 2, f"exit code for {args}: stderr was {err!r}")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got {err!r}")
        self.assertIn(fragment, lines[0])
        self.assertEqual(sorted(os.listdir(self.tmp)), before, "a failed plot left files behind")

    def test_bad_flags_and_files(self):
        a = self.save("a.npy", np.full((2, 3, 4, 4), 0.25, np.float32))
        cross = self.save("cross.npy", np.full((1, 2, 3, 5), 0.2, np.float32))
        three = self.path("three.txt")
        with open(three, "w") as f:
            f.write("x\ny\nz\n")
        self.expect_error(["plot", a, "--head_indices", "3"], "--head_indices 3: head 3 is out of range")
        self.expect_error(["plot", a, "--head_indices", "0,x"], "expected all or comma-separated")
        self.expect_error(["plot", a, "--head_indices", "1,1"], "head 1 is listed twice")
        self.expect_error(["plot", a, "--batch_index", "2"], "--batch_index 2: " + a + " holds B = 2")
        self.expect_error(["plot", a, "--color_scale", "cubic"], "--color_scale: cubic not in")
        self.expect_error(["plot", a, "--reduce", "median"], "--reduce: median not in")
        self.expect_error(["plot", a, "--cell", "0"], "--cell")
        self.expect_error(["plot", a, "--cell", "100"], "--cell")
        self.expect_error(["plot", a, "--labels", three],
                          "three.txt: 3 labels (one per line) but the map has T = 4 query positions")
        self.expect_error(["plot", cross, "--labels", three],
                          "but S = 5 key positions; give the keys' labels with --key_labels")
        self.expect_error(["plot", cross, "--key_labels", three],
                          "three.txt: 3 labels (one per line) but the map has S = 5 key positions")
        self.expect_error(["plot", a, "--labels", self.path("none.txt")], "cannot open")
        self.expect_error(["plot", self.path("missing.npy")], "missing.npy")
        self.expect_error(["plot", self.save("i.npy", np.ones((2, 2), np.int64))],
                          "expected attention weights of dtype float16, float32 or float64")
        self.expect_error(["plot", self.save("v.npy", np.ones(5, np.float32))],
                          "expected attention weights (B, h, T, S), (B, T, S) or (T, S)")
        self.expect_error(["plot", self.save("m.npy", np.ones((4, 4), np.float32)),
                           "--head_indices", "0"], "has no heads axis")
        self.expect_error(["plot", a, "--colour", "red"], "unknown option --colour")
        self.expect_error(["plot"], "file is required")
        self.expect_error(["plot", a, "-o", self.tmp], "expected a file name for the PNG")
        self.expect_error(["plot", a, "-o", a], "would overwrite its input")

    def test_color_range_errors(self):
        a = self.save("a.npy", np.full((2, 3, 4, 4), 0.25, np.float32))
        self.expect_error(["plot", a, "--vmin", "0.5", "--vmax", "0.5"],
                          "--vmin 0.5 is not below --vmax 0.5: expected vmin < vmax")
        self.expect_error(["plot", a, "--vmin", "0.7", "--vmax", "0.2"],
                          "--vmin 0.7 is not below --vmax 0.2: expected vmin < vmax")
        self.expect_error(["plot", a, "--vmin", "nan"],
                          "--vmin nan: expected a finite number for an end of the color range")
        self.expect_error(["plot", a, "--vmax", "inf"],
                          "--vmax inf: expected a finite number for an end of the color range")
        self.expect_error(["plot", a, "--vmin", "0", "--color_scale", "log"],
                          "--vmin 0 with --color_scale log: expected a positive value")
        self.expect_error(["plot", a, "--vmin", "-0.1", "--color_scale", "log",
                           "--color_range", "per_head"],
                          "--vmin -0.1 with --color_scale log: expected a positive value")
        self.expect_error(["plot", a, "--vmax", "-1", "--color_scale", "log"],
                          "--vmax -1 with --color_scale log: expected a positive value")
        self.expect_error(["plot", a, "--vmin", "abc"], "--vmin")
        self.expect_error(["plot", a, "--color_range", "spread"], "--color_range: spread not in")


class LargeMaps(Case):
    """`mha plot` and `mha view` on a 30000 x 30000 float32 map (3.6 GB, a sparse file that costs
    no disk): rows are read a block at a time, so peak resident memory stays under 300 MB."""

    N = 30000
    MAX_RSS_MB = 300

    def sparse_map(self):
        path = self.path("big.npy")
        header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1, 1, 1), np.float32))
        header["shape"] = (1, 1, self.N, self.N)
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, header)
            f.truncate(f.tell() + self.N * self.N * 4)
        return path

    @staticmethod
    def sanitized():
        """An AddressSanitizer build (.ci/run's third pass) reserves terabytes of shadow address
        space and holds freed blocks in a quarantine of up to 256 MB: neither the address-space
        limit nor the resident-memory bound applies to it."""
        with open(MHA, "rb") as f:
            return b"__asan_init" in f.read()

    def assert_bounded(self, rss, what):
        if not self.sanitized():
            self.assertLess(rss, self.MAX_RSS_MB, f"{what} took {rss:.0f} MB")

    def measured(self, args):
        """Exit code, stderr and peak resident memory in MB of `mha ARGS` (the child's rusage). A
        2 GiB address-space limit keeps a regression from taking the machine's memory."""
        import resource

        def limit():
            if not self.sanitized():
                resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

        with tempfile.TemporaryFile() as err:
            p = subprocess.Popen([MHA] + args, stdout=subprocess.DEVNULL, stderr=err,
                                 preexec_fn=limit)
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            return p.returncode, err.read().decode(errors="replace"), usage.ru_maxrss / 1024

    def test_plot_in_bounded_memory(self):
        big, png = self.sparse_map(), self.path("big.png")
        rc, err, rss = self.measured(["plot", big, "-o", png])
        self.assertEqual(rc, 0, err)
        self.assert_bounded(rss, "mha plot")
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertRegex(err, r"downsampled 30000x30000 to \d+x\d+ cells by block max")

    def test_view_in_bounded_memory(self):
        big, html = self.sparse_map(), self.path("big.html")
        rc, err, rss = self.measured(["view", big, "-o", html])
        self.assertEqual(rc, 0, err)
        self.assert_bounded(rss, "mha view")
        with open(html) as f:
            page = f.read()
        self.assertLess(len(page), 64 << 20)
        # The map is held as blocks of 11 x 11 weights: 2728 x 2728 cells.
        data = json.loads(re.search(r'<script id="mha-data" type="application/json">(.*?)</script>',
                                    page, re.S).group(1))
        m = data["maps"][0]
        self.assertEqual((m["T_file"], m["S_file"], m["factor"], m["T"], m["S"]),
                         (self.N, self.N, 11, 2728, 2728))


if __name__ == "__main__":
    unittest.main(verbosity=2)
