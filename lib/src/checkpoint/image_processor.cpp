#include "mha/checkpoint/image_processor.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
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
  // horizontal first, as Pillow; the input is never copied (it may be 384 MiB)
  if (width == in.width && height == in.height) {
    RgbImage out = in;
    out.converted.clear();
    return out;
  }
  RgbImage out =
      width != in.width ? pass(in, width, filter, true) : pass(in, height, filter, false);
  if (width != in.width && height != in.height) out = pass(out, height, filter, false);
  return out;
}

namespace {

// The defaults of the processor class `p.processor` names (DeiTImageProcessor's
// differ from ViTImageProcessor's in the resize and the crop).
void class_defaults(ImageProcessor& p) {
  if (p.processor.rfind("DeiTImageProcessor", 0) == 0) {
    p.height = p.width = 256;
    p.resample = 3;
    p.do_center_crop = true;
  }
}

// ViTImageProcessor's preprocess has no crop step: do_center_crop and crop_size are kept
// as attributes and never read. Every other class that has the keys crops.
bool has_crop_step(const std::string& processor) {
  return processor != "ViTImageProcessor" && processor != "ViTImageProcessorFast";
}

}  // namespace

ImageProcessor read_image_processor(const std::string& dir, const std::string& model_type) {
  ImageProcessor p;
  if (model_type == "deit") p.processor = "DeiTImageProcessor";
  const std::string path = dir + "/preprocessor_config.json";
  if (!is_file(path)) {
    class_defaults(p);
    return p;
  }
  p.path = path;
  const json j = read_json_file(path, json_kind::model_config);
  if (!j.is_object()) fail_input(path + ": expected a JSON object (an image processor's config)");
  auto bad = [&](const char* key, const std::string& expected) {
    fail_input(path + ": key '" + key + "' is " + one_line(j[key].dump(), kEchoChars) +
               "; expected " + expected);
  };
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  // AutoImageProcessor's choice of class: image_processor_type, else a feature
  // extractor's, whose class is the image processor of the same name.
  for (const char* key : {"image_processor_type", "feature_extractor_type"}) {
    if (!given(key)) continue;
    const std::string name = j[key].is_string() ? j[key].get<std::string>() : "";
    if (name.empty() || name.size() > 100 || !std::all_of(name.begin(), name.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
        }))
      bad(key, "a processor's class name (letters, digits, _)");
    p.processor = name;
    const std::string extractor = "FeatureExtractor";
    const std::size_t at = p.processor.find(extractor);
    if (at != std::string::npos) p.processor.replace(at, extractor.size(), "ImageProcessor");
    break;
  }
  class_defaults(p);
  auto flag = [&](const char* key, bool& v) {
    if (!given(key)) return;
    if (!j[key].is_boolean()) bad(key, "true or false");
    v = j[key].get<bool>();
  };
  flag("do_resize", p.do_resize);
  flag("do_rescale", p.do_rescale);
  flag("do_normalize", p.do_normalize);
  // get_size_dict: {"height": H, "width": W}, or an int for a square
  auto size_value = [&](const json& v, const char* key) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 65536)
      bad(key, "{\"height\": H, \"width\": W} of integers from 1 to 65536");
    return v.get<std::size_t>();
  };
  auto size_pair = [&](const char* key, std::size_t& height, std::size_t& width) {
    if (!given(key)) return;
    const json& s = j[key];
    if (s.is_number()) {
      height = width = size_value(s, key);
    } else if (s.is_object() && s.size() == 2 && s.contains("height") && s.contains("width")) {
      height = size_value(s["height"], key);
      width = size_value(s["width"], key);
    } else {
      bad(key, "{\"height\": H, \"width\": W}");
    }
  };
  size_pair("size", p.height, p.width);
  // The resized image is held whole before any crop: bounded as a decoded image is.
  if (p.do_resize && std::uint64_t{p.height} * p.width > kMaxImagePixels)
    bad("size", "at most 2^27 pixels");
  if (has_crop_step(p.processor)) {
    flag("do_center_crop", p.do_center_crop);
    size_pair("crop_size", p.crop_height, p.crop_width);
    // A crop larger than the resized image is zero-padded to its size: bounded the same way.
    if (p.do_center_crop && std::uint64_t{p.crop_height} * p.crop_width > kMaxImagePixels)
      bad("crop_size", "at most 2^27 pixels");
  } else {
    p.do_center_crop = false;
  }
  if (j.contains("resample") && !j["resample"].is_null()) {
    // an int of any size (get<int> would take 2^32 + 2 for 2, bilinear)
    if (!j["resample"].is_number_integer() || j["resample"].get<std::int64_t>() < 0 ||
        j["resample"].get<std::int64_t>() > 1000)
      bad("resample", "one of PIL's resample codes");
    p.resample = j["resample"].get<int>();
    if (!filter_of(p.resample).f)
      fail_input(path + ": key 'resample' is " + std::to_string(p.resample) +
                 (resample_name(p.resample).empty() ? "" : " (" + resample_name(p.resample) + ")") +
                 ", which is not supported; expected 1 (lanczos), 2 (bilinear), 3 (bicubic), 4 "
                 "(box) or 5 (hamming)");
  }
  if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) {
    if (!j["rescale_factor"].is_number() || !std::isfinite(j["rescale_factor"].get<double>()))
      bad("rescale_factor", "a finite number");
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
    // the steps compute in float32: 1e308 is a double but Inf there, 1e-50 is 0
    for (double d : v) {
      const float f = static_cast<float>(d);
      if (!std::isfinite(d) || (positive && !(d > 0))) bad(key, what);
      if (!std::isfinite(f) || (positive && !(f > 0)))
        bad(key, positive ? "positive numbers that stay positive and finite in float32"
                          : "numbers that stay finite in float32");
    }
  };
  triple("image_mean", p.mean, false);
  triple("image_std", p.std, true);
  // Every pixel value the steps can give, as preprocess_image computes it, finite in float32:
  // each step is monotonic in the byte, so bytes 0 and 255 bound them.
  for (int u : {0, 255}) {
    const float v = p.do_rescale ? static_cast<float>(u * p.rescale_factor) : static_cast<float>(u);
    if (!std::isfinite(v))
      bad("rescale_factor", "a factor that keeps a byte of 255 finite in float32");
    for (std::size_t ch = 0; p.do_normalize && ch < 3; ++ch) {
      const float mean = static_cast<float>(p.mean[ch]), sd = static_cast<float>(p.std[ch]);
      if (std::isfinite(v - mean) && std::isfinite((v - mean) / sd)) continue;
      auto value = [&](const char* key) {
        return given(key) ? one_line(j[key].dump(), kEchoChars) : std::string("(default)");
      };
      fail_input(path + ": keys 'image_mean' " + value("image_mean") + ", 'image_std' " +
                 value("image_std") + (p.do_rescale ? " and 'rescale_factor' " : "") +
                 (p.do_rescale ? value("rescale_factor") : "") + " make a byte of " +
                 std::to_string(u) + " non-finite in float32 (channel " + std::to_string(ch) +
                 "); expected values that keep (pixel - mean) / std finite");
    }
  }
  return p;
}

