// An image model's preprocessing, as Hugging Face's ViTImageProcessor does
// it from the checkpoint's preprocessor_config.json: do_resize to size
// {height, width} with `resample` (PIL's Image.resize, reproduced here),
// do_rescale by rescale_factor (in double, then float32), do_normalize with
// image_mean and image_std (in float32), channels first.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "mha/checkpoint/model_config.hpp"
#include "mha/io/image.hpp"

namespace mha {

struct ImageProcessor {
  std::string path;  // the preprocessor_config.json read ("" when absent: the defaults)
  bool do_resize = true;
  std::size_t height = 224, width = 224;  // size
  int resample = 2;                       // PIL's codes: 1 lanczos, 2 bilinear, 3 bicubic, ...
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;
  bool do_normalize = true;
  std::array<double, 3> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};  // IMAGENET_STANDARD_*
};

// PIL's name of a resample code ("bilinear"), or "" for one it lacks.
std::string resample_name(int resample);

// DIR/preprocessor_config.json, or ViTImageProcessor's defaults when DIR has
// none; the image the model sees (size when do_resize, else each image's own)
// must be the config's image_size, which the run checks. Throws mha::Error
// (invalid_input) naming the file and key: a resample PIL's Image.resize has
// no convolution for (0, nearest), a size not {height, width}, means or
// deviations not 3 numbers (or one), a zero deviation.
ImageProcessor read_image_processor(const std::string& dir);

// PIL's Image.resize(size, resample) of an RGB image, bit for bit: separable
// convolutions (horizontal, then vertical) with the filter stretched by the
// scale when downscaling (antialiasing), fixed-point weights of 22 bits and
// each pass rounded and clipped to 8 bits. An image of the size already is
// returned as it is.
RgbImage resize_image(const RgbImage& in, std::size_t width, std::size_t height, int resample);

// The processor's steps on one image: `resized` gets the 8-bit image the
// model sees (resized, or as given); returns its pixel values (3, H, W)
// float32. Throws mha::Error (invalid_input) naming `what` when the image is
// not the model's image_height x image_width then.
std::vector<float> preprocess_image(const ImageProcessor& p, const ModelConfig& c,
                                    const RgbImage& image, const std::string& what,
                                    RgbImage& resized);

}  // namespace mha
