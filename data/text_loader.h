// data/text_loader.h: batches [B, seq_len] of masked sequences for one rank (the text counterpart
// of data/loader.h).
//
// The image Loader does not fit text: its Dataset produces f32 images and one label per sample,
// while a text sample is four i64 rows. Text batches are also cheap (a copy and ~20 random draws per
// sequence), so this loader builds each batch on the caller's thread, with no workers or prefetch.
//
// Order and sharding: a DistributedSampler (data/sampler.h) over the packed sequences, with the
// options' seed, rank and world_size: ranks read disjoint strided slices of one global permutation
// per epoch. Batch b of epoch e on a rank is its sequences indices(e)[b*B, (b+1)*B), each masked with
// key (seed, e) (data/text_dataset.h), so batch(e, b) is a pure function: N ranks together see
// exactly the sequences and masks of one rank reading N*B per step, and a run resumed at batch k
// (start_epoch(e) then skip(k)) continues with the batches an uninterrupted run would have seen.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/sampler.h"
#include "data/text_dataset.h"

namespace tandem::data {

struct TextLoaderOptions {
  int64_t batch_size = 32;   // sequences per rank per step
  bool shuffle = true;       // reshuffle every epoch; false (dataset order) for held-out evaluation
  uint64_t seed = 0;         // shuffling and masking; must be equal on all ranks
  int rank = 0;              // this process's shard ...
  int world_size = 1;        // ... of this many
  bool pad_shards = true;    // sampler: pad by wrap-around (true) or cut (false) to divide evenly
  bool drop_last = true;     // drop the epoch's last incomplete batch (every step has B rows)
  Device device = Device::cpu();  // where batches are delivered
};

struct TextBatch {
  Tensor input_ids;       // [B, L] i64: masked tokens
  Tensor attention_mask;  // [B, L] i64: 1 = token, 0 = [PAD]
  Tensor token_type_ids;  // [B, L] i64: zeros (one segment; there is no next-sentence task)
  Tensor labels;          // [B, L] i64: original id where masked, kIgnoreIndex (-100) elsewhere
  int64_t index = 0;      // batch number within the epoch
  int64_t masked = 0;     // positions with a label (the denominator of masked-token accuracy)
};

class TextLoader {
 public:
  TextLoader(std::shared_ptr<const MlmDataset> dataset, TextLoaderOptions opt);

  // Starts epoch `epoch` at its first batch.
  void start_epoch(int64_t epoch);
  // Moves past `batches` batches of the current epoch without building them (mid-epoch resume).
  void skip(int64_t batches);
  // The next batch of the current epoch; false when the epoch is done. Calls start_epoch(0) if no
  // epoch was started.
  bool next(TextBatch& out);
  // Batch b of epoch e on this rank, independent of the loader's position.
  TextBatch batch(int64_t epoch, int64_t b) const;

  int64_t batches_per_epoch() const;
  int64_t samples_per_epoch() const { return sampler_.num_samples(); }  // this rank's
  const MlmDataset& dataset() const { return *dataset_; }
  const TextLoaderOptions& options() const { return opt_; }

 private:
  TextBatch build(int64_t epoch, const std::vector<int64_t>& order, int64_t b) const;

  std::shared_ptr<const MlmDataset> dataset_;
  TextLoaderOptions opt_;
  DistributedSampler sampler_;
  int64_t epoch_ = 0;
  bool started_ = false;
  std::vector<int64_t> order_;  // this rank's sequence indices for epoch_
  int64_t next_batch_ = 0;
};

}  // namespace tandem::data