RgbImage center_crop(const RgbImage& in, std::size_t width, std::size_t height) {
  // Python's floor division of a possibly negative difference
  auto offset = [](std::size_t size, std::size_t crop) {
    return size >= crop ? static_cast<std::int64_t>((size - crop) / 2)
                        : -static_cast<std::int64_t>((crop - size + 1) / 2);
  };
  const std::int64_t top = offset(in.height, height), left = offset(in.width, width);
  RgbImage out;
  out.width = width;
  out.height = height;
  out.rgb.assign(width * height * 3, 0);
  for (std::size_t y = 0; y < height; ++y) {
    const std::int64_t sy = static_cast<std::int64_t>(y) + top;
    if (sy < 0 || sy >= static_cast<std::int64_t>(in.height)) continue;
    for (std::size_t x = 0; x < width; ++x) {
      const std::int64_t sx = static_cast<std::int64_t>(x) + left;
      if (sx < 0 || sx >= static_cast<std::int64_t>(in.width)) continue;
      std::copy_n(in.rgb.data() +
                      (static_cast<std::size_t>(sy) * in.width + static_cast<std::size_t>(sx)) * 3,
                  3, out.rgb.data() + (y * width + x) * 3);
    }
  }
  return out;
}

std::vector<float> preprocess_image(const ImageProcessor& p, const ModelConfig& c,
                                    const RgbImage& image, const std::string& what,
                                    RgbImage& resized) {
  // The size the steps leave, checked before any of them runs.
  const std::string source =
      p.path.empty() ? p.processor + "'s default " : "preprocessor_config.json's ";
  const std::size_t H = p.do_center_crop ? p.crop_height
                        : p.do_resize    ? p.height
                                         : image.height,
                    W = p.do_center_crop ? p.crop_width
                        : p.do_resize    ? p.width
                                         : image.width;
  if (H != c.image_height || W != c.image_width)
    fail_input(what + ": the model sees a " + std::to_string(H) + " x " + std::to_string(W) +
               " image (height x width" +
               (p.do_center_crop ? ", " + source + "crop_size"
                : p.do_resize    ? ", " + source + "size"
                                 : std::string(", do_resize false")) +
               "), but config.json's image_size is " + std::to_string(c.image_height) + " x " +
               std::to_string(c.image_width));
  // PIL resizes along x first: (image.height, size's width) is held between the passes.
  if (p.do_resize && p.width != image.width && p.height != image.height &&
      std::uint64_t{image.height} * p.width > kMaxImagePixels)
    fail_input(what + ": resizing its " + std::to_string(image.height) + " x " +
               std::to_string(image.width) + " pixels (height x width) to " + source + "size " +
               std::to_string(p.height) + " x " + std::to_string(p.width) + " passes through " +
               std::to_string(image.height) + " x " + std::to_string(p.width) +
               " (width first, as PIL), over the 2^27 pixels an image may have");
  resized = p.do_resize ? resize_image(image, p.width, p.height, p.resample) : image;
  if (p.do_center_crop) resized = center_crop(resized, p.crop_width, p.crop_height);
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
