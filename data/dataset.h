// data/dataset.h: the interface the loader reads samples through.
//
// A Dataset is an indexable collection of (image, label) pairs whose images come out already
// transformed into a fixed shape (sample_shape(), HWC f32). Reads are const and thread-safe: the
// loader calls get() from several worker threads at once.
//
// Randomness is passed in, not owned: get() receives the (seed, epoch) key and derives everything
// else from the sample index (see data/transforms.h SampleRng), so the same sample is produced no
// matter which thread, worker count or rank reads it.
//
// A sample that cannot be produced (corrupt or unreadable file) is reported, not thrown: get()
// returns false with a reason, and the loader applies its skip/strict policy (data/loader.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tandem::data {

// The per-epoch randomness key shared by all samples of an epoch.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int num_classes() const = 0;
  // Shape of one transformed sample, {H, W, 3}.
  virtual Shape sample_shape() const = 0;
  // Writes sample `index` (shape_numel(sample_shape()) floats) into out and its class into *label.
  // Returns false and sets *error when the sample cannot be read; out is then unspecified.
  virtual bool get(int64_t index, const SampleKey& key, float* out, int64_t* label, std::string* error) const = 0;
  // A name for messages: the file path for file-backed datasets.
  virtual std::string describe(int64_t index) const { return "sample " + std::to_string(index); }
};

}  // namespace tandem::data
