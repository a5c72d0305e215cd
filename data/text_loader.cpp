// data/text_loader.cpp: sampler order -> masked [B, L] tensors.
#include "data/text_loader.h"

#include <algorithm>

#include "core/check.h"

namespace tandem::data {

namespace {
SamplerOptions sampler_options(const MlmDataset& d, const TextLoaderOptions& o) {
  SamplerOptions s;
  s.dataset_size = d.size();
  s.rank = o.rank;
  s.world_size = o.world_size;
  s.shuffle = o.shuffle;
  s.seed = o.seed;
  s.drop_last = !o.pad_shards;
  return s;
}
}  // namespace

TextLoader::TextLoader(std::shared_ptr<const MlmDataset> dataset, TextLoaderOptions opt)
    : dataset_(std::move(dataset)), opt_(opt), sampler_(sampler_options(*dataset_, opt_)) {
  TANDEM_CHECK(opt_.batch_size > 0, "text loader: batch_size must be positive, got ", opt_.batch_size);
  TANDEM_CHECK(batches_per_epoch() > 0, "text loader: ", sampler_.num_samples(0), " sequences per rank make no ",
               "full batch of ", opt_.batch_size, " (only full batches are used); use a smaller batch size, shorter ",
               "sequences or fewer ranks, or add text");
}

int64_t TextLoader::batches_per_epoch(int64_t start_offset) const {
  return sampler_.num_batches(start_offset, opt_.batch_size, opt_.drop_last);
}

int64_t TextLoader::batches_left() const { return started_ ? num_batches_ - next_batch_ : batches_per_epoch(0); }

int64_t TextLoader::samples_consumed() const {
  if (!started_) return 0;
  return sampler_.position_after(start_offset_, std::min(next_batch_ * opt_.batch_size, static_cast<int64_t>(order_.size())));
}

void TextLoader::start_epoch(int64_t epoch, int64_t start_offset) {
  epoch_ = epoch;
  order_ = sampler_.indices(epoch, start_offset);  // checks the offset
  start_offset_ = start_offset;
  num_batches_ = batches_per_epoch(start_offset);
  next_batch_ = 0;
  started_ = true;
}

void TextLoader::skip(int64_t batches) {
  if (!started_) start_epoch(0);
  TANDEM_CHECK(batches >= 0, "text loader: cannot skip ", batches, " batches");
  next_batch_ = std::min(num_batches_, next_batch_ + batches);
}

bool TextLoader::next(TextBatch& out) {
  if (!started_) start_epoch(0);
  if (next_batch_ >= num_batches_) return false;
  out = build(epoch_, order_, next_batch_++);
  return true;
}

TextBatch TextLoader::batch(int64_t epoch, int64_t b) const {
  TANDEM_CHECK(b >= 0 && b < batches_per_epoch(), "text loader: batch ", b, " is outside [0, ",
               batches_per_epoch(), ")");
  return build(epoch, sampler_.indices(epoch), b);
}

TextBatch TextLoader::build(int64_t epoch, const std::vector<int64_t>& order, int64_t b) const {
  const int64_t first = b * opt_.batch_size;
  const int64_t rows = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(order.size()) - first);
  const int64_t L = dataset_->seq_len();
  Tensor ids = Tensor::empty({rows, L}, DType::I64), attn = Tensor::empty({rows, L}, DType::I64);
  Tensor labels = Tensor::empty({rows, L}, DType::I64);
  TextBatch out;
  const SampleKey key{opt_.seed, epoch};
  for (int64_t r = 0; r < rows; ++r)
    out.masked += dataset_->get(order[static_cast<size_t>(first + r)], key, ids.data<int64_t>() + r * L,
                                attn.data<int64_t>() + r * L, labels.data<int64_t>() + r * L);
  Tensor types = Tensor::zeros({rows, L}, DType::I64);
  const bool move = opt_.device != Device::cpu();
  out.input_ids = move ? ids.to(opt_.device) : ids;
  out.attention_mask = move ? attn.to(opt_.device) : attn;
  out.token_type_ids = move ? types.to(opt_.device) : types;
  out.labels = move ? labels.to(opt_.device) : labels;
  out.index = b;
  return out;
}

}  // namespace tandem::data
