// What every page of the viewer is made of: the embedded assets (the pages'
// markup, style and scripts, and Chart.js from Debian's libjs-chart.js, all
// compiled into the binary) and the encodings that put data inline.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mha {

// An embedded asset by file name: "view.css", "attention.html",
// "attention.js", "sweep.html", "sweep.js", "chart.min.js". Throws
// mha::Error (runtime) for an unknown name.
std::string_view page_asset(const std::string& name);

// RFC 4648 base64 with padding.
std::string base64(const unsigned char* data, std::size_t size);

// `count` elements of `itemsize` bytes byte-shuffled (byte k of every element
// together, k = 0 first), then deflated in zlib format (what a browser's
// DecompressionStream("deflate") reads), then base64.
std::string pack_values(const unsigned char* data, std::size_t count, std::size_t itemsize);

// A whole page: <title>, view.css, `body` markup, `json` (a dumped JSON value) in
// <script id="mha-data" type="application/json">, then each script asset
// named in `scripts`, in order. '<' in the JSON is written \u003c so no
// string can end the script element.
std::string html_page(const std::string& title, const std::string& body, const std::string& json,
                      const std::vector<std::string>& scripts);

std::string html_escape(const std::string& text);

}  // namespace mha
