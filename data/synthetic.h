// data/synthetic.h: a decode-free dataset for benchmarks and tests.
//
// Sample i is a pure function of (seed, i): its label is hash(seed, i) mod num_classes and its
// pixels are a class prototype (a fixed random image per class) plus per-sample noise, both drawn
// from the counter-based stream of core/ops/common/rng.h. Because nothing depends on the rank or thread, a
// distributed run sharded by DistributedSampler sees exactly the global data of a single-process
// run, and a model can actually learn it (loss goes down), which pure noise would not allow.
// Values are already "normalised" (roughly zero mean, unit variance); the SampleKey (epoch) is
// ignored, so every epoch shows the same images, like a fixed dataset.
//
// For compute-only benchmarks (tf_cnn_benchmarks' synthetic mode) use LoaderOptions::resident:
// the loader then produces one batch once, keeps it on the device and hands it out every step.
#pragma once
#include "data/dataset.h"

namespace tandem::data {

struct SyntheticOptions {
  int64_t size = 1281167;  // samples: ImageNet-1k's training-set size, so epochs have the usual length
  int num_classes = 1000;  // ImageNet-1k
  int image_size = 224;    // samples are image_size x image_size x 3
  uint64_t seed = 0;
  float noise = 0.5f;      // per-sample noise amplitude relative to the class prototype (both ~U(-1,1))
};

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions opt = {});
  int64_t size() const override { return opt_.size; }
  int num_classes() const override { return opt_.num_classes; }
  Shape sample_shape() const override { return {opt_.image_size, opt_.image_size, 3}; }
  bool get(int64_t index, const SampleKey& key, float* out, int64_t* label, std::string* error) const override;
  // The label of sample i without generating its pixels.
  int64_t label_of(int64_t index) const;

 private:
  SyntheticOptions opt_;
};

}  // namespace tandem::data
