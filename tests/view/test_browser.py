"""Self-test of tests/view/browser.py (headless Chromium over the DevTools pipe).

Run: /usr/bin/python3 tests/view/test_browser.py
Exit 0 on pass, 1 on failure, 77 (ctest skip) when Chromium is not installed (1 under
MHA_REQUIRE_ALL unless MHA_ALLOW_SKIPS lists view.browser: tests/skips.py).
The PNG decoder is checked first, against PNGs built here with every filter
type; that part needs no browser.
"""

import os
import random
import struct
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import browser  # noqa: E402
from browser import Browser, BrowserError, JSError, decode_png  # noqa: E402

W, H = 640, 480
WHITE = (255, 255, 255)
GREEN = (12, 200, 99)     # #0cc863, the box at (40, 30) size 120 x 80
ORANGE = (250, 128, 7)    # #fa8007, the box at (300, 200) size 50 x 50

PAGE_WITH_ERROR = """<!doctype html>
<html><head><meta charset="utf-8"><title>browser.py self-test</title>
<style>
  html, body { margin: 0; padding: 0; background: #ffffff; }
  #green { position: absolute; left: 40px; top: 30px; width: 120px;
           height: 80px; background: rgb(12, 200, 99); }
  #orange { position: absolute; left: 300px; top: 200px; width: 50px;
            height: 50px; background: #fa8007; }
  #where { position: absolute; left: 0; top: 400px; font: 12px monospace; }
</style></head>
<body>
<div id="green"></div><div id="orange"></div><div id="where">none</div>
<script>
  window.clicks = 0;
  document.addEventListener('mousemove', function (e) {
    document.getElementById('where').textContent = e.clientX + ',' + e.clientY;
  });
  document.getElementById('orange').addEventListener('click', function () {
    window.clicks += 1;
  });
  console.log('an ordinary log line, not an error');
  console.error('deliberate error', 1234);
</script>
</body></html>
"""

PAGE_CLEAN = """<!doctype html>
<html><head><meta charset="utf-8"><title>clean</title></head>
<body style="margin:0;background:rgb(10,20,30)">
<p id="p" style="color:white">nothing wrong here</p>
<script>console.log('fine'); console.warn('a warning is not an error');</script>
</body></html>
"""

failures = []


def check(cond, what):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        failures.append(what)


def expect_pixel(rows, x, y, colour):
    got = rows[y][x]
    if got != colour:
        raise AssertionError("pixel (%d, %d) is %r, expected %r"
                             % (x, y, got, colour))


def must_raise(exc_type, fn, what):
    try:
        fn()
    except exc_type as exc:
        check(True, "%s (raised %s)" % (what, str(exc).splitlines()[0][:80]))
        return
    check(False, what + " (did not raise)")


# ------------------------------------------------------------ PNG decoder

def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def encode_png(width, height, pixels, bpp, filters):
    """A PNG of rows of raw bytes; row y uses filter filters[y % len]."""
    raw = bytearray()
    prev = bytes(width * bpp)
    for y in range(height):
        line = pixels[y]
        ftype = filters[y % len(filters)]
        out = bytearray([ftype])
        for i, v in enumerate(line):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = (0, a, b, (a + b) >> 1, _paeth(a, b, c))[ftype]
            out.append((v - pred) & 0xFF)
        raw += out
        prev = line

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    colour = 2 if bpp == 3 else 6
    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    z = zlib.compress(bytes(raw))
    # Two IDAT chunks, to check that they are joined.
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", z[:len(z) // 2]) + chunk(b"IDAT", z[len(z) // 2:])
            + chunk(b"IEND", b""))


def test_decoder():
    rng = random.Random(7)
    for bpp in (3, 4):
        width, height = 37, 25
        pixels = []
        for y in range(height):
            # random bytes, with runs, so every predictor sees carries/wraps
            line = bytes(rng.choice((rng.randrange(256), 0, 255, y * 9 % 256))
                         for _ in range(width * bpp))
            pixels.append(line)
        for filters in ((0,), (1,), (2,), (3,), (4,), (0, 1, 2, 3, 4)):
            png = encode_png(width, height, pixels, bpp, filters)
            w, h, rows = decode_png(png)
            want = [[tuple(line[x * bpp:x * bpp + 3]) for x in range(width)]
                    for line in pixels]
            check((w, h) == (width, height) and rows == want,
                  "decode_png bpp=%d filters=%s" % (bpp, filters))
    bad = encode_png(4, 2, [bytes(12), bytes(12)], 3, (0,))
    bad = bad.replace(bytes([0x49, 0x48, 0x44, 0x52]) + struct.pack(">II", 4, 2)
                      + b"\x08\x02", bytes([0x49, 0x48, 0x44, 0x52])
                      + struct.pack(">II", 4, 2) + b"\x10\x02")
    must_raise(ValueError, lambda: decode_png(bad),
               "decode_png refuses 16-bit PNGs")
    must_raise(ValueError, lambda: decode_png(b"GIF89a"),
               "decode_png refuses non-PNG data")


# ----------------------------------------------------------------- browser

