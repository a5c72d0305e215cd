// data/loader.h: multi-threaded batch loader with a bounded prefetch window.
//
// Work is split per sample, not per batch: workers claim the next sample position of the epoch
// from a shared counter and write it straight into the staging slot of its batch, so a single
// large batch is decoded by all workers at once and the window can stay short. A worker may run
// at most `prefetch` batches ahead of the consumer; past that it blocks (bounded memory).
//
// Determinism: sample position p of epoch e always holds dataset index indices(e, offset)[p] transformed
// with key (seed, e), whatever thread produced it, so batches are bit-identical for any
// num_workers (0 included) and any scheduling. The transform's randomness is keyed by (seed, e,
// dataset index) (data/dataset.h), never by rank or position, so a sample is augmented the same way
// whichever rank, batch or resume point reads it.
//
// Progress is counted in samples of the epoch's global order (data/sampler.h), not in steps:
// samples_consumed() is the start offset plus the positions all ranks' batches have taken so far,
// and start_epoch(e, offset) continues an epoch from there on any world size and batch size: the
// samples not yet read this epoch, in the same global order, each exactly once (padding and
// drop_last aside). Store (epoch, samples_consumed()) in a checkpoint, never a step count; once an
// epoch is done (batches_left() == 0) store (epoch + 1, 0) instead: a finished epoch's count can be
// short of the dataset size (drop_last, the cut), and resuming from it would read the tail that the
// finished epoch dropped.
//
// Unreadable samples (corrupt, truncated, missing file): with strict = false the sample is replaced
// by the next readable one in dataset order (index+1, index+2, ... wrapping around), with that
// sample's own label and transform; each bad file is warned about once on stderr (path and reason)
// and counted (skipped_files()). Batch shapes never change. With strict = true the first bad file
// throws tandem::Error naming it. Errors raised in a worker are rethrown by next().
//
// Devices: for a CPU target each batch is a fresh host tensor. For a CUDA target samples are
// staged in pinned host buffers (data/pinned.h) and copied on a copy stream of their own: next()
// also enqueues the following batch's copy when it is ready, so that copy overlaps the step's
// kernels, and the compute stream waits for a batch's copy by an event, never a host sync.
// Staging memory is prefetch x batch_size x H x W x 3 x 4 bytes (2 x 256 x 224^2 x 12 = 308 MB at
// the defaults used for ImageNet ResNet-50).
//
// One consumer: next() and start_epoch() must be called from a single thread (the training loop).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/pinned.h"
#include "data/sampler.h"

