// An image model's preprocessing, as Hugging Face's ViTImageProcessor and
// DeiTImageProcessor do it from the checkpoint's preprocessor_config.json:
// do_resize to size {height, width} with `resample` (PIL's Image.resize,
// reproduced here), DeiT's do_center_crop to crop_size, do_rescale by
// rescale_factor (in double, then float32), do_normalize with image_mean and
// image_std (in float32), channels first.
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
  // The processor's class, as AutoImageProcessor picks it: image_processor_type, else
  // feature_extractor_type (its FeatureExtractor read as ImageProcessor), else the model
  // type's (DeiTImageProcessor for deit, ViTImageProcessor otherwise). Its defaults apply
  // to the keys the file leaves out.
  std::string processor = "ViTImageProcessor";
  bool do_resize = true;
  std::size_t height = 224, width = 224;  // size
  int resample = 2;                       // PIL's codes: 1 lanczos, 2 bilinear, 3 bicubic, ...
  // The centre crop_size of the resized image (DeiTImageProcessor: true, 224 x 224, after
  // resizing to 256 x 256 bicubic). ViTImageProcessor has no crop step and ignores the keys.
  bool do_center_crop = false;
  std::size_t crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;
  bool do_normalize = true;
  std::array<double, 3> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};  // IMAGENET_STANDARD_*
};

// PIL's name of a resample code ("bilinear"), or "" for one it lacks.
std::string resample_name(int resample);

// DIR/preprocessor_config.json, or the processor's defaults (`model_type`'s:
// DeiTImageProcessor's for deit, else ViTImageProcessor's) when DIR has none;
// the image the model sees (crop_size when cropping, else size when
// do_resize, else each image's own) must be the config's image_size, which
// the run checks. Throws mha::Error (invalid_input) naming the file and key:
// a resample PIL's Image.resize has no convolution for (0, nearest), a size
// or crop_size not {height, width} (or one int) of 1 to 65536 each, a size
// over 2^27 pixels, means or deviations not 3 numbers (or one), a zero
// deviation, a processor class that is not a short string; a rescale_factor,
// mean or deviation that is not finite (or positive) in float32, where the
// steps compute, or that makes a pixel value non-finite there.
ImageProcessor read_image_processor(const std::string& dir, const std::string& model_type = "vit");

// PIL's Image.resize(size, resample) of an RGB image, bit for bit: separable
// convolutions (horizontal, then vertical) with the filter stretched by the
// scale when downscaling (antialiasing), fixed-point weights of 22 bits and
// each pass rounded and clipped to 8 bits. An image of the size already is
// returned as it is.
RgbImage resize_image(const RgbImage& in, std::size_t width, std::size_t height, int resample);

// transformers' center_crop of an RGB image to height x width: rows from
// top = (in.height - height) // 2 and columns from left = (in.width - width)
// // 2 (floor division: negative when the crop is the larger), zeros where
// the crop passes the image (transformers pads a smaller image with zeros,
// centred, then crops; PIL's Image.crop of the same box gives the same).
RgbImage center_crop(const RgbImage& in, std::size_t width, std::size_t height);

// The processor's steps on one image: `resized` gets the 8-bit image the
// model sees (resized and cropped, or as given); returns its pixel values
// (3, H, W) float32. Throws mha::Error (invalid_input) naming `what`, before
// any pixel is resized, when the image would not be the model's
// image_height x image_width, or when the resize would hold an image of over
// 2^27 pixels between its passes.
std::vector<float> preprocess_image(const ImageProcessor& p, const ModelConfig& c,
                                    const RgbImage& image, const std::string& what,
                                    RgbImage& resized);

}  // namespace mha