def test_browser(tmp):
    page1 = os.path.join(tmp, "with_error.html")
    page2 = os.path.join(tmp, "clean.html")
    with open(page1, "w") as f:
        f.write(PAGE_WITH_ERROR)
    with open(page2, "w") as f:
        f.write(PAGE_CLEAN)

    t0 = time.monotonic()
    with Browser(width=W, height=H, timeout=30) as b:
        print("     started %s in %.2fs"
              % (b.version.get("product"), time.monotonic() - t0))
        t = time.monotonic()
        url = b.open(page1)
        print("     opened page 1 in %.2fs" % (time.monotonic() - t))
        check(url == "file://" + os.path.abspath(page1), "open returns the URL")
        check(b.evaluate("document.title") == "browser.py self-test",
              "evaluate reads the document")
        check(b.evaluate("Promise.resolve([1, {a: 'x'}])") == [1, {"a": "x"}],
              "evaluate awaits promises and returns values")
        check(b.evaluate("undefined") is None, "undefined evaluates to None")

        # Screenshot pixels
        t = time.monotonic()
        w, h, rows = b.screenshot()
        print("     screenshot + decode in %.2fs" % (time.monotonic() - t))
        check((w, h) == (W, H) and len(rows) == H and len(rows[0]) == W,
              "screenshot is %dx%d (got %dx%d)" % (W, H, w, h))
        probes = [((40, 30), GREEN), ((159, 109), GREEN), ((100, 70), GREEN),
                  ((39, 70), WHITE), ((160, 70), WHITE), ((100, 29), WHITE),
                  ((100, 110), WHITE), ((300, 200), ORANGE),
                  ((349, 249), ORANGE), ((350, 249), WHITE), ((5, 5), WHITE),
                  ((W - 1, H - 1), WHITE)]
        for (x, y), colour in probes:
            try:
                expect_pixel(rows, x, y, colour)
                check(True, "pixel (%d, %d) is %r" % (x, y, colour))
            except AssertionError as exc:
                check(False, str(exc))
        green = sum(1 for r in rows for p in r if p == GREEN)
        check(green == 120 * 80, "exactly 120x80 green pixels (got %d)" % green)
        # The check itself can fail: a wrong colour must be reported.
        must_raise(AssertionError,
                   lambda: expect_pixel(rows, 100, 70, (12, 200, 98)),
                   "a wrong expected colour fails")
        must_raise(AssertionError, lambda: expect_pixel(rows, 39, 70, GREEN),
                   "a pixel just outside the box is not the box colour")

        shot = os.path.join(tmp, "shot.png")
        b.save_screenshot(shot)
        with open(shot, "rb") as f:
            data = f.read()
        check(data[:8] == b"\x89PNG\r\n\x1a\n" and decode_png(data)[:2] == (W, H),
              "save_screenshot writes a %dx%d PNG" % (W, H))

        # Mouse
        check(b.evaluate("document.getElementById('where').textContent")
              == "none", "no mousemove before mouse_move")
        b.mouse_move(77, 55)
        got = b.wait_for("document.getElementById('where').textContent"
                         " === '77,55' && '77,55'", timeout=5)
        check(got == "77,55", "mouse_move(77, 55) reaches the page")
        b.mouse_move(123, 321)
        b.wait_for("document.getElementById('where').textContent"
                   " === '123,321'", timeout=5)
        check(True, "a second mouse_move reaches the page")
        b.click(320, 220)
        check(b.wait_for("window.clicks === 1", timeout=5) is True,
              "click on the orange box fires its click handler once")

        # Errors and requests
        check(len(b.errors) == 1 and "deliberate error 1234" in b.errors[0],
              "the console.error is captured, and only it: %r" % (b.errors,))
        check(b.requests == [url],
              "requests holds only the page's URL: %r" % (b.requests,))
        b.evaluate("setTimeout(function () { throw new Error('later'); }, 0)")
        b.wait_for("new Promise(r => setTimeout(() => r(true), 50))")
        check(len(b.errors) == 2 and "later" in b.errors[1],
              "an uncaught exception is captured: %r" % (b.errors[1:],))

        # Failures are reported, and waits end
        must_raise(JSError, lambda: b.evaluate("no_such_function()"),
                   "evaluate raises JSError for a throwing expression")
        must_raise(JSError, lambda: b.evaluate("Promise.reject(new Error('no'))"),
                   "evaluate raises JSError for a rejected promise")
        t = time.monotonic()
        must_raise(BrowserError, lambda: b.wait_for("false", timeout=0.5),
                   "wait_for times out")
        check(time.monotonic() - t < 3, "wait_for's timeout is honoured")
        must_raise(FileNotFoundError,
                   lambda: b.open(os.path.join(tmp, "missing.html")),
                   "open of a missing file raises")

        # A second, clean page: fresh errors and requests
        url2 = b.open(page2)
        check(b.errors == [], "a page without errors has no errors: %r"
              % (b.errors,))
        check(b.requests == [url2], "page 2 requested only itself: %r"
              % (b.requests,))
        _, _, rows2 = b.screenshot()
        check(rows2[H - 1][W - 1] == (10, 20, 30),
              "page 2's background is rgb(10, 20, 30): %r" % (rows2[H - 1][W - 1],))
        pid = b._proc.pid
    check(b._proc is None and b._tmp is None, "close releases the browser")
    try:
        os.kill(pid, 0)
        gone = False
    except ProcessLookupError:
        gone = True
    check(gone, "the Chromium process is gone after the with block")
    print("     browser part took %.2fs" % (time.monotonic() - t0))


def main():
    test_decoder()
    path = browser.require_chromium(["view.browser"])
    print("     chromium: %s" % path)
    with tempfile.TemporaryDirectory(prefix="mha-test-browser-") as tmp:
        test_browser(tmp)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
