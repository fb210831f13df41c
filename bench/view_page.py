#!/usr/bin/python3
"""The viewer page of 12 heads of 512 x 512 (float32) in headless Chromium: its size, how long
`mha view` takes to write it, and how long after navigation starts the page is drawn (every
panel, the statistics table; performance.now() when the page sets data-ready), over N opens.

  /usr/bin/python3 bench/view_page.py [N]    (MHA_BIN = path to mha, default build/bin/mha)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "view"))
from browser import Browser, require_chromium  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    require_chromium()
    with tempfile.TemporaryDirectory(prefix="mha_view_bench_") as d:
        subprocess.run([MHA, "run", "-q", "--h", "12", "--d_model", "768", "--seq_len", "512",
                        "--batch", "1", "--save_attention", "--out_dir", d], check=True)
        t = time.perf_counter()
        subprocess.run([MHA, "view", "-q", d], check=True)
        write_s = time.perf_counter() - t
        page = os.path.join(d, "view.html")
        size = os.path.getsize(page)
        drawn = []
        with Browser(1400, 1000) as b:
            for _ in range(n):
                b.open(page)
                b.wait_for("document.body.dataset.ready === '1'", 30)
                assert b.evaluate("document.querySelectorAll('#grid canvas').length") == 12
                assert not b.errors, b.errors
                drawn.append(float(b.evaluate("document.body.dataset.readyMs")) / 1000)
        print(f"page: {size / 1e6:.1f} MB, written by `mha view` in {write_s:.2f} s")
        print(f"drawn after navigation start: median {statistics.median(drawn):.2f} s "
              f"(min {min(drawn):.2f}, max {max(drawn):.2f}, {n} opens)")


if __name__ == "__main__":
    main()
