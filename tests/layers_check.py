#!/usr/bin/python3
"""The library's layers (docs/architecture.md) include only downwards: a file in
lib/{include/mha,src}/LAYER/ may include headers of its own layer and of the layers below it,
never of one above. Prints one line per violation and a summary; exits 1 on any.

The build enforces the same rule (each layer is a CMake target that sees only these headers);
this check names every offending line at once and runs without compiling.

    /usr/bin/python3 tests/layers_check.py [REPOSITORY_ROOT]
"""
import os
import re
import sys

LAYERS = ["base", "io", "kernel", "checkpoint", "pipeline", "config", "inspect", "draw", "text", "view", "run",
          "analysis"]  # lowest first
# What each layer stands on, when not every layer below it: draw needs only base and io, so that
# config, kernel and inspect never come to need libpng or FreeType (and draw never the kernel).
BELOW = {layer: set(LAYERS[:i]) for i, layer in enumerate(LAYERS)}
BELOW["draw"] = {"base", "io"}
BELOW["checkpoint"] = {"base", "io", "kernel"}  # whole checkpoints need no run config
BELOW["config"] = {"base", "io", "kernel", "checkpoint"}  # a layer run's, not the whole model's pass
BELOW["text"] = {"base", "io"}  # tokenizers: ICU, never the kernel
INCLUDE = re.compile(r'^\s*#\s*include\s+"mha/([a-z_]+)/([a-z_0-9]+\.hpp)"', re.M)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    checked, bad = 0, []
    for base in ("lib/include/mha", "lib/src"):
        for layer in os.listdir(os.path.join(root, base)):
            folder = os.path.join(root, base, layer)
            if not os.path.isdir(folder):
                continue
            if layer not in LAYERS:
                bad.append(f"{base}/{layer}: not a layer (expected one of {', '.join(LAYERS)})")
                continue
            files = sorted(os.path.relpath(os.path.join(d, n), folder)
                           for d, _, names in os.walk(folder) for n in names)
            for name in files:  # a layer's subfolders (checkpoint/families/) belong to it
                path = os.path.join(folder, name)
                with open(path, errors="replace") as f:
                    text = f.read()
                checked += 1
                for target, header in INCLUDE.findall(text):
                    if target not in LAYERS:
                        bad.append(f"{base}/{layer}/{name}: includes mha/{target}/{header}, "
                                   "which is in no layer")
                    elif target != layer and target not in BELOW[layer]:
                        bad.append(f"{base}/{layer}/{name}: includes mha/{target}/{header}, "
                                   f"which {layer} does not stand on (only "
                                   f"{', '.join(sorted(BELOW[layer], key=LAYERS.index)) or 'itself'})")
    flat = [n for n in os.listdir(os.path.join(root, "lib/src")) if not os.path.isdir(
        os.path.join(root, "lib/src", n))]
    for n in flat:
        bad.append(f"lib/src/{n}: outside the layer folders")
    for line in bad:
        print("FAIL " + line)
    if checked < 40:
        print(f"only {checked} files found under the layer folders: wrong root?")
        return 1
    print(f"{checked - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