namespace tandem::data {

struct LoaderOptions {
  int64_t batch_size = 32;   // per rank
  int num_workers = 4;       // decoding threads; 0 produces each batch on the caller's thread
  int prefetch = 2;          // batches that may be ready or in flight ahead of the consumer (>= 1)
  bool shuffle = true;       // reshuffle every epoch (DistributedSampler); false for evaluation
  uint64_t seed = 0;         // shuffling and augmentation; must be equal on all ranks
  int rank = 0;              // this process's shard ...
  int world_size = 1;        // ... of this many
  bool pad_shards = true;    // sampler: pad by wrap-around (true) or cut (false) to divide evenly
  bool drop_last = true;     // drop the epoch's last incomplete batch (keeps every step's shape)
  Device device = Device::cpu();  // where batches are delivered
  bool pin_memory = true;    // pinned staging when the device is CUDA (ignored on CPU)
  bool strict = false;       // a corrupt/unreadable file throws instead of being skipped
  bool resident = false;     // compute-only benchmarks: build batch 0 once, keep it on the device
                             // and return it every step (no decoding, no copies, zero wait)
};

struct Batch {
  Tensor images;        // [N, H, W, 3] f32 on LoaderOptions::device
  Tensor labels;        // [N] i64 on the same device
  int64_t index = 0;    // batch number within the epoch, counted from its start offset
  double wait_ms = 0;   // time next() blocked for this batch (data wait, not compute)
};

// Bytes of a batch's image and label tensors (an undefined tensor counts 0): what a batch, or a
// buffer shaped like one, holds on its allocator. For memory ledgers (Loader::bytes_held).
int64_t batch_bytes(const Tensor& images, const Tensor& labels);

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions opt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) an epoch: cancels unfinished work and reshuffles. start_offset is the
  // number of global samples of the epoch's order already consumed (samples_consumed() of the run
  // being resumed, on any world size and batch size; in [0, dataset size]); the epoch then reads
  // only the positions from there on. next() calls start_epoch(0) itself if no epoch was started.
  void start_epoch(int64_t epoch, int64_t start_offset = 0);
  // The next batch of the current epoch; false when the epoch is done. Batch::index counts from 0
  // at the start offset.
  bool next(Batch& out);

  // Batches this rank reads in an epoch started at start_offset (0: a whole epoch).
  int64_t batches_per_epoch(int64_t start_offset = 0) const;
  // Batches next() still returns in the current epoch (a whole epoch's before any start_epoch).
  int64_t batches_left() const;
  // Global samples of the current epoch's order consumed so far: the start offset plus, for every
  // batch handed out, its rows x world_size (all ranks read in lockstep), capped at the dataset size
  // (the padding repeats samples already counted). Equal on every rank. The value to checkpoint.
  int64_t samples_consumed() const;
  int64_t samples_per_epoch() const { return sampler_.num_samples(0); }  // this rank's, whole epoch
  // Distinct unreadable files met so far (skipped, or the one that threw in strict mode).
  int64_t skipped_files() const;
  // Bytes of the batch tensors the loader holds now on its target device's allocator: batches being
  // filled or ready ahead of the consumer, copies enqueued early, the resident batch. Not the pinned
  // staging (not a device allocation) nor batches already handed out. For memory ledgers, which must
  // not count prefetched data as model state. Consumer thread only, like next().
  int64_t bytes_held() const;
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return opt_; }

 private:
  struct Slot;
  int64_t batch_rows(int64_t b) const;       // samples in batch b
  void fill_sample(int64_t position, Slot& slot);
  void prepare_slot(Slot& slot, int64_t b);  // called without mu_: may wait on a copy fence
  void mark_done(Slot& slot, int64_t b, int64_t count);
  void report_bad(int64_t index, const std::string& reason);
  void worker_loop();
  void stop_workers();
  void produce_inline(int64_t b);
  Batch hand_out(Slot& slot, int64_t b);
  void issue_copy(Slot& slot, int64_t b);  // CUDA: device tensors + copy on the copy stream + fence
  void issue_early(int64_t b);             // CUDA: issue_copy for b now if its rows are all written

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions opt_;
  DistributedSampler sampler_;
  int64_t sample_numel_ = 0;
  bool stage_on_host_ = false;  // CUDA target: stage in pinned slots and copy

  // Epoch state. mu_ guards everything below except next_position_ (atomic claims).
  SampleKey key_{};
  std::vector<int64_t> order_;
  int64_t start_offset_ = 0;  // global samples consumed before this epoch's start_epoch
  int64_t rank_samples_ = 0;  // order_.size(): this rank's positions left in the epoch
  int64_t num_batches_ = 0;
  bool started_ = false;
  int64_t consumed_ = 0;  // batches handed to the consumer this epoch
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> next_position_{0};
  bool stop_ = false;
  std::exception_ptr error_;
  mutable std::mutex mu_;
  std::condition_variable cv_space_;  // workers wait for a free slot
  std::condition_variable cv_ready_;  // the consumer waits for a complete batch

  mutable std::mutex bad_mu_;
  std::set<int64_t> bad_indices_;  // warned about once each

  Batch resident_batch_;
  bool have_resident_ = false;
};

}  // namespace tandem::data
