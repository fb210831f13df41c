#!/usr/bin/python3
"""`mha run --model DIR --image FILE`: ViT checkpoints (checkpoints.py's random ones, float32 and
bfloat16 files) from PNG files the tests write with zlib and struct, held against
reference.vit (modeling_vit.py in float64 PyTorch) on pixel values made here by the same steps
as ViTImageProcessor: decode, PIL's resize (transcribed below in plain Python: no PIL, no NumPy
in the resize), rescale (float64, then float32), normalize (float32). The resize is also held
to PIL's own where python3-pil is installed (setup.sh's python3-matplotlib depends on it).

  Forward     every map, the hidden states and the output at 1e-5; images.npy, tokens.json, run.json
  Preprocess  every resample PIL has a convolution for, bit for bit; 16-bit, palette, grey,
              grey+alpha and RGBA PNGs converted as PIL's convert("RGB") does
  Python      mha.Model on paths and uint8 arrays: the CLI's bits (top-k classes and ablation too)
  Refusals    truncated PNG, a 60,000 x 60,000 header (peak RSS < 200 MB), nearest resample,
              --image with a text model, --text with vit: exit 2, one line, nothing written
  Classifier  ViTForImageClassification's classes (run.json's top_k, labels from id2label or
              LABEL_i) against the reference's classifier logits at 1e-5, float32 and bfloat16
              files; the classifier's shape and id2label checked
  Ablation    `mha analyze --image --method ablation`: zeroing a head's output is the reference
              with that head's columns of the output projection zeroed (loss of the clean
              class, KL over the classes, logit_diff of two labels) at 1e-5; refusals

DeiT (modeling_deit.py, reference.deit; ctest models.deit.*, the Deit* groups):
  DeitForward     [CLS], [DIST], the patches: maps, hidden states, output at 1e-5 (F32, BF16;
                  the teacher's heads, one classifier, a DeiTModel)
  DeitPreprocess  DeiTImageProcessor's resize then centre crop (padded where the crop is the
                  larger) against the transcription of transformers' center_crop below and PIL;
                  its defaults, the hub's legacy keys; a vit with DeiT's processor
  DeitClassifier  (cls_classifier(CLS) + distillation_classifier(DIST)) / 2, top-k at 1e-5
  DeitRefusals    hostile crop_size, do_center_crop, size, processor class; a crop that is not
                  image_size; a head's tensor missing or of the wrong shape; --text
  DeitAnalyze     rollout at 1e-5, flow and norms; ablation of the teacher's heads at 1e-5

  /usr/bin/python3 tests/models/test_vit.py [Group]   (MHA_BIN = path to mha)
"""
import json
import errno
import io
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import reference  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOL = dict(rtol=1e-5, atol=1e-5)
OUTPUTS = ("output.npy", "self_attention.npy", "hidden_states.npy", "tokens.json", "run.json",
           "images.npy")


def png_bytes(pixels, color=2, depth=8, palette=None, trns=None):
    """A PNG of `pixels` (H, W, channels) or (H, W) as stored samples: color type 0 grey, 2 RGB,
    3 palette indices, 4 grey+alpha, 6 RGBA; depth 1/2/4 grey packed MSB first."""
    a = np.asarray(pixels)
    h, w = a.shape[:2]
    raw = bytearray()
    for y in range(h):
        raw.append(0)  # filter: none
        if depth < 8:
            bits = "".join(format(int(v), f"0{depth}b") for v in a[y].reshape(-1))
            bits += "0" * (-len(bits) % 8)
            raw += bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        else:
            raw += a[y].astype(">u2" if depth == 16 else np.uint8).tobytes()

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        out += chunk(b"tRNS", bytes(trns))
    return out + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


def png_chunk(t, data, length=None):
    """A PNG chunk; `length` declares another length than the data's."""
    return (struct.pack(">I", len(data) if length is None else length) + t + data
            + struct.pack(">I", zlib.crc32(t + data)))


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_ihdr(width, height, depth=8, color=2):
    return png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0))


# Peak RSS measured from a small Python of its own: a child forked from the test (PyTorch
# loaded) would count the test's pages in its peak RSS.
PROBE = ("import os, subprocess, sys, time\n"
         "t = time.time()\n"
         "p = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)\n"
         "err = p.stderr.read()\n"
         "_, status, usage = os.wait4(p.pid, 0)\n"
         "sys.stdout.write('%d %d %f\\n' % (os.waitstatus_to_exitcode(status), usage.ru_maxrss,\n"
         "                                  time.time() - t))\n"
         "sys.stdout.write(err.decode())\n")


def measured(cmd, timeout=60):
    """(exit code, peak RSS in bytes, seconds, stderr) of `cmd`; a run past `timeout` is killed
    (the probe with it) and fails the test."""
    r = subprocess.run([sys.executable, "-c", PROBE] + cmd, capture_output=True, text=True,
                       timeout=timeout)
    first, err = r.stdout.split("\n", 1)
    code, rss_kb, seconds = first.split()
    return int(code), int(rss_kb) * 1024, float(seconds), err


def jpeg_segments(data):
    """(marker, start, end) of each JPEG segment after SOI; a scan (SOS) runs to the next marker
    that is not a stuffed 0xFF00 or a restart marker."""
    out, i = [], 2
    while i < len(data):
        m = data[i + 1]
        if m == 0xD9:
            out.append((m, i, i + 2))
            break
        end = i + 2 + struct.unpack(">H", data[i + 2:i + 4])[0]
        if m == 0xDA:
            while True:
                end = data.index(b"\xff", end)
                if data[end + 1] == 0 or 0xD0 <= data[end + 1] <= 0xD7:
                    end += 2
                    continue
                break
        out.append((m, i, end))
        i = end
    return out


def fifo_with_writer(path, data):
    """A FIFO at `path` and a thread that writes `data` to its first reader, then closes it: a
    second open of the path waits for a writer that never comes."""
    os.mkfifo(path)

    def write():
        deadline = time.time() + 120
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as e:  # ENXIO: no reader yet
                if e.errno != errno.ENXIO or time.time() > deadline:
                    return
                time.sleep(0.01)
        os.set_blocking(fd, True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)
    threading.Thread(target=write, daemon=True).start()
    return path


# ---- PIL's Image.resize (libImaging/Resample.c), in plain Python ---------------------------

def _bilinear(x):
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _box(x):
    return 1.0 if -0.5 < x <= 0.5 else 0.0


def _hamming(x):
    x = abs(x)
    if x == 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0
    x = x * math.pi
    return math.sin(x) / x * (0.54 + 0.46 * math.cos(x))


def _bicubic(x):
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _sinc(x):
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


def _lanczos(x):
    return _sinc(x) * _sinc(x / 3) if -3.0 <= x < 3.0 else 0.0


FILTERS = {1: (3.0, _lanczos), 2: (1.0, _bilinear), 3: (2.0, _bicubic), 4: (0.5, _box),
           5: (1.0, _hamming)}
BITS = 22  # PRECISION_BITS = 32 - 8 - 2


