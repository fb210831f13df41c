#include "mha/checkpoint/image_processor.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

namespace mha {

namespace {

using nlohmann::json;

// Pillow's filters (libImaging/Resample.c), with their supports.
struct Filter {
  double support;
  double (*f)(double);
};

double box(double x) {
  return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}
double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}
double hamming(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  return std::sin(x) / x * (0.54 + 0.46 * std::cos(x));
}
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}
double lanczos(double x) {
  return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0;
}

Filter filter_of(int resample) {
  switch (resample) {
    case 1:
      return {3.0, lanczos};
    case 2:
      return {1.0, bilinear};
    case 3:
      return {2.0, bicubic};
    case 4:
      return {0.5, box};
    case 5:
      return {1.0, hamming};
    default:
      return {0, nullptr};
  }
}

constexpr int kPrecisionBits = 32 - 8 - 2;

// precompute_coeffs + normalize_coeffs_8bpc: for each output index, the first
// input index, the count, and `ksize` fixed-point weights.
struct Coeffs {
  std::size_t ksize = 0;
  std::vector<int> first, count;
  std::vector<std::int32_t> k;  // (out, ksize)
};

Coeffs coeffs(std::size_t in_size, std::size_t out_size, const Filter& filter) {
  Coeffs c;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;  // stretched when downscaling
  const double support = filter.support * filterscale;
  c.ksize = static_cast<std::size_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(out_size * c.ksize, 0);
  std::vector<double> w(c.ksize);
  const int in = static_cast<int>(in_size);
  for (std::size_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as Pillow's (int)
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in) xmax = in;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[static_cast<std::size_t>(x)] = filter.f((x + xmin - center + 0.5) * ss);
      ww += w[static_cast<std::size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      double v = w[static_cast<std::size_t>(x)];
      if (ww != 0.0) v /= ww;
      c.k[xx * c.ksize + static_cast<std::size_t>(x)] =
          v < 0 ? static_cast<std::int32_t>(-0.5 + v * (1 << kPrecisionBits))
                : static_cast<std::int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

std::uint8_t clip8(std::int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<std::uint8_t>(v >> kPrecisionBits);
}

// One pass along x (horizontal) or y: out (oh, ow, 3) from in (ih, iw, 3).
RgbImage pass(const RgbImage& in, std::size_t out_size, const Filter& filter, bool horizontal) {
  const Coeffs c = coeffs(horizontal ? in.width : in.height, out_size, filter);
  RgbImage out;
  out.width = horizontal ? out_size : in.width;
  out.height = horizontal ? in.height : out_size;
  out.rgb.resize(out.width * out.height * 3);
  for (std::size_t y = 0; y < out.height; ++y)
    for (std::size_t x = 0; x < out.width; ++x) {
      const std::size_t o = horizontal ? x : y;
      const std::int32_t* k = c.k.data() + o * c.ksize;
      std::int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                            1 << (kPrecisionBits - 1)};
      for (int i = 0; i < c.count[o]; ++i) {
        const std::size_t j = static_cast<std::size_t>(c.first[o] + i);
        const std::uint8_t* p =
            in.rgb.data() + (horizontal ? y * in.width + j : j * in.width + x) * 3;
        for (int ch = 0; ch < 3; ++ch) ss[ch] += p[ch] * k[i];
      }
      for (int ch = 0; ch < 3; ++ch) out.rgb[(y * out.width + x) * 3 + ch] = clip8(ss[ch]);
    }
  return out;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string resample_name(int resample) {
  static const char* names[] = {"nearest", "lanczos", "bilinear", "bicubic", "box", "hamming"};
  return resample >= 0 && resample <= 5 ? names[resample] : "";
}

RgbImage resize_image(const RgbImage& in, std::size_t width, std::size_t height, int resample) {
  const Filter filter = filter_of(resample);
  if (!filter.f)
    fail_input("resample " + std::to_string(resample) +
               " is not supported; expected 1 (lanczos), " +
               "2 (bilinear), 3 (bicubic), 4 (box) or 5 (hamming)");
  RgbImage out = in;
  out.converted.clear();
  if (width != in.width) out = pass(out, width, filter, true);  // horizontal first, as Pillow
  if (height != in.height) out = pass(out, height, filter, false);
  return out;
}

ImageProcessor read_image_processor(const std::string& dir) {
  ImageProcessor p;
  const std::string path = dir + "/preprocessor_config.json";
  if (!is_file(path)) return p;
  p.path = path;
  const json j = read_json_file(path, json_kind::model_config);
  if (!j.is_object()) fail_input(path + ": expected a JSON object (an image processor's config)");
  auto bad = [&](const char* key, const std::string& expected) {
    fail_input(path + ": key '" + key + "' is " + one_line(j[key].dump(), kEchoChars) +
               "; expected " + expected);
  };
  auto flag = [&](const char* key, bool& v) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_boolean()) bad(key, "true or false");
    v = j[key].get<bool>();
  };
  flag("do_resize", p.do_resize);
  flag("do_rescale", p.do_rescale);
  flag("do_normalize", p.do_normalize);
  auto size_value = [&](const json& v, const char* key) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 65536)
      bad(key, "{\"height\": H, \"width\": W} of positive integers");
    return v.get<std::size_t>();
  };
  if (j.contains("size") && !j["size"].is_null()) {
    const json& s = j["size"];
    if (s.is_number()) {  // get_size_dict: an int is a square
      p.height = p.width = size_value(s, "size");
    } else if (s.is_object() && s.contains("height") && s.contains("width")) {
      p.height = size_value(s["height"], "size");
      p.width = size_value(s["width"], "size");
    } else {
      bad("size", "{\"height\": H, \"width\": W}");
    }
  }
  if (j.contains("resample") && !j["resample"].is_null()) {
    if (!j["resample"].is_number_integer()) bad("resample", "one of PIL's resample codes");
    p.resample = j["resample"].get<int>();
    if (!filter_of(p.resample).f)
      fail_input(path + ": key 'resample' is " + std::to_string(p.resample) +
                 (resample_name(p.resample).empty() ? "" : " (" + resample_name(p.resample) + ")") +
                 ", which is not supported; expected 1 (lanczos), 2 (bilinear), 3 (bicubic), 4 "
                 "(box) or 5 (hamming)");
  }
  if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) {
    if (!j["rescale_factor"].is_number()) bad("rescale_factor", "a number");
    p.rescale_factor = j["rescale_factor"].get<double>();
  }
  auto triple = [&](const char* key, std::array<double, 3>& v, bool positive) {
    if (!j.contains(key) || j[key].is_null()) return;
    const json& x = j[key];
    const char* what = positive ? "a positive number or 3 of them" : "a number or 3 of them";
    if (x.is_number()) {
      v.fill(x.get<double>());
    } else if (x.is_array() && x.size() == 3) {
      for (std::size_t i = 0; i < 3; ++i) {
        if (!x[i].is_number()) bad(key, what);
        v[i] = x[i].get<double>();
      }
    } else {
      bad(key, what);
    }
    for (double d : v)
      if (!std::isfinite(d) || (positive && !(d > 0))) bad(key, what);
  };
  triple("image_mean", p.mean, false);
  triple("image_std", p.std, true);
  return p;
}

