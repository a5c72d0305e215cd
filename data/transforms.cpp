// data/transforms.cpp: crop-box sampling, fused bilinear resample + flip + normalise.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/ops/common/rng.h"

namespace tandem::data {
namespace {
// Python's round(): halves go to the even neighbour (std::nearbyint in the default rounding mode).
// torchvision computes its boxes with it, so this keeps our boxes identical to theirs.
int py_round(double v) { return static_cast<int>(std::nearbyint(v)); }
}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  // Chained mixing instead of XOR so that (seed, epoch, index) triples cannot cancel each other.
  uint64_t k = rng::mix64(seed ^ 0x5deece66dULL);
  k = rng::mix64(k + static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ULL);
  key_ = rng::mix64(k + static_cast<uint64_t>(index));
}

double SampleRng::uniform() { return rng::uniform_f64(key_, counter_++); }

int64_t SampleRng::randint(int64_t lo, int64_t hi) {
  TANDEM_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, ")");
  int64_t v = lo + static_cast<int64_t>(uniform() * static_cast<double>(hi - lo));
  return std::min(v, hi - 1);
}

CropBox random_resized_crop_box(int width, int height, const TransformOptions& opt, SampleRng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(opt.ratio_min), log_hi = std::log(opt.ratio_max);
  // torchvision tries 10 times: enough that the fallback is rare for ImageNet-like aspect ratios.
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target_area = area * rng.uniform(opt.scale_min, opt.scale_max);
    double aspect = std::exp(rng.uniform(log_lo, log_hi));
    int w = py_round(std::sqrt(target_area * aspect));
    int h = py_round(std::sqrt(target_area / aspect));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int y = static_cast<int>(rng.randint(0, height - h + 1));
      int x = static_cast<int>(rng.randint(0, width - w + 1));
      return {x, y, w, h};
    }
  }
  // Fallback: the largest centred box whose ratio is clamped into [ratio_min, ratio_max].
  double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < opt.ratio_min) {
    h = py_round(w / opt.ratio_min);
  } else if (in_ratio > opt.ratio_max) {
    w = py_round(h * opt.ratio_max);
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

void resample_normalize(const Image& src, double x0, double y0, double sx, double sy, int out_w, int out_h,
                        bool flip, const TransformOptions& opt, float* out) {
  TANDEM_CHECK(src.width > 0 && src.height > 0, "resample of an empty image");
  // Fold /255, -mean and /std into one multiply-add per channel.
  float mul[3], add[3];
  for (int c = 0; c < 3; ++c) {
    mul[c] = 1.0f / (255.0f * opt.std[c]);
    add[c] = -opt.mean[c] / opt.std[c];
  }
  // Column weights are the same for every row: compute them once.
  std::vector<int> xa(out_w), xb(out_w);
  std::vector<float> xw(out_w);
  for (int ox = 0; ox < out_w; ++ox) {
    int col = flip ? out_w - 1 - ox : ox;
    double fx = std::clamp(x0 + (col + 0.5) * sx - 0.5, 0.0, static_cast<double>(src.width - 1));
    int a = static_cast<int>(fx);
    xa[ox] = a;
    xb[ox] = std::min(a + 1, src.width - 1);
    xw[ox] = static_cast<float>(fx - a);
  }
  for (int oy = 0; oy < out_h; ++oy) {
    double fy = std::clamp(y0 + (oy + 0.5) * sy - 0.5, 0.0, static_cast<double>(src.height - 1));
    int ya = static_cast<int>(fy);
    int yb = std::min(ya + 1, src.height - 1);
    float wy = static_cast<float>(fy - ya);
    const uint8_t* ra = src.at(0, ya);
    const uint8_t* rb = src.at(0, yb);
    float* o = out + static_cast<size_t>(oy) * out_w * 3;
    for (int ox = 0; ox < out_w; ++ox) {
      const uint8_t *p00 = ra + xa[ox] * 3, *p01 = ra + xb[ox] * 3;
      const uint8_t *p10 = rb + xa[ox] * 3, *p11 = rb + xb[ox] * 3;
      float wx = xw[ox];
      for (int c = 0; c < 3; ++c) {
        float top = p00[c] + wx * (p01[c] - p00[c]);
        float bot = p10[c] + wx * (p11[c] - p10[c]);
        o[ox * 3 + c] = (top + wy * (bot - top)) * mul[c] + add[c];
      }
    }
  }
}

void train_transform(const Image& src, const TransformOptions& opt, SampleRng& rng, float* out) {
  CropBox b = random_resized_crop_box(src.width, src.height, opt, rng);
  bool flip = rng.uniform() < opt.flip_prob;
  resample_normalize(src, b.x, b.y, static_cast<double>(b.w) / opt.size, static_cast<double>(b.h) / opt.size,
                     opt.size, opt.size, flip, opt, out);
}

void val_transform(const Image& src, const TransformOptions& opt, float* out) {
  // torchvision Resize(int): the shorter side becomes `target`, the longer int(target * long / short).
  const int target = opt.resize_size > 0 ? opt.resize_size : py_round(opt.size * opt.resize_ratio);
  int rw, rh;
  if (src.width <= src.height) {
    rw = target;
    rh = static_cast<int>(static_cast<int64_t>(target) * src.height / src.width);
  } else {
    rh = target;
    rw = static_cast<int>(static_cast<int64_t>(target) * src.width / src.height);
  }
  TANDEM_CHECK(rw >= opt.size && rh >= opt.size, "val transform: resize to ", rw, "x", rh,
               " is smaller than the crop ", opt.size, "; resize_ratio must be >= 1 (resize_size >= size)");
  // torchvision CenterCrop: offset int(round((resized - size) / 2)).
  int left = py_round((rw - opt.size) / 2.0);
  int top = py_round((rh - opt.size) / 2.0);
  double sx = static_cast<double>(src.width) / rw, sy = static_cast<double>(src.height) / rh;
  // Resized pixel (left + ox) has centre (left + ox + 0.5) * sx - 0.5 in the source.
  resample_normalize(src, left * sx, top * sy, sx, sy, opt.size, opt.size, false, opt, out);
}

}  // namespace tandem::data