def _coeffs(in_size, out_size, resample):
    support, f = FILTERS[resample]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    out = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        ss = 1.0 / filterscale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        w = [f((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = sum(w) if w else 0.0
        total = 0.0
        for v in w:
            total += v
        k = []
        for v in w:
            v = v / total if total != 0.0 else v
            k.append(int(-0.5 + v * (1 << BITS)) if v < 0 else int(0.5 + v * (1 << BITS)))
        del ww
        out.append((xmin, k))
    return out


def _clip8(v):
    if v >= 1 << BITS << 8:
        return 255
    if v <= 0:
        return 0
    return v >> BITS


def resize(rows, width, height, resample):
    """rows: [[(r, g, b), ...] per row]; PIL's resize to (width, height): horizontal pass, then
    vertical, each rounded to 8 bits."""
    if width != len(rows[0]):
        cs = _coeffs(len(rows[0]), width, resample)
        rows = [[tuple(_clip8((1 << (BITS - 1)) + sum(row[xmin + i][ch] * k[i] for i in range(len(k))))
                       for ch in range(3)) for xmin, k in cs] for row in rows]
    if height != len(rows):
        cs = _coeffs(len(rows), height, resample)
        rows = [[tuple(_clip8((1 << (BITS - 1)) + sum(rows[ymin + i][x][ch] * k[i] for i in range(len(k))))
                       for ch in range(3)) for x in range(len(rows[0]))] for ymin, k in cs]
    return rows


def center_crop(rows, height, width):
    """transformers' image_transforms.center_crop of [[(r, g, b), ...] per row] to height x
    width, transcribed: top = (h - height) // 2, left = (w - width) // 2; where the crop is the
    larger, the image is first padded with zeros (ceil of half the difference before it)."""
    h, w = len(rows), len(rows[0])
    top, left = (h - height) // 2, (w - width) // 2
    bottom, right = top + height, left + width
    if top >= 0 and bottom <= h and left >= 0 and right <= w:
        return [row[left:right] for row in rows[top:bottom]]
    new_h, new_w = max(height, h), max(width, w)
    top_pad, left_pad = math.ceil((new_h - h) / 2), math.ceil((new_w - w) / 2)
    padded = [[(0, 0, 0)] * new_w for _ in range(new_h)]
    for y in range(h):
        padded[top_pad + y][left_pad:left_pad + w] = rows[y]
    top, bottom, left, right = top + top_pad, bottom + top_pad, left + left_pad, right + left_pad
    return [row[max(0, left):min(new_w, right)] for row in padded[max(0, top):min(new_h, bottom)]]


def processed(a, pre):
    """What DeiTImageProcessor (ViTImageProcessor without crop_size) makes of (h, w, 3) uint8
    before rescaling: the plain-Python resize, then the crop; and the same through PIL
    (Image.resize, then Image.crop of the box center_crop takes, which fills with zeros
    outside the image), or None without PIL."""
    rows = [[tuple(int(v) for v in px) for px in row] for row in a]
    Image = pil()
    im = Image.fromarray(a) if Image is not None else None
    if pre.get("do_resize", True):
        size = pre["size"]
        rows = resize(rows, size["width"], size["height"], pre["resample"])
        if im is not None:
            im = im.resize((size["width"], size["height"]), resample=pre["resample"])
    if pre.get("do_center_crop") and pre.get("image_processor_type") != "ViTImageProcessor":
        ch, cw = pre["crop_size"]["height"], pre["crop_size"]["width"]
        if im is not None:
            top, left = (len(rows) - ch) // 2, (len(rows[0]) - cw) // 2
            im = im.crop((left, top, left + cw, top + ch))
        rows = center_crop(rows, ch, cw)
    return np.array(rows, np.uint8), None if im is None else np.asarray(im)


def pixel_values(rgb, pre):
    """ViTImageProcessor's rescale and normalize of (H, W, 3) uint8: (3, H, W) float32."""
    x = (rgb.astype(np.float64) * pre["rescale_factor"]).astype(np.float32)
    x = (x - np.array(pre["image_mean"], np.float32)) / np.array(pre["image_std"], np.float32)
    return x.transpose(2, 0, 1).copy()


def pil():
    try:
        from PIL import Image
        return Image
    except ImportError:
        return None


class VitTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_vit_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def checkpoint(self, name="vit", dtype="F32", pre=None, family="vit", **kw):
        config, t = checkpoints.make(family, **kw)
        d = self.path(name)
        sd = checkpoints.write(d, config, t, dtype)
        H, W = config_height(config), config_width(config)
        if pre is None and family == "deit":  # DeiTImageProcessor's steps: resize, then crop
            pre = checkpoints.preprocessor_config(H + 5, W + 3, resample=3, mean=IMAGENET_MEAN,
                                                  std=IMAGENET_STD, crop=(H, W))
        pre = pre or checkpoints.preprocessor_config(H, W)
        if pre != "none":
            checkpoints.write_preprocessor(d, pre)
        return d, config, sd, pre

    def image(self, name, pixels, **kw):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(png_bytes(pixels, **kw))
        return p

    def mha(self, *args, code=0, out="out"):
        out = self.path(out)
        cmd = [MHA, "run", "--out_dir", out, "-q"] + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, code, f"{' '.join(cmd)}\nstderr: {p.stderr}")
        return out, p


def config_height(c):
    s = c["image_size"]
    return s[0] if isinstance(s, list) else s


def config_width(c):
    s = c["image_size"]
    return s[1] if isinstance(s, list) else s


class Forward(VitTest):
    def run_case(self, dtype="F32", **kw):
        d, config, sd, pre = self.checkpoint(dtype=dtype, **kw)
        rng = np.random.default_rng(3)
        shapes = [(50, 37), (20, 30)]  # one downscaled, one upscaled in width
        arrays = [rng.integers(0, 256, (h, w, 3)).astype(np.uint8) for h, w in shapes]
        files = [self.image(f"im{i}.png", a) for i, a in enumerate(arrays)]
        out, _ = self.mha("--model", d, "--image", files[0], "--image", files[1],
                          "--save_attention", "--save_hidden_states")
        H, W = config_height(config), config_width(config)
        seen = np.array([resize([[tuple(int(v) for v in px) for px in row] for row in a], W, H, 2)
                         for a in arrays], np.uint8)
        np.testing.assert_array_equal(np.load(os.path.join(out, "images.npy")), seen)
        ref = reference.vit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        maps = np.load(os.path.join(out, "self_attention.npy"))
        T = (H // config["patch_size"]) * (W // config["patch_size"]) + 1
        self.assertEqual(maps.shape, (config["num_hidden_layers"], 2, config["num_attention_heads"],
                                      T, T))
        for n, a in enumerate(ref["attentions"]):
            np.testing.assert_allclose(maps[n], a, **TOL, err_msg=f"layer {n}")
        np.testing.assert_allclose(np.load(os.path.join(out, "output.npy")), ref["output"], **TOL)
        np.testing.assert_allclose(np.load(os.path.join(out, "hidden_states.npy")),
                                   ref["hidden_states"], **TOL)
        return out, files

    def test_float32(self):
        out, files = self.run_case()
        tokens = json.load(open(os.path.join(out, "tokens.json")))
        self.assertEqual(tokens["tokens"][0][:3], ["[CLS]", "patch (0, 0)", "patch (0, 1)"])
        self.assertEqual(tokens["tokens"][0][-1], "patch (3, 2)")
        run = json.load(open(os.path.join(out, "run.json")))
        self.assertEqual([im["path"] for im in run["input"]["images"]], files)
        self.assertEqual(run["input"]["images"][0]["crc32"],
                         format(zlib.crc32(open(files[0], "rb").read()), "08x"))
        self.assertEqual(run["preprocessing"]["resample_name"], "bilinear")
        self.assertEqual(run["preprocessing"]["size"], {"height": 32, "width": 24})
        self.assertEqual(run["input"]["patch_grid"], [4, 3])

    def test_bfloat16_file(self):
        self.run_case("BF16")

    def test_classifier_names_and_no_qkv_bias(self):
        self.run_case(prefixed=True, qkv_bias=False)

    def test_square(self):
        self.run_case(image_height=24, image_width=24, patch_size=6)


class Preprocess(VitTest):
    def test_resamples(self):
        a = np.random.default_rng(5).integers(0, 256, (41, 19, 3)).astype(np.uint8)
        f = self.image("a.png", a)
        rows = [[tuple(int(v) for v in px) for px in row] for row in a]
        Image = pil()
        for resample in (1, 2, 3, 4, 5):
            pre = checkpoints.preprocessor_config(32, 24, resample=resample)
            d, *_ = self.checkpoint(f"vit{resample}", pre=pre)
            out, _ = self.mha("--model", d, "--image", f, out=f"out{resample}")
            got = np.load(os.path.join(out, "images.npy"))[0]
            np.testing.assert_array_equal(got, np.array(resize(rows, 24, 32, resample), np.uint8),
                                          err_msg=f"resample {resample}")
            if Image is not None:
                want = np.asarray(Image.fromarray(a).resize((24, 32), resample=resample))
                np.testing.assert_array_equal(got, want, err_msg=f"PIL, resample {resample}")

    def converted(self, name, stored, want, **kw):
        """An image of the model's size (32 x 24: no resize) as the model sees it."""
        d = self.path("vit")
        if not os.path.exists(d):
            self.checkpoint()
        f = self.image(name, stored, **kw)
        out, _ = self.mha("--model", d, "--image", f, out="out_" + name)
        got = np.load(os.path.join(out, "images.npy"))[0]
        np.testing.assert_array_equal(got, want, err_msg=name)
        Image = pil()
        # PIL opens 16-bit grey as I;16 and clips it to 255 in convert("RGB"); the rest it
        # converts as mha does
        if Image is not None and not (kw.get("color", 2) == 0 and kw.get("depth", 8) == 16):
            np.testing.assert_array_equal(np.asarray(Image.open(f).convert("RGB")), want,
                                          err_msg="PIL: " + name)
        with open(os.path.join(out, "run.json")) as f:
            return json.load(f)["input"]["images"][0]["converted"]

    def test_conversions(self):
        rng = np.random.default_rng(9)
        rgb16 = rng.integers(0, 65536, (32, 24, 3))
        self.assertIn("16-bit", self.converted("rgb16.png", rgb16, (rgb16 >> 8).astype(np.uint8),
                                               depth=16))
        rgba = rng.integers(0, 256, (32, 24, 4))
        self.assertIn("alpha dropped", self.converted("rgba.png", rgba, rgba[..., :3], color=6))
        grey = rng.integers(0, 256, (32, 24))
        self.converted("grey.png", grey, np.repeat(grey[..., None], 3, 2), color=0)
        ga = rng.integers(0, 256, (32, 24, 2))
        self.converted("ga.png", ga, np.repeat(ga[..., :1], 3, 2), color=4)
        grey2 = rng.integers(0, 4, (32, 24))
        self.converted("grey2.png", grey2, np.repeat(grey2[..., None] * 85, 3, 2), color=0, depth=2)
        grey16 = rng.integers(0, 65536, (32, 24))
        self.converted("grey16.png", grey16, np.repeat((grey16 >> 8)[..., None], 3, 2), color=0,
                       depth=16)
        palette = rng.integers(0, 256, (16, 3))
        idx = rng.integers(0, 16, (32, 24))
        self.assertIn("palette", self.converted(
            "pal.png", idx, palette[idx].astype(np.uint8), color=3,
            palette=palette.reshape(-1).tolist(), trns=[0, 128, 255]))

    def test_jpeg(self):
        """A JPEG (written by PIL: python3-matplotlib's dependency) decoded as PIL decodes it."""
        from PIL import Image
        d, *_ = self.checkpoint()
        a = np.random.default_rng(2).integers(0, 256, (32, 24, 3)).astype(np.uint8)
        for mode in ("RGB", "L"):
            f = self.path(f"im_{mode}.jpg")
            Image.fromarray(a).convert(mode).save(f, quality=90)
            out, _ = self.mha("--model", d, "--image", f, out="out_" + mode)
            np.testing.assert_array_equal(np.load(os.path.join(out, "images.npy"))[0],
                                          np.asarray(Image.open(f).convert("RGB")), err_msg=mode)
        data = open(f, "rb").read()
        with open(self.path("cut.jpg"), "wb") as h:
            h.write(data[:len(data) // 2])
        _, p = self.mha("--model", d, "--image", self.path("cut.jpg"), code=2, out="cut")
        self.assertRegex(p.stderr.strip(), "cut.jpg: truncated JPEG")


class Refusals(VitTest):
    def refused(self, args, pattern):
        out = self.path("refused")
        _, p = self.mha(*args, code=2, out="refused")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertRegex(lines[0], pattern)
        for name in OUTPUTS:
            self.assertFalse(os.path.exists(os.path.join(out, name)), name)
        return p

    def test_refusals(self):
        d, config, _, _ = self.checkpoint()
        good = png_bytes(np.zeros((32, 24, 3), np.uint8))
        for name, data, pattern in (
                ("cut.png", good[:len(good) - 30], "cut.png: truncated PNG"),
                ("half.png", good[:60], "half.png: .*PNG"),
                ("text.png", b"hello", "text.png: not a PNG or JPEG")):
            with open(self.path(name), "wb") as f:
                f.write(data)
            self.refused(["--model", d, "--image", self.path(name)], pattern)
        self.refused(["--model", d, "--text", "a cat"], "--text: .* reads images; give --image")
        bert, t = checkpoints.make("bert")
        checkpoints.write(self.path("bert"), bert, t)
        self.refused(["--model", self.path("bert"), "--image", self.image("g.png", np.zeros((4, 4, 3)))],
                     "--image: .* reads text")
        nearest = self.path("nearest")
        shutil.copytree(d, nearest)
        checkpoints.write_preprocessor(nearest, checkpoints.preprocessor_config(32, 24, resample=0))
        self.refused(["--model", nearest, "--image", self.image("n.png", np.zeros((4, 4, 3)))],
                     r"resample' is 0 \(nearest\), which is not supported")
        # a crop larger than the resized image is zero-padded to its size: 20000 x 20000 refused
        crop = self.path("crop")
        shutil.copytree(d, crop)
        checkpoints.write_preprocessor(crop, checkpoints.preprocessor_config(32, 24, crop=(20000, 20000)))
        self.refused(["--model", crop, "--image", self.image("c.png", np.zeros((4, 4, 3)))],
                     r"crop_size.*at most 2\^27 pixels")
        # the batch's pixel values (B, 3, 32, 24) float32 against max_memory, before decoding
        self.refused(["--model", d, "--max_memory", "20000"] + ["--image", self.path("cut.png")] * 8,
                     r"8 images of 32 x 24 pixels need .* as float32, over max_memory")

    def test_huge_header_bounded(self):
        d, *_ = self.checkpoint()
        # a valid IHDR of 60,000 x 60,000 RGB pixels, then one small IDAT
        def chunk(t, data):
            return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))
        huge = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b""))
        f = self.path("huge.png")
        with open(f, "wb") as h:
            h.write(huge)
        out = self.path("refused")
        code, rss, _, err = measured([MHA, "run", "--model", d, "--image", f, "--out_dir", out,
                                      "-q"], timeout=120)
        self.assertEqual(code, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("60000 x 60000", err)
        self.assertLess(rss, 200 << 20)
        for name in OUTPUTS:
            self.assertFalse(os.path.exists(os.path.join(out, name)), name)


    def bounded(self, d, name, data, pattern, *args, seconds=5):
        """`mha run --image NAME` (NAME holding `data`) refused: exit 2, one line matching
        `pattern`, under 200 MB and `seconds`, nothing written."""
        f = self.path(name)
        with open(f, "wb") as h:
            h.write(data)
        out = self.path("refused")
        code, rss, took, err = measured([MHA, "run", "--model", d, "--image", f, "--out_dir", out,
                                         "-q"] + list(args))
        self.assertEqual((code, len(err.strip().splitlines())), (2, 1), f"{name}: {err}")
        self.assertRegex(err.strip(), pattern)
        self.assertLess(rss, 200 << 20, name)
        self.assertLess(took, seconds, name)
        self.assertFalse(os.path.exists(out), name)
        print(f"\n{name}: {rss >> 20} MiB, {took:.2f} s: {err.strip()}", file=sys.stderr)

    def test_png_chunk_lengths_bounded(self):
        """Each chunk's length against the bytes after it, IHDR's size against the limits, before
        libpng allocates: a 145-byte tEXt that declares 2^31 - 1 bytes cost 2 GB and 6.5 s."""
        d, *_ = self.checkpoint()
        ihdr = png_ihdr(24, 32)
        idat = png_chunk(b"IDAT", zlib.compress(bytes(32 * (1 + 24 * 3))))
        end = png_chunk(b"IEND", b"")
        for name, data, pattern in (
                ("text_2g.png", PNG_SIGNATURE + ihdr + struct.pack(">I", 2**31 - 1) + b"tEXt"
                 + b"Comment\0hello" * 8,
                 r'text_2g.png: truncated PNG: chunk "tEXt" at byte 33 declares 2147483647 bytes, '
                 r"but the file ends 104 bytes after its header$"),
                ("idat_4g.png", PNG_SIGNATURE + ihdr + struct.pack(">I", 2**32 - 1) + b"IDAT"
                 + bytes(64),
                 r'idat_4g.png: invalid PNG: chunk "IDAT" at byte 33 declares 4294967295 bytes, '
                 r"over the 2\^31 - 1 a chunk may hold$"),
                ("ihdr_max.png", PNG_SIGNATURE + png_ihdr(2**31 - 1, 2**31 - 1) + idat + end,
                 r"ihdr_max.png: PNG of 2147483647 x 2147483647 pixels, over the 134217728"),
                ("wide.png", PNG_SIGNATURE + png_ihdr(2000000, 1) + idat + end,
                 r"wide.png: PNG of 2000000 x 1 pixels, over the 1000000 pixels a side may have"),
                ("no_iend.png", PNG_SIGNATURE + ihdr + idat,
                 r"no_iend.png: truncated PNG \(the file ends at byte \d+, before its IEND chunk\)"),
                ("idat_first.png", PNG_SIGNATURE + idat + ihdr + end,
                 r'idat_first.png: invalid PNG: its first chunk is "IDAT" of \d+ bytes; expected '
                 r"IHDR of 13")):
            with self.subTest(name):
                self.bounded(d, name, data, pattern)

    def test_png_ancillary_chunks_skipped(self):
        """Text, ICC profiles and EXIF are skipped unread: a zTXt and an iCCP that inflate to
        200 MB each change nothing, in bounded memory."""
        d, *_ = self.checkpoint()
        a = np.random.default_rng(6).integers(0, 256, (32, 24, 3)).astype(np.uint8)
        plain = png_bytes(a)
        z = zlib.compressobj(9)
        bomb = z.compress(bytes(200 << 20)) + z.flush()
        f = self.path("bombs.png")
        with open(f, "wb") as h:
            h.write(plain[:33] + png_chunk(b"zTXt", b"Comment\0\0" + bomb)
                    + png_chunk(b"iCCP", b"icc\0\0" + bomb) + plain[33:])
        out = self.path("bombs")
        code, rss, _, err = measured([MHA, "run", "--model", d, "--image", f, "--out_dir", out,
                                      "-q"])
        self.assertEqual(code, 0, err)
        self.assertLess(rss, 200 << 20)
        np.testing.assert_array_equal(np.load(os.path.join(out, "images.npy"))[0], a)

    def test_jpeg_bounded(self):
        """A JPEG's size from its SOF, its scans and libjpeg's working memory, bounded: a
        progressive JPEG of 2,000 extra scans took minutes; one whose coefficients pass
        max_memory was decoded; a 65535 x 65535 SOF was called truncated."""
        Image = pil()
        self.assertIsNotNone(Image, "needs PIL to write JPEGs (python3-pil, which scripts/setup.sh "
                                    "--test installs with python3-matplotlib)")
        d, *_ = self.checkpoint()
        small = io.BytesIO()
        Image.fromarray(np.zeros((32, 24, 3), np.uint8)).save(small, "JPEG")
        sof = bytearray(small.getvalue())
        at = sof.index(b"\xff\xc0")
        sof[at + 5:at + 9] = struct.pack(">HH", 65535, 65535)
        self.bounded(d, "sof_65535.jpg", bytes(sof),
                     r"sof_65535.jpg: invalid JPEG \(libjpeg: Maximum supported image dimension "
                     r"is 65500 pixels\)")
        # the last scan of a progressive 2048 x 2048 JPEG repeated 2,000 times (libjpeg warns of
        # the progression and goes on; each scan passes over the whole image)
        flat = Image.fromarray(np.full((2048, 2048, 3), 128, np.uint8))
        prog = io.BytesIO()
        flat.save(prog, "JPEG", progressive=True, quality=90)
        data = prog.getvalue()
        segments = jpeg_segments(data)
        _, s0, s1 = [x for x in segments if x[0] == 0xDA][-1]
        scans = data[:segments[-1][1]] + data[s0:s1] * 2000 + b"\xff\xd9"
        self.bounded(d, "scans.jpg", scans,
                     r"scans.jpg: a progressive JPEG of more than 256 scans, the most one of "
                     r"2048 x 2048 pixels may have \(1000, and 2\^30 pixels decoded across its "
                     r"scans\)$", seconds=10)
        # 4:4:4 progressive: 2 bytes of coefficients a sample (24 MiB), over a max_memory of
        # 16 MiB that its 12 MiB of RGB fit
        prog = io.BytesIO()
        flat.save(prog, "JPEG", progressive=True, quality=90, subsampling=0)
        self.bounded(d, "coefficients.jpg", prog.getvalue(),
                     r"coefficients.jpg: decoding this progressive JPEG needs more than "
                     r"max_memory \(16777216 bytes\) of working memory$",
                     "--max_memory", "16MiB")

    def test_preprocessing_values(self):
        """Values that are finite as JSON numbers but not where the steps compute (float32), or
        that make a pixel non-finite there, refused by key (they ended in "the forward produced
        a non-finite hidden state"); a resample code of 2^32 + 2 was taken for 2."""
        d, *_ = self.checkpoint()
        pre = checkpoints.preprocessor_config(32, 24)
        f = self.image("r.png", np.zeros((40, 30, 3), np.uint8))
        for change, pattern in (
                ({"image_mean": [1e308, 0, 0]}, r"key 'image_mean' is \[1e\+308,0,0\]; expected "
                                                r"numbers that stay finite in float32$"),
                ({"image_std": [1e-50, 0.5, 0.5]}, r"key 'image_std' is \[1e-50,0.5,0.5\]; "
                                                   r"expected positive numbers that stay positive "
                                                   r"and finite in float32$"),
                ({"image_std": 1e-40}, r"keys 'image_mean' \[0.5,0.5,0.5\], 'image_std' 1e-40 "
                                       r"and 'rescale_factor' \S+ make a byte of 0 non-finite "
                                       r"in float32 \(channel 0\); expected values that keep "
                                       r"\(pixel - mean\) / std finite$"),
                ({"image_mean": [-3.3e38, 0, 0], "rescale_factor": 1.3e36},
                 r"keys 'image_mean' \[-3.3e\+38,0,0\], 'image_std' \[0.5,0.5,0.5\] and "
                 r"'rescale_factor' 1.3e\+36 make a byte of 0 non-finite"),
                ({"rescale_factor": 1e300}, r"key 'rescale_factor' is 1e\+300; expected a factor "
                                            r"that keeps a byte of 255 finite in float32$"),
                ({"resample": 2**32 + 2}, r"key 'resample' is 4294967298; expected one of PIL's "
                                          r"resample codes$")):
            with self.subTest(change=change):
                checkpoints.write_preprocessor(d, dict(pre, **change))
                p = self.refused(["--model", d, "--image", f], "preprocessor_config.json: ")
                self.assertRegex(p.stderr.strip(), pattern)
        # without do_normalize, the mean and deviation are not used: only their own values count
        checkpoints.write_preprocessor(d, dict(pre, image_std=1e-40, do_normalize=False))
        self.mha("--model", d, "--image", f)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(z):
    z = np.asarray(z, np.float64)
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


class Classifier(VitTest):
    """`mha run --image` on a ViTForImageClassification: run.json's top_k lists, per image, the
    classes (id, label, p) most likely first, p the softmax of classifier(CLS's final hidden
    state); a ViTModel has none."""

    def run_case(self, dtype):
        d, config, sd, pre = self.checkpoint(dtype=dtype, prefixed=True)
        self.assertIn("classifier.weight", sd)
        rng = np.random.default_rng(11)
        arrays = [rng.integers(0, 256, (40, 30, 3)).astype(np.uint8) for _ in range(2)]
        files = [self.image(f"c{i}.png", a) for i, a in enumerate(arrays)]
        out, _ = self.mha("--model", d, "--image", files[0], "--image", files[1], "--top_k", "3")
        seen = np.load(os.path.join(out, "images.npy"))
        ref = reference.vit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        z = ref["logits"]
        self.assertEqual(z.shape, (2, 3))
        run = read_json(os.path.join(out, "run.json"))
        self.assertEqual(run["model"]["num_labels"], 3)
        labels = config["id2label"]
        worst = 0.0
        for b in range(2):
            p = softmax(z[b])
            order = np.argsort(-p, kind="stable")
            got = run["top_k"][b]
            self.assertEqual([e["id"] for e in got], order.tolist())
            self.assertEqual([e["label"] for e in got], [labels[str(i)] for i in order])
            np.testing.assert_allclose([e["p"] for e in got], p[order], **TOL)
            # the logits up to their constant: log p_i - log p_0 = z_i - z_0
            lp = np.log([e["p"] for e in got])
            np.testing.assert_allclose(lp - lp[0], z[b][order] - z[b][order[0]], **TOL)
            worst = max(worst, float(np.abs(np.array([e["p"] for e in got]) - p[order]).max()))
        # the default top_k (5) is clipped to the 3 classes, as transformers' pipeline clips it
        out5, _ = self.mha("--model", d, "--image", files[0], out="out5")
        self.assertEqual(len(read_json(os.path.join(out5, "run.json"))["top_k"][0]), 3)
        return worst

    def test_float32(self):
        print(f"\nclassifier F32: max |p - reference| {self.run_case('F32'):.2e}", file=sys.stderr)

    def test_bfloat16_file(self):
        print(f"\nclassifier BF16: max |p - reference| {self.run_case('BF16'):.2e}", file=sys.stderr)

    def test_labels_and_checks(self):
        d, config, sd, pre = self.checkpoint(prefixed=True)
        f = self.image("a.png", np.zeros((32, 24, 3), np.uint8))
        # no id2label: LABEL_i
        cfg = read_json(os.path.join(d, "config.json"))
        del cfg["id2label"], cfg["label2id"]
        with open(os.path.join(d, "config.json"), "w") as h:
            json.dump(cfg, h)
        out, _ = self.mha("--model", d, "--image", f, "--top_k", "1")
        self.assertRegex(read_json(os.path.join(out, "run.json"))["top_k"][0][0]["label"],
                         "^LABEL_[0-2]$")
        # a ViTModel: no classifier, no top_k
        plain, *_ = self.checkpoint("plain")
        out, _ = self.mha("--model", plain, "--image", f, out="plain_out")
        self.assertNotIn("top_k", read_json(os.path.join(out, "run.json")))
        # id2label of another size than the classifier's rows, ids that are not 0..n-1
        for bad, pattern in (({"0": "cat", "1": "dog"}, "'id2label' names 2 labels, but tensor "
                                                        "\"classifier.weight\" has 3 rows"),
                             ({"0": "cat", "1": "dog", "5": "car"}, "'id2label' has the id \"5\""),
                             ({"0": "cat", "1": 3, "2": "car"}, r"id2label\[\"1\"\] is 3")):
            cfg["id2label"] = bad
            with open(os.path.join(d, "config.json"), "w") as h:
                json.dump(cfg, h)
            _, p = self.mha("--model", d, "--image", f, code=2, out="bad")
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertRegex(p.stderr, pattern)
            self.assertFalse(os.path.exists(self.path("bad")))
        # a classifier of the wrong width
        cfg["id2label"] = {"0": "cat", "1": "dog", "2": "car"}
        with open(os.path.join(d, "config.json"), "w") as h:
            json.dump(cfg, h)
        t = dict(sd)
        t["classifier.weight"] = np.zeros((3, 5), np.float32)
        import safetensors_write as st
        st.save_file(os.path.join(d, "model.safetensors"),
                     {k: np.asarray(v, np.float32) for k, v in t.items()}, "F32")
        _, p = self.mha("--model", d, "--image", f, code=2, out="bad")
        self.assertRegex(p.stderr.strip(), r"tensor \"classifier.weight\" has shape \(3, 5\); "
                                           r"config.json implies \(3, 32\)")


class Ablation(VitTest):
    """`mha analyze --image --method ablation` on a ViTForImageClassification, against the
    reference run with the head's columns of attention.output.dense.weight zeroed."""

    def analyze(self, d, files, *args, out="an", code=0):
        out = self.path(out)
        cmd = [MHA, "analyze", "--model", d, "--method", "ablation", "--out_dir", out, "-q"]
        for f in files:
            cmd += ["--image", f]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, code, f"{' '.join(cmd + list(args))}\nstderr: {p.stderr}")
        return out, p

    def test_zero_ablation_equals_zeroed_weights(self):
        d, config, sd, pre = self.checkpoint(prefixed=True)
        rng = np.random.default_rng(8)
        arrays = [rng.integers(0, 256, (40, 30, 3)).astype(np.uint8) for _ in range(2)]
        files = [self.image(f"a{i}.png", a) for i, a in enumerate(arrays)]
        L, h = config["num_hidden_layers"], config["num_attention_heads"]
        dh = config["hidden_size"] // h
        out, _ = self.analyze(d, files, "--metric", "loss", out="loss")
        px = np.stack([pixel_values(s, pre) for s in np.load(os.path.join(out, "images.npy"))])
        z = reference.vit(config, sd, px)["logits"]
        pred = z.argmax(-1)
        clean_lp = log_softmax(z)
        rows = np.arange(2)
        run = read_json(os.path.join(out, "run.json"))
        summary = run["summary"]["ablation"]
        self.assertEqual([p["id"] for p in summary["predicted"]], pred.tolist())
        self.assertEqual([p["label"] for p in summary["predicted"]],
                         [config["id2label"][str(i)] for i in pred])
        np.testing.assert_allclose(summary["clean"], -clean_lp[rows, pred], **TOL)
        self.assertIn("cross-entropy of the class the clean run predicts",
                      run["arrays"]["ablation.npy"]["meaning"])
        loss = np.load(os.path.join(out, "ablation.npy"))
        self.assertEqual(loss.shape, (2, L, h))
        out_kl, _ = self.analyze(d, files, "--metric", "kl", out="kl")
        kl = np.load(os.path.join(out_kl, "ablation.npy"))
        out_ld, _ = self.analyze(d, files, "--target", "dog", "--foil", "cat", out="ld")
        ld = np.load(os.path.join(out_ld, "ablation.npy"))
        ld_summary = read_json(os.path.join(out_ld, "run.json"))["summary"]["ablation"]
        self.assertEqual((ld_summary["metric"], ld_summary["target"], ld_summary["foil"]),
                         ("logit_diff", "dog", "cat"))
        np.testing.assert_allclose(ld_summary["clean"], z[:, 1] - z[:, 0], **TOL)
        worst = 0.0
        for layer, head in ((0, 0), (L - 1, h - 1)):
            name = f"vit.encoder.layer.{layer}.attention.output.dense.weight"
            zeroed = dict(sd)
            w = np.array(sd[name], np.float64)
            w[:, head * dh:(head + 1) * dh] = 0  # nn.Linear (out, in): the head's input columns
            zeroed[name] = w
            za = reference.vit(config, zeroed, px)["logits"]
            lp = log_softmax(za)
            want = {"loss": -lp[rows, pred] + clean_lp[rows, pred],
                    "kl": (np.exp(clean_lp) * (clean_lp - lp)).sum(-1),
                    "logit_diff": (za[:, 1] - za[:, 0]) - (z[:, 1] - z[:, 0])}
            for metric, got in (("loss", loss), ("kl", kl), ("logit_diff", ld)):
                np.testing.assert_allclose(got[:, layer, head], want[metric],
                                           err_msg=f"{metric} {layer}.{head}", **TOL)
                worst = max(worst, float(np.abs(got[:, layer, head] - want[metric]).max()))
        print(f"\nablation: max |effect - reference| {worst:.2e}", file=sys.stderr)
        out_mean, _ = self.analyze(d, files, "--metric", "loss", "--ablation", "mean", out="mean")
        mean = np.load(os.path.join(out_mean, "ablation.npy"))
        self.assertTrue(np.isfinite(mean).all())
        self.assertGreater(np.abs(mean - loss).max(), 1e-4)
        self.assertEqual(read_json(os.path.join(out_mean, "run.json"))["summary"]["ablation"]
                         ["kind"], "mean")

    def test_refusals(self):
        d, config, sd, pre = self.checkpoint(prefixed=True)
        plain, *_ = self.checkpoint("plain")
        png = self.image("a.png", np.zeros((8, 8, 3), np.uint8))
        for model, args, pattern in (
                (plain, (), r"plain: a vit has no classifier \(no classifier.weight: a ViTModel"),
                (d, ("--target", "bird", "--foil", "cat"),
                 r'--target "bird": is not a label of the classifier; expected one of "cat", '
                 r'"dog", "car"'),
                (d, ("--target", "dog", "--foil", "9"), r'--foil "9": is not a label'),
                (d, ("--target", "dog"), r"--metric logit_diff: expected --target TEXT and --foil"),
                (d, ("--metric", "sum"), r'--metric "sum": expected loss, logit_diff or kl')):
            out, p = self.analyze(model, [png], *args, out="refused", code=2)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertRegex(lines[0], pattern)
            self.assertFalse(os.path.exists(out))
        # a class named by its id where no label is that text
        out, _ = self.analyze(d, [png], "--target", "2", "--foil", "cat", out="ids")
        self.assertEqual(read_json(os.path.join(out, "run.json"))["summary"]["ablation"]
                         ["target"], "car")


class Python(VitTest):
    """mha.Model(dir) on paths and uint8 arrays: the CLI's core, the same bits (needs the module
    on PYTHONPATH: ctest's models.vit.Python)."""

    def test_same_bits(self):
        import mha
        d, config, sd, pre = self.checkpoint()
        rng = np.random.default_rng(4)
        arrays = [rng.integers(0, 256, (50, 37, 3)).astype(np.uint8),
                  rng.integers(0, 256, (20, 30, 3)).astype(np.uint8)]
        files = [self.image(f"p{i}.png", a) for i, a in enumerate(arrays)]
        out, _ = self.mha("--model", d, "--image", files[0], "--image", files[1], "--save_attention")
        m = mha.Model(d)
        for given in (files, arrays, [files[0], arrays[1]]):
            r = m(given)
            np.testing.assert_array_equal(r["output"], np.load(os.path.join(out, "output.npy")))
            np.testing.assert_array_equal(r["attentions"] if "attentions" in r else r["attention"],
                                          np.load(os.path.join(out, "self_attention.npy")))
            np.testing.assert_array_equal(r["images"], np.load(os.path.join(out, "images.npy")))
            self.assertEqual(r["tokens"][0][0], "[CLS]")
        # One image: the CLI's bits for that image alone (a batch of another size may sum in
        # another order in BLAS's GEMMs).
        one = m(arrays[0])
        alone, _ = self.mha("--model", d, "--image", files[0], "--save_attention", out="alone")
        np.testing.assert_array_equal(one["output"], np.load(os.path.join(alone, "output.npy")))
        # Rollout through the module: `mha analyze --image`'s bits.
        an = self.path("an")
        p = subprocess.run([MHA, "analyze", "--model", d, "--image", files[0], "--method",
                            "rollout", "--out_dir", an, "-q"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_array_equal(m.rollout(arrays[0]), np.load(os.path.join(an, "rollout.npy")))
        with self.assertRaisesRegex(ValueError, "an image model has no token ids"):
            m.head_scores(arrays[0])
        for bad, pattern in (("a cat", "cannot open"), (np.zeros((4, 4), np.uint8), "uint8 array"),
                             (np.zeros((4, 4, 3), np.float32), "uint8 array")):
            with self.assertRaisesRegex(ValueError, pattern):
                m(bad)
        self.assertIsNone(one["top_k"])  # a ViTModel: no classifier
        with self.assertRaisesRegex(ValueError, "a vit has no classifier"):
            m.ablation(arrays[0])

    def test_fifo_path(self):
        """A path that is a FIFO is read once (Streams holds the CLI to the same)."""
        import mha
        d, *_ = self.checkpoint()
        a = np.random.default_rng(9).integers(0, 256, (40, 30, 3)).astype(np.uint8)
        m = mha.Model(d)
        want = m(a)
        # the writer is a process: a thread would wait for the GIL that the call holds
        src, fifo = self.image("src.png", a), self.path("p.png")
        os.mkfifo(fifo)
        writer = subprocess.Popen(["sh", "-c", 'cat "$0" > "$1"', src, fifo])
        got = m(fifo)
        writer.wait(timeout=60)
        np.testing.assert_array_equal(got["output"], want["output"])
        np.testing.assert_array_equal(got["images"], want["images"])

    def test_strided_view_bounded(self):
        """An array's size is checked from its shape before the C-order copy: a (40000, 40000, 3)
        view of one pixel (as_strided) cost 4.6 GB and 14 s before the size message."""
        d, *_ = self.checkpoint()
        script = ("import sys\n"
                  "import numpy as np, mha\n"
                  "m = mha.Model(sys.argv[1])\n"
                  "a = np.lib.stride_tricks.as_strided(np.zeros(3, np.uint8), (40000, 40000, 3),"
                  " (0, 0, 1))\n"
                  "try:\n"
                  "    m(a)\n"
                  "except ValueError as e:\n"
                  "    sys.exit(str(e))\n")
        code, rss, took, err = measured([sys.executable, "-c", script, d], timeout=120)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.strip(), "input: an image array of 40000 x 40000 pixels; expected 1 "
                                      "to 134217728 pixels (at most 1000000 a side) within "
                                      "max_memory")
        self.assertLess(rss, 200 << 20)
        self.assertLess(took, 5)

    def test_classifier(self):
        """Top-k classes as (id, label, p) and ablation(image): the CLI's bits."""
        import mha
        d, config, sd, pre = self.checkpoint(prefixed=True)
        rng = np.random.default_rng(12)
        a = rng.integers(0, 256, (40, 30, 3)).astype(np.uint8)
        f = self.image("c.png", a)
        m = mha.Model(d)
        self.assertEqual(m.config["labels"], ["cat", "dog", "car"])
        out, _ = self.mha("--model", d, "--image", f, "--save_attention")
        want = read_json(os.path.join(out, "run.json"))["top_k"]
        for given in (f, a):
            got = m(given)["top_k"]
            self.assertEqual(got, [[(e["id"], e["label"], e["p"]) for e in row] for row in want])
        for args, kw in (((), {}), (("--metric", "kl", "--ablation", "mean"),
                                    dict(metric="kl", ablation="mean")),
                         (("--target", "car", "--foil", "dog"), dict(target="car", foil="dog"))):
            an = self.path("ab")
            shutil.rmtree(an, ignore_errors=True)
            p = subprocess.run([MHA, "analyze", "--model", d, "--image", f, "--method", "ablation",
                                "--out_dir", an, "-q"] + list(args), capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            for given in (f, a):
                r = m.ablation(given, **kw)
                np.testing.assert_array_equal(r["effect"], np.load(os.path.join(an, "ablation.npy")),
                                              err_msg=str(kw))
                summary = read_json(os.path.join(an, "run.json"))["summary"]["ablation"]
                self.assertEqual(r["clean"], summary["clean"])
                self.assertEqual(r["predicted"], [(e["id"], e["label"]) for e in summary["predicted"]])
        with self.assertRaisesRegex(ValueError, '--target "bird": is not a label of the classifier'):
            m.ablation(a, target="bird", foil="cat")


    def test_deit(self):
        """A DeiT with the teacher's heads: the CLI's bits, tokens and classes."""
        import mha
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        a = np.random.default_rng(14).integers(0, 256, (40, 30, 3)).astype(np.uint8)
        f = self.image("d.png", a)
        out, _ = self.mha("--model", d, "--image", f, "--save_attention")
        r = mha.Model(d)(a)
        np.testing.assert_array_equal(r["output"], np.load(os.path.join(out, "output.npy")))
        np.testing.assert_array_equal(r["images"], np.load(os.path.join(out, "images.npy")))
        self.assertEqual(r["tokens"][0][:3], ["[CLS]", "[DIST]", "patch (0, 0)"])
        want = read_json(os.path.join(out, "run.json"))["top_k"]
        self.assertEqual(r["top_k"], [[(e["id"], e["label"], e["p"]) for e in row] for row in want])


class Streams(VitTest):
    """An image from a FIFO is read once (docs/files.md): `mha run` and `mha analyze --image FIFO`
    (and mha.Model on its path, in Python) with a writer that sends one PNG and closes, give the
    regular file's outputs (the CLI opened the path again and waited for a second writer); a
    pipe that is not an image, or longer than max_memory lets it be, is refused as it is read."""

    def fifo(self, name, data):
        return fifo_with_writer(self.path(name), data)

    def run_mha(self, *args, code=0, timeout=30):
        p = subprocess.run([MHA] + list(args) + ["-q"], capture_output=True, text=True,
                           timeout=timeout)
        self.assertEqual(p.returncode, code, f"{args}: {p.stderr}")
        return p

    def test_fifo_read_once(self):
        d, *_ = self.checkpoint()
        a = np.random.default_rng(8).integers(0, 256, (40, 30, 3)).astype(np.uint8)
        data = png_bytes(a)
        f = self.image("a.png", a)
        for command, outputs in ((["run"], ("images.npy", "output.npy")),
                                 (["analyze", "--method", "rollout"], ("rollout.npy",))):
            with self.subTest(command=command[0]):
                file_out, fifo_out = self.path(command[0] + "_file"), self.path(command[0] + "_fifo")
                self.run_mha(*command, "--model", d, "--image", f, "--out_dir", file_out)
                fifo = self.fifo(command[0] + ".png", data)
                self.run_mha(*command, "--model", d, "--image", fifo, "--out_dir", fifo_out)
                for name in outputs:
                    np.testing.assert_array_equal(np.load(os.path.join(fifo_out, name)),
                                                  np.load(os.path.join(file_out, name)), name)
                want = read_json(os.path.join(file_out, "run.json"))["input"]["images"][0]
                got = read_json(os.path.join(fifo_out, "run.json"))["input"]["images"][0]
                self.assertEqual((got["bytes"], got["crc32"]), (len(data), want["crc32"]))
                self.assertEqual(got["crc32"], format(zlib.crc32(data), "08x"))

    def test_bad_streams_refused_as_read(self):
        d, *_ = self.checkpoint()
        out = self.path("refused")
        p = self.run_mha("run", "--model", d, "--image", "/dev/zero", "--out_dir", out, code=2)
        self.assertEqual(p.stderr.strip(), "mha: error: /dev/zero: not a PNG or JPEG file (by its "
                                           "first bytes); expected an image")
        # a PNG signature, then more bytes than max_memory lets an image file have
        fifo = self.fifo("long.png", PNG_SIGNATURE + bytes(3 << 20))
        p = self.run_mha("run", "--model", d, "--image", fifo, "--max_memory", "2MiB",
                         "--out_dir", out, code=2)
        self.assertRegex(p.stderr.strip(), r"^mha: error: .*long.png: a pipe or device of more "
                                           r"than 2097152 bytes, the most an image file may have")
        self.assertFalse(os.path.exists(out))


class Analyze(VitTest):
    """`mha analyze --image`: rollout from the reference's maps (0.5 A + 0.5 I, the heads' mean,
    rows renormalised, multiplied from layer 0 up) at 1e-5; flow and norms written with the
    shapes of a text model's; the methods that need token ids or an LM head refused (ablation,
    on the classifier: the Ablation group)."""

    def test_rollout_flow_norms(self):
        d, config, sd, pre = self.checkpoint()
        rng = np.random.default_rng(6)
        arrays = [rng.integers(0, 256, (40, 30, 3)).astype(np.uint8) for _ in range(2)]
        files = [self.image(f"a{i}.png", a) for i, a in enumerate(arrays)]
        out = self.path("an")
        p = subprocess.run([MHA, "analyze", "--model", d, "--image", files[0], "--image", files[1],
                            "--method", "rollout", "--method", "flow", "--method", "norms",
                            "--out_dir", out, "-q"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        seen = np.load(os.path.join(out, "images.npy"))
        ref = reference.vit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        rollout = np.load(os.path.join(out, "rollout.npy"))
        R = None
        for layer, A in enumerate(ref["attentions"]):
            Ahat = 0.5 * A.mean(1) + 0.5 * np.eye(A.shape[-1])
            Ahat /= Ahat.sum(-1, keepdims=True)
            R = Ahat if R is None else Ahat @ R
            np.testing.assert_allclose(rollout[layer], R, err_msg=f"layer {layer}", **TOL)
        L, B, h, T = len(ref["attentions"]), 2, config["num_attention_heads"], R.shape[-1]
        self.assertEqual(np.load(os.path.join(out, "flow.npy")).shape, (B, T, T))
        self.assertEqual(np.load(os.path.join(out, "attention_norms.npy")).shape, (L, B, h, T, T))
        run = json.load(open(os.path.join(out, "run.json")))
        self.assertEqual([im["path"] for im in run["input"]["images"]], files)
        self.assertEqual(run["input"]["patch_grid"], [config_height(config) // config["patch_size"],
                                                      config_width(config) // config["patch_size"]])
        self.assertEqual(json.load(open(os.path.join(out, "tokens.json")))["tokens"][0][0], "[CLS]")

    def test_refusals(self):
        d, config, sd, pre = self.checkpoint()
        png = self.image("a.png", np.zeros((8, 8, 3), np.uint8))
        for args, message in (
                (["--method", "loss"], "--method loss: not with --image; an image model's analyses "
                                       "are rollout, flow, norms and ablation"),
                (["--method", "rollout", "--text", "a cat"],
                 "--image and --text/--tokens: give images or text, not both")):
            out = self.path("refused")
            p = subprocess.run([MHA, "analyze", "--model", d, "--image", png, "--out_dir", out, "-q"]
                               + args, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertIn(message, p.stderr)
            self.assertFalse(os.path.exists(out))


class View(VitTest):
    """`mha view` of an image run in headless Chromium (tests/view/browser.py): the page holds
    images.npy's pixels exactly, the overlay's grid for a query and a head (or the mean over
    heads) is self_attention.npy's row over the patches divided by its largest, the blended
    picture is that grid in viridis over the pixels at each patch's centre, and hovering a
    patch names it."""

    def test_overlay(self):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "view"))
        from browser import Browser
        d, config, sd, pre = self.checkpoint()
        yy, xx = np.mgrid[0:48, 0:40]
        pixels = np.stack([xx * 6 % 256, yy * 5 % 256, (xx + yy) * 3 % 256], -1).astype(np.uint8)
        out, _ = self.mha("--model", d, "--image", self.image("a.png", pixels), "--save_attention")
        r = subprocess.run([MHA, "view", out, "-q"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        maps = np.load(os.path.join(out, "self_attention.npy"))  # (layers, 1, h, 1 + N, 1 + N)
        images = np.load(os.path.join(out, "images.npy"))
        rows, cols = json.load(open(os.path.join(out, "run.json")))["input"]["patch_grid"]
        H, W = images.shape[1:3]
        with Browser(width=1200, height=900) as b:
            b.open(os.path.join(out, "view.html"))
            b.wait_for("document.body.dataset.ready === '1'")
            self.assertFalse(b.evaluate("document.getElementById('image-section').hidden"))
            viridis = np.array(b.evaluate("mhaView.data.viridis"))
            drawn = np.array(b.evaluate(
                "Array.from(document.getElementById('image-picture').getContext('2d')"
                ".getImageData(0, 0, %d, %d).data)" % (W, H)), np.uint8).reshape(H, W, 4)
            np.testing.assert_array_equal(drawn[..., :3], images[0])
            for head, t in (("'mean'", 0), ("2", 5)):
                got = b.evaluate("mhaView.overlay(0, 0, %s, %d)" % (head, t))
                row = maps[0, 0, :, t, 1:].mean(0) if head == "'mean'" else maps[0, 0, 2, t, 1:]
                np.testing.assert_allclose(got["values"], row / row.max(), rtol=1e-6, atol=1e-7)
                self.assertEqual((got["rows"], got["cols"]), (rows, cols))
            # The blended picture (query 0, the mean, opacity 0.6) at each patch's centre.
            grid = maps[0, 0, :, 0, 1:].mean(0).reshape(rows, cols)
            grid = grid / grid.max()
            blended = np.array(b.evaluate(
                "Array.from(document.getElementById('image-overlay').getContext('2d')"
                ".getImageData(0, 0, %d, %d).data)" % (W, H)), np.uint8).reshape(H, W, 4)
            # The same bilinear upsampling here: patch centres at their values, clamped at the
            # edges; JavaScript's and NumPy's rounding may pick neighbouring viridis entries.
            def axis(n, cells):
                g = (np.arange(n) + 0.5) * cells / n - 0.5
                lo = np.floor(g).astype(int)
                return np.clip(lo, 0, cells - 1), np.clip(lo + 1, 0, cells - 1), g - lo
            y0, y1, fy = axis(H, rows)
            x0, x1, fx = axis(W, cols)
            fy, fx = fy[:, None], fx[None, :]
            v = (1 - fy) * ((1 - fx) * grid[y0][:, x0] + fx * grid[y0][:, x1]) + \
                fy * ((1 - fx) * grid[y1][:, x0] + fx * grid[y1][:, x1])
            want = np.round(0.6 * viridis[np.round(v * 255).astype(int)] + 0.4 * images[0])
            diff = np.abs(blended[..., :3].astype(float) - want)
            self.assertLessEqual(diff.max(), 3)
            self.assertLess(diff.mean(), 0.05)
            # Patches as squares (nearest): each pixel takes its patch's value, edges sharp.
            b.evaluate("(() => { const s = document.getElementById('image-smooth'); s.value = 'nearest';"
                       " s.dispatchEvent(new Event('change')); })()")
            squares = np.array(b.evaluate(
                "Array.from(document.getElementById('image-overlay').getContext('2d')"
                ".getImageData(0, 0, %d, %d).data)" % (W, H)), np.uint8).reshape(H, W, 4)
            ry = np.arange(H) * rows // H
            cx = np.arange(W) * cols // W
            v = grid[ry][:, cx]
            want = np.round(0.6 * viridis[np.round(v * 255).astype(int)] + 0.4 * images[0])
            diff = np.abs(squares[..., :3].astype(float) - want)
            self.assertLessEqual(diff.max(), 3)
            self.assertLess(diff.mean(), 0.05)
            self.assertEqual(b.evaluate("document.getElementById('image-overlay').style.imageRendering"),
                             "pixelated")
            b.save_screenshot("/tmp/pages_vit_nearest.png")
            b.evaluate("(() => { const s = document.getElementById('image-smooth'); s.value = 'bilinear';"
                       " s.dispatchEvent(new Event('change')); })()")
            # Hover over patch (1, 2): its name and key.
            spot = b.evaluate("(() => { const c = document.getElementById('image-overlay'); "
                              "c.scrollIntoView(); const r = c.getBoundingClientRect(); "
                              "return [r.left + r.width * 2.5 / %d, r.top + r.height * 1.5 / %d]; })()"
                              % (cols, rows))
            b.mouse_move(spot[0], spot[1])
            b.wait_for("document.getElementById('tooltip').hidden === false")
            tip = b.evaluate("document.getElementById('tooltip').textContent")
            self.assertIn("patch (1, 2) · key %d" % (1 + cols + 2), tip)
            self.assertEqual(b.errors, [])
        # An analysis's rollout over the image: one map per layer, the heads' mean.
        an = self.path("an")
        r = subprocess.run([MHA, "analyze", "--model", d, "--image", self.path("a.png"), "--method",
                            "rollout", "--out_dir", an, "-q"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([MHA, "view", an, "-q"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        rollout = np.load(os.path.join(an, "rollout.npy"))  # (layers, 1, 1 + N, 1 + N)
        with Browser(width=1200, height=900) as b:
            b.open(os.path.join(an, "view.html"))
            b.wait_for("document.body.dataset.ready === '1'")
            self.assertEqual(b.evaluate("mhaView.data.maps.map(m => m.name)"), ["rollout"])
            self.assertFalse(b.evaluate("document.getElementById('image-section').hidden"))
            last = rollout.shape[0] - 1
            b.evaluate("(() => { const s = document.getElementById('layer'); s.value = '%d'; "
                       "s.dispatchEvent(new Event('change')); })()" % last)
            got = b.evaluate("mhaView.overlay(%d, 0, 0, 0)" % last)
            row = rollout[last, 0, 0, 1:]
            np.testing.assert_allclose(got["values"], row / row.max(), rtol=1e-6, atol=1e-7)
            self.assertIn("layer %d" % last, b.evaluate("document.getElementById('image-caption')"
                                                        ".textContent"))
            self.assertEqual(b.errors, [])

    def test_deit_overlay(self):
        """A DeiT's two tokens before the patches (run.json's input.prefix_tokens): the grid
        is the query's row from key 2 on, and hovering patch (1, 2) names key 2 + cols + 2."""
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "view"))
        from browser import Browser
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        a = np.random.default_rng(30).integers(0, 256, (40, 30, 3)).astype(np.uint8)
        out, _ = self.mha("--model", d, "--image", self.image("d.png", a), "--save_attention")
        r = subprocess.run([MHA, "view", out, "-q"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        maps = np.load(os.path.join(out, "self_attention.npy"))  # (layers, 1, h, 2 + N, 2 + N)
        rows, cols = read_json(os.path.join(out, "run.json"))["input"]["patch_grid"]
        self.assertEqual(maps.shape[-1], 2 + rows * cols)
        with Browser(width=1200, height=900) as b:
            b.open(os.path.join(out, "view.html"))
            b.wait_for("document.body.dataset.ready === '1'")
            self.assertFalse(b.evaluate("document.getElementById('image-section').hidden"))
            for head, t in (("'mean'", 0), ("'mean'", 1), ("3", 7)):
                got = b.evaluate("mhaView.overlay(0, 0, %s, %d)" % (head, t))
                row = maps[0, 0, :, t, 2:].mean(0) if head == "'mean'" else maps[0, 0, 3, t, 2:]
                np.testing.assert_allclose(got["values"], row / row.max(), rtol=1e-6, atol=1e-7)
                self.assertEqual((got["rows"], got["cols"], got["prefix"]), (rows, cols, 2))
            spot = b.evaluate("(() => { const c = document.getElementById('image-overlay'); "
                              "c.scrollIntoView(); const r = c.getBoundingClientRect(); "
                              "return [r.left + r.width * 2.5 / %d, r.top + r.height * 1.5 / %d]; })()"
                              % (cols, rows))
            b.mouse_move(spot[0], spot[1])
            b.wait_for("document.getElementById('tooltip').hidden === false")
            tip = b.evaluate("document.getElementById('tooltip').textContent")
            self.assertIn("patch (1, 2) · key %d" % (2 + cols + 2), tip)
            self.assertEqual(b.errors, [])


# ---- DeiT (modeling_deit.py): the distillation token, the teacher's heads, the centre crop ----

def deit_images(self, seed, shapes=((50, 37), (20, 30))):
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 256, (h, w, 3)).astype(np.uint8) for h, w in shapes]
    return arrays, [self.image(f"d{seed}_{i}.png", a) for i, a in enumerate(arrays)]


class DeitForward(VitTest):
    """DeiT checkpoints (checkpoints.py's deit: DeiTForImageClassificationWithTeacher,
    DeiTForImageClassification, DeiTModel; F32 and BF16 files) through `mha run --image`
    against reference.deit at 1e-5: every map, the hidden states and the output; the tokens
    [CLS], [DIST], then the patches; images.npy the resized and centre-cropped image."""

    def run_case(self, dtype="F32", head="teacher", **kw):
        d, config, sd, pre = self.checkpoint("deit", dtype=dtype, family="deit", head=head, **kw)
        arrays, files = deit_images(self, 3)
        out, _ = self.mha("--model", d, "--image", files[0], "--image", files[1],
                          "--save_attention", "--save_hidden_states")
        seen = np.stack([processed(a, pre)[0] for a in arrays])
        np.testing.assert_array_equal(np.load(os.path.join(out, "images.npy")), seen)
        ref = reference.deit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        maps = np.load(os.path.join(out, "self_attention.npy"))
        p = config["patch_size"]
        rows, cols = config_height(config) // p, config_width(config) // p
        T = rows * cols + 2
        self.assertEqual(maps.shape, (config["num_hidden_layers"], 2, config["num_attention_heads"],
                                      T, T))
        worst = 0.0
        for n, a in enumerate(ref["attentions"]):
            np.testing.assert_allclose(maps[n], a, **TOL, err_msg=f"layer {n}")
            worst = max(worst, float(np.abs(maps[n] - a).max()))
        for name, key in (("output.npy", "output"), ("hidden_states.npy", "hidden_states")):
            got = np.load(os.path.join(out, name))
            np.testing.assert_allclose(got, ref[key], **TOL, err_msg=name)
            worst = max(worst, float(np.abs(got - ref[key]).max()))
        tokens = read_json(os.path.join(out, "tokens.json"))["tokens"][0]
        self.assertEqual(tokens[:4], ["[CLS]", "[DIST]", "patch (0, 0)", "patch (0, 1)"])
        self.assertEqual((len(tokens), tokens[-1]), (T, f"patch ({rows - 1}, {cols - 1})"))
        run = read_json(os.path.join(out, "run.json"))
        self.assertEqual(run["input"]["patch_grid"], [rows, cols])
        self.assertEqual(run["input"]["prefix_tokens"], 2)
        prep = run["preprocessing"]
        self.assertEqual((prep["processor"], prep["do_center_crop"], prep["resample_name"]),
                         ("DeiTImageProcessor", True, "bicubic"))
        self.assertEqual(prep["crop_size"], {"height": config_height(config),
                                             "width": config_width(config)})
        self.assertEqual(prep["size"], pre["size"])
        return worst

    def test_teacher_float32(self):
        print(f"\ndeit F32: max |x - reference| {self.run_case():.2e}", file=sys.stderr)

    def test_teacher_bfloat16_file(self):
        print(f"\ndeit BF16: max |x - reference| {self.run_case('BF16'):.2e}", file=sys.stderr)

    def test_classifier_head_no_qkv_bias(self):
        self.run_case(head="classifier", qkv_bias=False)

    def test_base_model_square(self):
        self.run_case(head=None, image_height=24, image_width=24, patch_size=6)


class DeitPreprocess(VitTest):
    """DeiTImageProcessor's centre crop (transformers' center_crop: top = (h - crop_h) // 2,
    left = (w - crop_w) // 2, zeros where the crop passes the image) after PIL's resize, held
    to the plain-Python transcription above and to PIL bit for bit; the processor's class and
    defaults as AutoImageProcessor picks them."""

    def test_crops(self):
        a = np.random.default_rng(21).integers(0, 256, (41, 19, 3)).astype(np.uint8)
        f = self.image("a.png", a)
        mean = dict(mean=IMAGENET_MEAN, std=IMAGENET_STD)
        cases = [  # size, crop (32 x 24, the model's), resample, extra keys
            ((37, 27), 1, {}),   # inside, odd margins: top 2, left 1
            ((37, 27), 3, {}),
            ((40, 30), 5, {}),   # even margins: top 4, left 3
            ((29, 21), 2, {}),   # the crop the larger: padded with zeros, 2 before and 1 after
            ((30, 26), 4, {}),   # padded in height, cropped in width
            ((32, 24), 3, {}),   # the crop is the whole image
            (None, 3, {"do_resize": False}),  # 41 x 19 itself: cropped in height, padded in width
        ]
        for i, (size, resample, extra) in enumerate(cases):
            h, w = size or (1, 1)
            pre = checkpoints.preprocessor_config(h, w, resample=resample, crop=(32, 24),
                                                  **mean, **extra)
            d, config, sd, pre = self.checkpoint(f"deit{i}", family="deit", pre=pre)
            out, _ = self.mha("--model", d, "--image", f, "--save_attention", out=f"out{i}")
            got = np.load(os.path.join(out, "images.npy"))[0]
            want, by_pil = processed(a, pre)
            np.testing.assert_array_equal(got, want, err_msg=f"case {i}: {size} {extra}")
            if by_pil is not None:
                np.testing.assert_array_equal(got, by_pil, err_msg=f"PIL, case {i}")
            ref = reference.deit(config, sd, pixel_values(want, pre)[None])
            np.testing.assert_allclose(np.load(os.path.join(out, "output.npy")), ref["output"],
                                       **TOL, err_msg=f"case {i}")

    def test_defaults_and_legacy_keys(self):
        """A deit without preprocessor_config.json: DeiTImageProcessor's defaults (256 x 256
        bicubic, then the centre 224 x 224, mean and std 0.5); and DeiTFeatureExtractor's keys
        (size 256 and crop_size 224 as ints)."""
        a = np.random.default_rng(22).integers(0, 256, (300, 280, 3)).astype(np.uint8)
        f = self.image("big.png", a)
        Image = pil()
        for i, pre in enumerate(("none", {
                "crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": list(IMAGENET_MEAN),
                "image_std": list(IMAGENET_STD), "resample": 3, "size": 256})):
            d, config, sd, _ = self.checkpoint(f"deit224_{i}", family="deit", pre=pre, layers=1,
                                               image_height=224, image_width=224, patch_size=56)
            out, _ = self.mha("--model", d, "--image", f, out=f"out{i}")
            got = np.load(os.path.join(out, "images.npy"))[0]
            if Image is not None:
                want = np.asarray(Image.fromarray(a).resize((256, 256), resample=3)
                                  .crop((16, 16, 240, 240)))
                np.testing.assert_array_equal(got, want, err_msg=f"case {i}")
            prep = read_json(os.path.join(out, "run.json"))["preprocessing"]
            self.assertEqual((prep["processor"], prep["size"], prep["crop_size"], prep["resample"]),
                             ("DeiTImageProcessor", {"height": 256, "width": 256},
                              {"height": 224, "width": 224}, 3))
            self.assertEqual(prep["image_mean"], [0.5] * 3 if pre == "none" else list(IMAGENET_MEAN))
            px = pixel_values(got, {"rescale_factor": 1 / 255, "image_mean": prep["image_mean"],
                                    "image_std": prep["image_std"]})
            ref = reference.deit(config, sd, px[None])
            np.testing.assert_allclose(np.load(os.path.join(out, "output.npy")), ref["output"],
                                       **TOL)

    def test_vit_checkpoints(self):
        """A vit checkpoint with DeiTImageProcessor's preprocessor_config.json (a
        ViTForImageClassification trained the DeiT way) is cropped the same way;
        ViTImageProcessor has no crop step and ignores do_center_crop and crop_size."""
        a = np.random.default_rng(23).integers(0, 256, (45, 33, 3)).astype(np.uint8)
        f = self.image("v.png", a)
        pre = checkpoints.preprocessor_config(37, 27, resample=3, crop=(32, 24))
        d, config, sd, pre = self.checkpoint("vit_crop", pre=pre, prefixed=True)
        out, _ = self.mha("--model", d, "--image", f, "--save_attention", out="crop")
        got = np.load(os.path.join(out, "images.npy"))[0]
        want, by_pil = processed(a, pre)
        np.testing.assert_array_equal(got, want)
        if by_pil is not None:
            np.testing.assert_array_equal(got, by_pil)
        ref = reference.vit(config, sd, pixel_values(want, pre)[None])
        np.testing.assert_allclose(np.load(os.path.join(out, "output.npy")), ref["output"], **TOL)
        run = read_json(os.path.join(out, "run.json"))
        self.assertEqual(run["input"]["prefix_tokens"], 1)
        self.assertTrue(run["preprocessing"]["do_center_crop"])
        # ViTImageProcessor: the crop keys stay unread (transformers keeps them as attributes)
        pre = checkpoints.preprocessor_config(32, 24, do_center_crop=True,
                                              crop_size={"height": 8, "width": 8})
        checkpoints.write_preprocessor(d, pre)
        out, _ = self.mha("--model", d, "--image", f, out="nocrop")
        got = np.load(os.path.join(out, "images.npy"))[0]
        np.testing.assert_array_equal(got, processed(a, pre)[0])
        self.assertEqual(got.shape, (32, 24, 3))
        self.assertFalse(read_json(os.path.join(out, "run.json"))["preprocessing"]["do_center_crop"])


class DeitClassifier(VitTest):
    """DeiTForImageClassificationWithTeacher's classes: p the softmax of (cls_classifier(CLS)
    + distillation_classifier(DIST)) / 2, against reference.deit at 1e-5 (F32 and BF16 files);
    DeiTForImageClassification's of classifier(CLS); a DeiTModel has none."""

    def run_case(self, dtype="F32", head="teacher"):
        d, config, sd, pre = self.checkpoint("deit", dtype=dtype, family="deit", head=head)
        arrays, files = deit_images(self, 11, ((40, 30), (50, 20)))
        out, _ = self.mha("--model", d, "--image", files[0], "--image", files[1], "--top_k", "3")
        seen = np.load(os.path.join(out, "images.npy"))
        ref = reference.deit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        run = read_json(os.path.join(out, "run.json"))
        self.assertEqual(run["model"]["num_labels"], 3)
        worst = 0.0
        for b in range(2):
            p = softmax(ref["logits"][b])
            order = np.argsort(-p, kind="stable")
            got = run["top_k"][b]
            self.assertEqual([e["id"] for e in got], order.tolist())
            self.assertEqual([e["label"] for e in got], [config["id2label"][str(i)] for i in order])
            np.testing.assert_allclose([e["p"] for e in got], p[order], **TOL)
            lp = np.log([e["p"] for e in got])
            np.testing.assert_allclose(lp - lp[0], ref["logits"][b][order] -
                                       ref["logits"][b][order[0]], **TOL)
            worst = max(worst, float(np.abs(np.array([e["p"] for e in got]) - p[order]).max()))
            if head == "teacher":  # the distillation head counts: not the CLS head's alone
                self.assertGreater(np.abs(softmax(ref["cls_logits"][b]) - p).max(), 1e-3)
        return worst

    def test_teacher_float32(self):
        print(f"\ndeit teacher F32: max |p - reference| {self.run_case():.2e}", file=sys.stderr)

    def test_teacher_bfloat16_file(self):
        print(f"\ndeit teacher BF16: max |p - reference| {self.run_case('BF16'):.2e}",
              file=sys.stderr)

    def test_classifier_head(self):
        print(f"\ndeit classifier F32: max |p - reference| "
              f"{self.run_case(head='classifier'):.2e}", file=sys.stderr)

    def test_base_model(self):
        d, *_ = self.checkpoint("base", family="deit", head=None)
        f = self.image("a.png", np.zeros((32, 24, 3), np.uint8))
        out, _ = self.mha("--model", d, "--image", f)
        self.assertNotIn("top_k", read_json(os.path.join(out, "run.json")))


class DeitRefusals(VitTest):
    """Exit 2, one line naming the file and key, nothing written: a hostile crop_size or
    do_center_crop, a crop that is not the model's image_size, a size too large to hold, a
    processor class that is not a name; a teacher checkpoint missing a head's tensor; --text."""

    def refused(self, d, pattern, image=None):
        f = image or self.image("r.png", np.zeros((40, 30, 3), np.uint8))
        out = self.path("refused")
        _, p = self.mha("--model", d, "--image", f, code=2, out="refused")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertRegex(lines[0], pattern)
        self.assertFalse(os.path.exists(out))

    def test_preprocessor_keys(self):
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        for key, value, pattern in (
                ("crop_size", 0, r"key 'crop_size' is 0; expected .* from 1 to 65536"),
                ("crop_size", -224, r"key 'crop_size' is -224; expected"),
                ("crop_size", 70000, r"key 'crop_size' is 70000; expected"),
                ("crop_size", 2.5, r"key 'crop_size' is 2.5; expected"),
                ("crop_size", "224", r"key 'crop_size' is \"224\"; expected"),
                ("crop_size", {"height": 32}, r"key 'crop_size' is \{\"height\":32\}; expected"),
                ("crop_size", {"shortest_edge": 24}, r"key 'crop_size' is .*shortest_edge"),
                ("crop_size", {"height": 32, "width": 24, "x": 1}, r"key 'crop_size' is"),
                ("crop_size", {"height": True, "width": 24}, r"key 'crop_size' is"),
                ("crop_size", [32, 24], r"key 'crop_size' is \[32,24\]"),
                ("do_center_crop", "yes", r"key 'do_center_crop' is \"yes\"; expected true or false"),
                ("size", {"height": 65536, "width": 65536},
                 r"key 'size' is .*; expected at most 2\^27 pixels"),
                ("image_processor_type", "Dei\u001b[31mT", r"key 'image_processor_type' is .*"
                                                            r"expected a processor's class name"),
                ("image_processor_type", 7, r"key 'image_processor_type' is 7"),
                ("image_processor_type", "x" * 500, r"key 'image_processor_type' is .*; expected"),
                ("crop_size", {"height": 30, "width": 24},
                 r"r.png: the model sees a 30 x 24 image \(height x width, "
                 r"preprocessor_config.json's crop_size\), but config.json's image_size is 32 x 24")):
            checkpoints.write_preprocessor(d, dict(pre, **{key: value}))
            with self.subTest(key=key, value=value):
                self.refused(d, pattern)
        # no preprocessor_config.json: DeiTImageProcessor's 224 x 224 crop, not this model's size
        os.remove(os.path.join(d, "preprocessor_config.json"))
        self.refused(d, r"the model sees a 224 x 224 image \(height x width, "
                        r"DeiTImageProcessor's default crop_size\), but config.json's image_size "
                        r"is 32 x 24")

    def test_resize_intermediate_bounded(self):
        """PIL's resize goes along x first, holding (the image's height, size's width) between
        its passes: a 1 x 1,000,000 PNG (4 KB) resized to 2 x 65536 would hold 1,000,000 x 65536
        pixels (196 GB; exit 1, out of memory), refused before the first pass."""
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        checkpoints.write_preprocessor(d, dict(pre, size={"height": 2, "width": 65536}))
        f = self.path("tall.png")
        with open(f, "wb") as h:
            h.write(PNG_SIGNATURE + png_ihdr(1, 1000000)
                    + png_chunk(b"IDAT", zlib.compress(b"\0\x80\x80\x80" * 1000000, 9))
                    + png_chunk(b"IEND", b""))
        self.refused(d, r"tall.png: resizing its 1000000 x 1 pixels \(height x width\) to "
                        r"preprocessor_config.json's size 2 x 65536 passes through 1000000 x "
                        r"65536 \(width first, as PIL\), over the 2\^27 pixels an image may "
                        r"have$", image=f)
    def test_checkpoints(self):
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        _, p = self.mha("--model", d, "--text", "a cat", code=2, out="refused")
        self.assertRegex(p.stderr.strip(), "--text: .* is a deit checkpoint, which reads images")
        import safetensors_write as st
        for drop, pattern in (("cls_classifier.bias", r"no weights file has tensor "
                                                      r"\"cls_classifier.bias\""),
                              ("cls_classifier.weight", r"no weights file has tensor "
                                                        r"\"cls_classifier.weight\""),
                              ("distillation_classifier.bias", r"no weights file has tensor "
                                                               r"\"distillation_classifier.bias\""),
                              ("deit.embeddings.distillation_token",
                               r"no weights file has tensor \"deit.embeddings.distillation_token\"")):
            t = {k: np.asarray(v, np.float32) for k, v in sd.items() if k != drop}
            st.save_file(os.path.join(d, "model.safetensors"), t, "F32")
            self.refused(d, pattern)
        # the distillation head of another width, a position table without the DIST row
        for name, shape, pattern in (
                ("distillation_classifier.weight", (3, 31),
                 r"tensor \"distillation_classifier.weight\" has shape \(3, 31\); config.json "
                 r"implies \(3, 32\)"),
                ("deit.embeddings.position_embeddings", (1, 13, 32),
                 r"tensor \"deit.embeddings.position_embeddings\" has shape \(1, 13, 32\); "
                 r"config.json implies \(1, 14, 32\)")):
            t = {k: np.asarray(v, np.float32) for k, v in sd.items()}
            t[name] = np.zeros(shape, np.float32)
            st.save_file(os.path.join(d, "model.safetensors"), t, "F32")
            self.refused(d, pattern)


class DeitAnalyze(VitTest):
    """`mha analyze --image` on a DeiT: rollout from the reference's maps at 1e-5 over the 14
    tokens named [CLS], [DIST], patch (r, c); flow and norms written; head ablation of the
    teacher's classifier is the reference with the head's columns of the output projection
    zeroed (loss of the clean class, KL, logit_diff) at 1e-5."""

    def test_rollout(self):
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        arrays, files = deit_images(self, 6, ((40, 30), (30, 40)))
        out = self.path("an")
        p = subprocess.run([MHA, "analyze", "--model", d, "--image", files[0], "--image", files[1],
                            "--method", "rollout", "--method", "flow", "--method", "norms",
                            "--out_dir", out, "-q"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        seen = np.load(os.path.join(out, "images.npy"))
        np.testing.assert_array_equal(seen, np.stack([processed(a, pre)[0] for a in arrays]))
        ref = reference.deit(config, sd, np.stack([pixel_values(s, pre) for s in seen]))
        rollout = np.load(os.path.join(out, "rollout.npy"))
        R, worst = None, 0.0
        for layer, A in enumerate(ref["attentions"]):
            Ahat = 0.5 * A.mean(1) + 0.5 * np.eye(A.shape[-1])
            Ahat /= Ahat.sum(-1, keepdims=True)
            R = Ahat if R is None else Ahat @ R
            np.testing.assert_allclose(rollout[layer], R, err_msg=f"layer {layer}", **TOL)
            worst = max(worst, float(np.abs(rollout[layer] - R).max()))
        print(f"\ndeit rollout: max |R - reference| {worst:.2e}", file=sys.stderr)
        L, h, T = len(ref["attentions"]), config["num_attention_heads"], 14
        self.assertEqual(R.shape[-1], T)
        self.assertEqual(np.load(os.path.join(out, "flow.npy")).shape, (2, T, T))
        self.assertEqual(np.load(os.path.join(out, "attention_norms.npy")).shape, (L, 2, h, T, T))
        tokens = read_json(os.path.join(out, "tokens.json"))["tokens"]
        self.assertEqual([t[:3] for t in tokens], [["[CLS]", "[DIST]", "patch (0, 0)"]] * 2)
        run = read_json(os.path.join(out, "run.json"))
        self.assertEqual((run["input"]["patch_grid"], run["input"]["prefix_tokens"]), ([4, 3], 2))
        self.assertTrue(run["preprocessing"]["do_center_crop"])

    def ablate(self, d, files, *args, out):
        out = self.path(out)
        cmd = [MHA, "analyze", "--model", d, "--method", "ablation", "--out_dir", out, "-q"]
        for f in files:
            cmd += ["--image", f]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return out

    def test_ablation(self):
        d, config, sd, pre = self.checkpoint("deit", family="deit")
        arrays, files = deit_images(self, 8, ((40, 30), (33, 25)))
        L, h = config["num_hidden_layers"], config["num_attention_heads"]
        dh = config["hidden_size"] // h
        out = self.ablate(d, files, "--metric", "loss", out="loss")
        px = np.stack([pixel_values(s, pre) for s in np.load(os.path.join(out, "images.npy"))])
        z = reference.deit(config, sd, px)["logits"]
        pred, clean_lp, rows = z.argmax(-1), log_softmax(z), np.arange(2)
        summary = read_json(os.path.join(out, "run.json"))["summary"]["ablation"]
        self.assertEqual([p["id"] for p in summary["predicted"]], pred.tolist())
        np.testing.assert_allclose(summary["clean"], -clean_lp[rows, pred], **TOL)
        loss = np.load(os.path.join(out, "ablation.npy"))
        kl = np.load(os.path.join(self.ablate(d, files, "--metric", "kl", out="kl"), "ablation.npy"))
        ld = np.load(os.path.join(self.ablate(d, files, "--target", "dog", "--foil", "cat",
                                              out="ld"), "ablation.npy"))
        worst = 0.0
        for layer, head in ((0, 1), (L - 1, h - 1)):
            name = f"deit.encoder.layer.{layer}.attention.output.dense.weight"
            zeroed = dict(sd)
            w = np.array(sd[name], np.float64)
            w[:, head * dh:(head + 1) * dh] = 0
            zeroed[name] = w
            za = reference.deit(config, zeroed, px)["logits"]
            lp = log_softmax(za)
            want = {"loss": -lp[rows, pred] + clean_lp[rows, pred],
                    "kl": (np.exp(clean_lp) * (clean_lp - lp)).sum(-1),
                    "logit_diff": (za[:, 1] - za[:, 0]) - (z[:, 1] - z[:, 0])}
            for metric, got in (("loss", loss), ("kl", kl), ("logit_diff", ld)):
                np.testing.assert_allclose(got[:, layer, head], want[metric],
                                           err_msg=f"{metric} {layer}.{head}", **TOL)
                worst = max(worst, float(np.abs(got[:, layer, head] - want[metric]).max()))
        print(f"\ndeit ablation: max |effect - reference| {worst:.2e}", file=sys.stderr)
        # a DeiTModel has no classifier
        base, *_ = self.checkpoint("base", family="deit", head=None)
        out = self.path("refused")
        p = subprocess.run([MHA, "analyze", "--model", base, "--method", "ablation", "--image",
                            files[0], "--out_dir", out, "-q"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("a deit has no classifier (no classifier.weight: a ViTModel or DeiTModel",
                      p.stderr)


if __name__ == "__main__":
    if "View" in sys.argv[1:]:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "view"))
        from browser import require_chromium
        require_chromium(["view.ImageOverlay"])
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
