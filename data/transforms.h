// Transforms: per-sample augmentation of 8-bit HWC images into float CHW, and the Pipeline that chains them.
//
// Randomness comes from sample_generator(seed, epoch, index): a Philox stream keyed by the three, so a
// sample's augmentation never depends on which thread, batch or rank handles it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace data {

// The generator for the augmentation of dataset sample `index` in `epoch`.
Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index);

// A rectangle of an image, in pixels.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// Building blocks. Geometric ones keep 8-bit HWC images; the float stage writes CHW.
// The h x w window at (top, left) of `image` padded by `padding` zero pixels on every side.
Image pad_crop(const Image& image, int64_t top, int64_t left, int64_t h, int64_t w, int64_t padding);
// pad_crop at a uniformly random position (torchvision RandomCrop with padding, fill 0).
Image random_crop(const Image& image, int64_t h, int64_t w, int64_t padding, Generator& gen);
Image hflip(const Image& image);
// Bilinear resize of `box` of the image to h x w: pixel centers at +0.5 (align_corners=false), edges clamped
// to the box, no antialiasing (like torchvision's tensor resize with antialias=False); weights in steps of
// 1/2048, the result rounded to 8 bits.
Image resize_bilinear(const Image& image, CropBox box, int64_t h, int64_t w);
Image resize_bilinear(const Image& image, int64_t h, int64_t w);
// Scales so that the shorter side becomes `size` (the longer one rounds down, as torchvision does).
Image resize_shorter(const Image& image, int64_t size);
// The centered h x w window (top = round((H - h) / 2)); zero padding where the image is smaller.
Image center_crop(const Image& image, int64_t h, int64_t w);
// torchvision's RandomResizedCrop box: up to 10 draws of an area fraction in [scale_min, scale_max] and a
// log-uniform aspect ratio in [ratio_min, ratio_max]; else the central crop with the ratio clamped.
CropBox sample_resized_crop_box(int64_t height, int64_t width, double scale_min, double scale_max, double ratio_min,
                                double ratio_max, Generator& gen);
// (x / 255 - mean[c]) / std[c] into `out` as [C, H, W]; mean and std hold one value per channel.
void to_normalized_chw(const Image& image, const std::vector<float>& mean, const std::vector<float>& std, float* out);
// Cutout (DeVries & Taylor 2017): zeroes a size x size square, clipped to the image, centered at a uniformly
// random pixel of a [C, H, W] float image.
void cutout(float* chw, int64_t channels, int64_t height, int64_t width, int64_t size, Generator& gen);

enum class StepKind { RandomCrop, RandomResizedCrop, HorizontalFlip, Resize, CenterCrop };

struct TransformStep {
  StepKind kind = StepKind::HorizontalFlip;
  int64_t height = 0, width = 0;  // output size; RandomCrop: 0 keeps the input size; Resize: width 0 = shorter side
  int64_t padding = 0;            // RandomCrop
  double p = 0.5;                 // HorizontalFlip
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // RandomResizedCrop
};

// A chain of geometric steps (in order), then normalization to float CHW, then cutout.
//
// Specs (Pipeline::parse) are comma-separated items, each a preset or a step:
//   presets:  none              x / 255
//             cifar-train       random-crop:pad=4, flip, normalize:cifar10
//             cifar-eval        normalize:cifar10
//             imagenet-train    random-resized-crop:size=224, flip, normalize:imagenet
//             imagenet-eval     resize:size=256, center-crop:size=224, normalize:imagenet
//   steps:    random-crop[:size=S|HxW][:pad=P]          (size defaults to the input's)
//             random-resized-crop:size=S[:scale=A-B][:ratio=A-B]
//             flip[:p=P]
//             resize:size=S (shorter side) | resize:size=HxW
//             center-crop:size=S|HxW
//             normalize:cifar10|cifar100|imagenet|fashion-mnist|mnist | normalize:mean=a/b/c:std=a/b/c
//             cutout:size=S
// e.g. "cifar-train,cutout:size=16". Three-channel statistics applied to a one-channel image use their average
// (so the presets also serve grayscale datasets).
class Pipeline {
 public:
  Pipeline();                                      // "none"
  static Pipeline parse(const std::string& spec);  // throws ValueError naming the bad item

  Pipeline& add(const TransformStep& step);
  Pipeline& normalize(std::vector<float> mean, std::vector<float> std);
  Pipeline& cutout(int64_t size);

  // Output [C, H, W] for an input of h x w x c.
  Shape output_shape(int64_t height, int64_t width, int64_t channels) const;
  // Transforms `image`, drawing randomness from `gen`, into `out` (numel of output_shape floats).
  void apply(const Image& image, Generator& gen, float* out) const;
  std::string describe() const;

 private:
  std::vector<TransformStep> steps_;
  std::vector<float> mean_, std_;
  std::vector<float> table_, gray_table_;  // f32 outputs per channel and 8-bit value
  int64_t cutout_ = 0;
};

}  // namespace data
}  // namespace tandem
