#!/usr/bin/python3
"""The viridis table every image and page is coloured with (lib/src/draw/viridis_table.inc),
entry for entry against matplotlib's own colormap (Debian's python3-matplotlib): an independent
reference, so that the plot and view tests, which read their expected colours from that table,
are held to matplotlib through it.

    /usr/bin/python3 tests/draw/check_viridis.py [REPOSITORY_ROOT]
"""
import os
import re
import sys

import numpy as np
from matplotlib import cm


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "lib", "src", "draw", "viridis_table.inc")) as f:
        table = np.array([[int(v) for v in m] for m in
                          re.findall(r"\{\s*(\d+),\s*(\d+),\s*(\d+)\}", f.read())])
    reference = np.rint(np.asarray(cm.get_cmap("viridis")(np.arange(256) / 255.0))[:, :3] * 255)
    if table.shape != (256, 3):
        print(f"FAIL viridis_table.inc holds {table.shape[0]} entries, expected 256")
        return 1
    bad = [i for i in range(256) if not np.array_equal(table[i], reference[i])]
    for i in bad[:10]:
        print(f"FAIL entry {i}: {table[i].tolist()}, matplotlib {reference[i].astype(int).tolist()}")
    print(f"{256 - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
