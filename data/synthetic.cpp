// data/synthetic.cpp: counter-based generation of labels and pixels.
#include "data/synthetic.h"

#include "core/check.h"
#include "core/ops/common/rng.h"

namespace tandem::data {
namespace {
// Distinct stream keys for labels, prototypes and noise, so the three never share counter values.
constexpr uint64_t kLabelStream = 0x6c6162656cULL, kProtoStream = 0x70726f746fULL, kNoiseStream = 0x6e6f697365ULL;
}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions opt) : opt_(opt) {
  TANDEM_CHECK(opt_.size > 0 && opt_.num_classes > 0 && opt_.image_size > 0,
               "synthetic dataset needs positive size, num_classes and image_size (got ", opt_.size, ", ",
               opt_.num_classes, ", ", opt_.image_size, ")");
}

int64_t SyntheticDataset::label_of(int64_t index) const {
  uint64_t r = rng::mix64(rng::mix64(opt_.seed ^ kLabelStream) + static_cast<uint64_t>(index));
  return static_cast<int64_t>(r % static_cast<uint64_t>(opt_.num_classes));
}

bool SyntheticDataset::get(int64_t index, const SampleKey&, float* out, int64_t* label, std::string*) const {
  TANDEM_CHECK(index >= 0 && index < opt_.size, "synthetic index ", index, " out of range [0, ", opt_.size, ")");
  int64_t y = label_of(index);
  uint64_t proto_key = rng::mix64(opt_.seed ^ kProtoStream) + static_cast<uint64_t>(y);
  uint64_t noise_key = rng::mix64(rng::mix64(opt_.seed ^ kNoiseStream) + static_cast<uint64_t>(index));
  const int64_t n = shape_numel(sample_shape());
  for (int64_t k = 0; k < n; ++k) {
    float proto = 2.0f * rng::uniform(proto_key, k) - 1.0f;
    float noise = 2.0f * rng::uniform(noise_key, k) - 1.0f;
    out[k] = proto + opt_.noise * noise;
  }
  *label = y;
  return true;
}

}  // namespace tandem::data
