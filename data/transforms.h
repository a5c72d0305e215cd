// data/transforms.h: ImageNet train/val preprocessing, from decoded RGB bytes to normalised NHWC f32.
//
// Train (torchvision RandomResizedCrop + RandomHorizontalFlip + Normalize):
//   - the crop box follows torchvision's algorithm exactly: up to 10 attempts drawing an area
//     fraction in [scale_min, scale_max] and a log-uniform aspect ratio in [ratio_min, ratio_max];
//     the first box that fits is used at a uniform position; otherwise a centred box with the
//     ratio clamped into range (the "fallback" centre crop);
//   - the box is resized to size x size with bilinear interpolation (half-pixel centres, edge
//     clamping, no antialiasing: torchvision's tensor path with antialias=False);
//   - flipped horizontally with probability flip_prob.
// Val: resize the shorter side to resize_size, or round(size * resize_ratio) when that is 0 (256 for
//   size 224, the torchvision convention), keeping the aspect ratio, then centre-crop size x size
//   (torchvision's reference scripts' val resize and crop sizes, bilinear). Resize and crop are fused
//   into one bilinear resample, so no intermediate image is materialised.
// Both then map v in [0,255] to (v/255 - mean[c]) / std[c] with ImageNet's mean and std.
//
// Randomness: every draw comes from a SampleRng keyed by (seed, epoch, sample index), so a sample
// looks the same whichever worker thread or rank transforms it.
#pragma once
#include <array>
#include <cstdint>

#include "data/decode.h"

namespace tandem::data {

struct TransformOptions {
  int size = 224;                        // output height and width
  double resize_ratio = 256.0 / 224.0;   // val: shorter side is resized to round(size * resize_ratio)
  int resize_size = 0;                   // val: ... or to this many pixels when > 0 (torchvision's val resize size)
  double scale_min = 0.08, scale_max = 1.0;         // train: crop area fraction (torchvision)
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // train: crop aspect ratio w/h (torchvision)
  double flip_prob = 0.5;                // train: probability of a horizontal flip
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // ImageNet RGB mean (of [0,1] values)
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};   // ImageNet RGB standard deviation
};

// Counter-based per-sample random stream (see core/ops/common/rng.h): draw k is a pure function of
// (seed, epoch, index, k).
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  double uniform();                          // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi), like torch.randint

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// A crop box in source pixels: columns [x, x+w), rows [y, y+h).
struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;
  bool operator==(const CropBox&) const = default;
};

// torchvision.transforms.RandomResizedCrop.get_params for an image of width x height.
CropBox random_resized_crop_box(int width, int height, const TransformOptions& opt, SampleRng& rng);

// Bilinear resample of src into an out_w x out_h normalised HWC f32 image. Output pixel (ox, oy)
// samples source coordinate (x0 + (ox + 0.5) * sx - 0.5, y0 + (oy + 0.5) * sy - 0.5), clamped to
// the image; with flip, column ox reads what column out_w-1-ox would have.
void resample_normalize(const Image& src, double x0, double y0, double sx, double sy, int out_w, int out_h,
                        bool flip, const TransformOptions& opt, float* out);

// Train transform of one image into out (size * size * 3 floats).
void train_transform(const Image& src, const TransformOptions& opt, SampleRng& rng, float* out);
// Val transform (deterministic) of one image into out (size * size * 3 floats).
void val_transform(const Image& src, const TransformOptions& opt, float* out);

}  // namespace tandem::data
