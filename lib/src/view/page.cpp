// The viewer's assets are assembled into this object with .incbin, as the
// plot font is (font_data.cpp): CMake passes the asset folder as
// MHA_ASSET_DIR and Chart.js's file (Debian's libjs-chart.js, MIT license) as
// MHA_CHARTJS_FILE, so the binary needs no file at run time.
#include "mha/view/page.hpp"

#include <cstdint>
#include <vector>

#include <zlib.h>

#include "mha/base/error.hpp"

#ifndef MHA_ASSET_DIR
#error "MHA_ASSET_DIR must name lib/assets (set by CMakeLists.txt)"
#endif
#ifndef MHA_CHARTJS_FILE
#error "MHA_CHARTJS_FILE must name Chart.js's chart.min.js (set by CMakeLists.txt)"
#endif

#define MHA_ASSET(symbol, file)         \
  ".balign 16\n"                        \
  ".globl " #symbol                     \
  "_begin\n"                            \
  ".hidden " #symbol "_begin\n" #symbol \
  "_begin:\n"                           \
  ".incbin \"" file                     \
  "\"\n"                                \
  ".globl " #symbol                     \
  "_end\n"                              \
  ".hidden " #symbol "_end\n" #symbol "_end:\n"

asm(".pushsection .rodata\n" MHA_ASSET(mha_asset_view_css, MHA_ASSET_DIR "/view.css")
        MHA_ASSET(mha_asset_attention_html, MHA_ASSET_DIR "/attention.html")
            MHA_ASSET(mha_asset_attention_js, MHA_ASSET_DIR "/attention.js")
                MHA_ASSET(mha_asset_sweep_html, MHA_ASSET_DIR "/sweep.html")
                    MHA_ASSET(mha_asset_sweep_js, MHA_ASSET_DIR "/sweep.js")
                        MHA_ASSET(mha_asset_chart_js, MHA_CHARTJS_FILE) ".popsection\n");

#define MHA_ASSET_SYMBOLS(symbol)                                               \
  extern "C" __attribute__((visibility("hidden"))) const char symbol##_begin[]; \
  extern "C" __attribute__((visibility("hidden"))) const char symbol##_end[];
MHA_ASSET_SYMBOLS(mha_asset_view_css)
MHA_ASSET_SYMBOLS(mha_asset_attention_html)
MHA_ASSET_SYMBOLS(mha_asset_attention_js)
MHA_ASSET_SYMBOLS(mha_asset_sweep_html)
MHA_ASSET_SYMBOLS(mha_asset_sweep_js)
MHA_ASSET_SYMBOLS(mha_asset_chart_js)

namespace mha {

std::string_view page_asset(const std::string& name) {
  auto view = [](const char* begin, const char* end) {
    return std::string_view(begin, static_cast<std::size_t>(end - begin));
  };
  if (name == "view.css") return view(mha_asset_view_css_begin, mha_asset_view_css_end);
  if (name == "attention.html")
    return view(mha_asset_attention_html_begin, mha_asset_attention_html_end);
  if (name == "attention.js") return view(mha_asset_attention_js_begin, mha_asset_attention_js_end);
  if (name == "sweep.html") return view(mha_asset_sweep_html_begin, mha_asset_sweep_html_end);
  if (name == "sweep.js") return view(mha_asset_sweep_js_begin, mha_asset_sweep_js_end);
  if (name == "chart.min.js") return view(mha_asset_chart_js_begin, mha_asset_chart_js_end);
  throw Error(ErrorKind::runtime, "no page asset named " + name);
}

std::string base64(const unsigned char* data, std::size_t size) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const std::uint32_t v =
        (std::uint32_t{data[i]} << 16) | (std::uint32_t{data[i + 1]} << 8) | data[i + 2];
    out += kDigits[v >> 18];
    out += kDigits[(v >> 12) & 63];
    out += kDigits[(v >> 6) & 63];
    out += kDigits[v & 63];
  }
  if (i < size) {
    std::uint32_t v = std::uint32_t{data[i]} << 16;
    if (i + 1 < size) v |= std::uint32_t{data[i + 1]} << 8;
    out += kDigits[v >> 18];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < size ? kDigits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string pack_values(const unsigned char* data, std::size_t count, std::size_t itemsize) {
  std::vector<unsigned char> shuffled(count * itemsize);
  for (std::size_t k = 0; k < itemsize; ++k)
    for (std::size_t i = 0; i < count; ++i) shuffled[k * count + i] = data[i * itemsize + k];
  uLongf size = compressBound(static_cast<uLong>(shuffled.size()));
  std::vector<unsigned char> packed(size);
  if (compress2(packed.data(), &size, shuffled.data(), static_cast<uLong>(shuffled.size()), 6) !=
      Z_OK)
    throw Error(ErrorKind::runtime, "deflating the attention weights for the page failed");
  return base64(packed.data(), size);
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

std::string html_page(const std::string& title, const std::string& body, const std::string& json,
                      const std::vector<std::string>& scripts) {
  std::string safe;
  safe.reserve(json.size());
  for (char ch : json) {
    if (ch == '<')
      safe += "\\u003c";
    else
      safe += ch;
  }
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta name=\"generator\" content=\"mha " MHA_VERSION "\">\n";
  page += "<title>" + html_escape(title) + "</title>\n<style>\n";
  page += page_asset("view.css");
  page += "</style>\n</head>\n<body>\n";
  page += body;
  page += "<script id=\"mha-data\" type=\"application/json\">";
  page += safe;
  page += "</script>\n";
  for (const auto& name : scripts) {
    page += "<script>\n";
    page += page_asset(name);
    page += "\n</script>\n";
  }
  page += "</body>\n</html>\n";
  return page;
}

}  // namespace mha
