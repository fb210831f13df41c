// PNG encoding of an Image through libpng: 8-bit RGB, not interlaced, no
// prediction filters, zlib level 3 (see png.cpp). Writes to any std::ostream,
// so the file can be staged atomically through OutputSet::stage:
//
//   mha::OutputSet out("out");
//   out.stage("attention.png", [&](std::ostream& os) { mha::write_png(os, image, path); });
//   out.commit();
#pragma once

#include <ostream>
#include <string>

#include "mha/draw/image.hpp"

namespace mha {

// Encodes `image` (at least 1x1) into `out`. `name` (the destination's path)
// starts the message of the mha::Error (runtime) thrown when libpng fails.
// A failing stream is left for the caller to notice (OutputSet checks it).
void write_png(std::ostream& out, const Image& image, const std::string& name);

}  // namespace mha
