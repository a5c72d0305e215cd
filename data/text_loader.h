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
// exactly the sequences and masks of one rank reading N*B per step.
//
// Resume: progress is counted in sequences of the epoch's global order (data/sampler.h), not in
// steps. samples_consumed() is the start offset plus every batch's rows x world_size so far, and
// start_epoch(e, offset) continues the epoch from there on any world size and batch size: the
// sequences not yet read this epoch, in the same global order, each once (padding and drop_last
// aside); once the epoch is done (batches_left() == 0), checkpoint (e + 1, 0) instead, as
// data/loader.h explains. Masks are keyed by (seed, e, sequence index), never by rank or position, so a resumed run
// masks each sequence as the uninterrupted one does. skip(k) is the same-world-size, same-batch
// shortcut: start_epoch(e) then skip(k) equals start_epoch(e, k * B * world_size), with the batch
// numbers of the uninterrupted run.
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
  int64_t index = 0;      // batch number within the epoch, counted from its start offset
  int64_t masked = 0;     // positions with a label (the denominator of masked-token accuracy)
};

class TextLoader {
 public:
  TextLoader(std::shared_ptr<const MlmDataset> dataset, TextLoaderOptions opt);

  // Starts epoch `epoch` after the first start_offset sequences of its global order (the
  // samples_consumed() of the run being resumed, on any world size and batch size; in [0, size()]).
  void start_epoch(int64_t epoch, int64_t start_offset = 0);
  // Moves past `batches` batches of the current epoch without building them (a mid-epoch resume on
  // the same world size and batch size; see the contract above).
  void skip(int64_t batches);
  // The next batch of the current epoch; false when the epoch is done. Calls start_epoch(0) if no
  // epoch was started. TextBatch::index counts from 0 at the start offset (skip() advances it).
  bool next(TextBatch& out);
  // Batch b of a whole epoch e on this rank, independent of the loader's position.
  TextBatch batch(int64_t epoch, int64_t b) const;

  // Batches this rank reads in an epoch started at start_offset (0: a whole epoch).
  int64_t batches_per_epoch(int64_t start_offset = 0) const;
  // Batches next() still returns in the current epoch (a whole epoch's before any start_epoch).
  int64_t batches_left() const;
  // Global sequences of the current epoch's order consumed so far (start offset + rows read x
  // world_size, capped at size()): equal on every rank, the value to checkpoint.
  int64_t samples_consumed() const;
  int64_t samples_per_epoch() const { return sampler_.num_samples(0); }  // this rank's, whole epoch
  const MlmDataset& dataset() const { return *dataset_; }
  const TextLoaderOptions& options() const { return opt_; }

 private:
  TextBatch build(int64_t epoch, const std::vector<int64_t>& order, int64_t b) const;

  std::shared_ptr<const MlmDataset> dataset_;
  TextLoaderOptions opt_;
  DistributedSampler sampler_;
  int64_t epoch_ = 0;
  bool started_ = false;
  int64_t start_offset_ = 0;    // global sequences consumed before start_epoch
  std::vector<int64_t> order_;  // this rank's sequence indices for epoch_ from start_offset_ on
  int64_t num_batches_ = 0;     // batches in order_
  int64_t next_batch_ = 0;
};

}  // namespace tandem::data