std::vector<float> preprocess_image(const ImageProcessor& p, const ModelConfig& c,
                                    const RgbImage& image, const std::string& what,
                                    RgbImage& resized) {
  resized = p.do_resize ? resize_image(image, p.width, p.height, p.resample) : image;
  const std::size_t H = resized.height, W = resized.width;
  if (H != c.image_height || W != c.image_width)
    fail_input(what + ": the model sees a " + std::to_string(H) + " x " + std::to_string(W) +
               " image (height x width" +
               (p.do_resize ? ", preprocessor_config.json's size" : ", do_resize false") +
               "), but config.json's image_size is " + std::to_string(c.image_height) + " x " +
               std::to_string(c.image_width));
  std::vector<float> out(3 * H * W);  // (3, H, W)
  for (std::size_t ch = 0; ch < 3; ++ch) {
    const float mean = static_cast<float>(p.mean[ch]), sd = static_cast<float>(p.std[ch]);
    for (std::size_t i = 0; i < H * W; ++i) {
      const std::uint8_t u = resized.rgb[i * 3 + ch];
      // rescale: float64 product, then float32; normalize: float32 throughout
      float v = p.do_rescale ? static_cast<float>(static_cast<double>(u) * p.rescale_factor)
                             : static_cast<float>(u);
      if (p.do_normalize) v = (v - mean) / sd;
      out[ch * H * W + i] = v;
    }
  }
  return out;
}

}  // namespace mha
