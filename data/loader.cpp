// data/loader.cpp: sample-level work claiming, slot reuse, ordered hand-out.
//
// Slot life cycle (slot s serves batches s, s + prefetch, s + 2*prefetch, ...):
//   1. the first worker to write a sample of batch b waits on the slot's copy fence (the copy of
//      batch b - prefetch must have left the buffer) and, for a CPU target, allocates the batch
//      tensors; the slot's own mutex makes this happen once;
//   2. workers write their rows and count them under mu_;
//   3. the consumer waits until all rows of b are counted, hands the batch out (async copy + fence
//      on CUDA), then advances consumed_, which opens the window for batch b + prefetch;
//   4. CUDA: if batch b + 1 is already complete, the consumer enqueues its copy right away, on the
//      copy stream (data/pinned.h), so it runs while the GPU computes the step on batch b; the
//      next hand-out only makes the compute stream wait for it. This costs one batch of device
//      memory more, as PyTorch's CUDA prefetchers do.
// mu_ is never held while waiting on the GPU, so a slow copy cannot stall the consumer.
#include "data/loader.h"

#include <chrono>
#include <cstdio>

#include "core/check.h"

namespace tandem::data {

struct Loader::Slot {
  std::mutex mu;               // serialises preparation (step 1)
  int64_t prepared = -1;       // batch whose buffers are ready to be written (guarded by mu)
  int64_t filling = -1;        // batch being counted (guarded by Loader::mu_)
  int64_t done = 0;            // rows of `filling` written (guarded by Loader::mu_)
  Tensor images, labels;       // CPU target: the batch tensors themselves
  HostBuffer pin_images, pin_labels;  // CUDA target: staging
  Tensor dev_images, dev_labels;  // CUDA target: the device batch whose copy is enqueued
  int64_t issued = -1;         // CUDA target: the batch in dev_* (consumer thread only)
  // Declared after the buffers it guards, so it is destroyed first: its destructor waits for the
  // copies before the staging and device buffers are freed.
  CopyFence fence;             // CUDA target: end of the copies out of the staging buffers
  float* image_ptr = nullptr;
  int64_t* label_ptr = nullptr;
};

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions opt)
    : dataset_(std::move(dataset)),
      opt_(opt),
      sampler_(SamplerOptions{dataset_ ? dataset_->size() : 0, opt.rank, opt.world_size, opt.shuffle, opt.seed,
                              !opt.pad_shards}) {
  TANDEM_CHECK(dataset_ != nullptr, "Loader needs a dataset");
  TANDEM_CHECK(opt_.batch_size > 0, "batch_size must be positive, got ", opt_.batch_size);
  TANDEM_CHECK(opt_.num_workers >= 0, "num_workers must be >= 0, got ", opt_.num_workers);
  TANDEM_CHECK(opt_.prefetch >= 1, "prefetch must be >= 1, got ", opt_.prefetch);
  TANDEM_CHECK(!opt_.drop_last || sampler_.num_samples(0) >= opt_.batch_size, "batch_size ", opt_.batch_size,
               " is larger than this rank's ", sampler_.num_samples(0),
               " samples per epoch, and only full batches are used, so there is none; use a smaller batch size or "
               "fewer ranks, or add data");
  if (opt_.device.is_cuda()) {
    TANDEM_CHECK(built_with_cuda(), "the loader targets ", opt_.device.str(), " but tandem was built without CUDA");
    stage_on_host_ = true;
  }
  sample_numel_ = shape_numel(dataset_->sample_shape());
  for (int s = 0; s < opt_.prefetch; ++s) {
    auto slot = std::make_unique<Slot>();
    if (stage_on_host_) {
      const auto rows = static_cast<size_t>(opt_.batch_size);
      slot->pin_images = HostBuffer(rows * sample_numel_ * sizeof(float), opt_.pin_memory);
      slot->pin_labels = HostBuffer(rows * sizeof(int64_t), opt_.pin_memory);
      slot->image_ptr = static_cast<float*>(slot->pin_images.data());
      slot->label_ptr = static_cast<int64_t*>(slot->pin_labels.data());
    }
    slots_.push_back(std::move(slot));
  }
}

Loader::~Loader() { stop_workers(); }

int64_t Loader::batches_per_epoch(int64_t start_offset) const {
  return sampler_.num_batches(start_offset, opt_.batch_size, opt_.drop_last);
}

int64_t Loader::batches_left() const { return started_ ? num_batches_ - consumed_ : batches_per_epoch(0); }

int64_t Loader::samples_consumed() const {
  if (!started_) return 0;
  return sampler_.position_after(start_offset_, std::min(consumed_ * opt_.batch_size, rank_samples_));
}

int64_t Loader::batch_rows(int64_t b) const { return std::min(opt_.batch_size, rank_samples_ - b * opt_.batch_size); }

int64_t Loader::skipped_files() const {
  std::lock_guard<std::mutex> lk(bad_mu_);
  return static_cast<int64_t>(bad_indices_.size());
}

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_space_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  stop_ = false;
}

void Loader::start_epoch(int64_t epoch, int64_t start_offset) {
  stop_workers();
  error_ = nullptr;
  key_ = SampleKey{opt_.seed, epoch};
  order_ = sampler_.indices(epoch, start_offset);  // checks the offset
  start_offset_ = start_offset;
  rank_samples_ = static_cast<int64_t>(order_.size());
  num_batches_ = batches_per_epoch(start_offset);
  consumed_ = 0;
  next_position_ = 0;
  started_ = true;
  for (auto& s : slots_) {
    s->prepared = -1;  // forces a fence wait before the next write
    // A copy enqueued early for the old epoch is dropped. Its device buffers are freed in compute-
    // stream order, so the compute stream must first wait for the copy still writing into them.
    if (s->issued >= 0) s->fence.compute_wait(opt_.device);
    s->issued = -1;
    s->dev_images = Tensor();
    s->dev_labels = Tensor();
    s->filling = -1;
    s->done = 0;
  }
  if (opt_.resident) return;  // batch 0 is built once, inline, on the first next()
  for (int w = 0; w < opt_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
}

int64_t batch_bytes(const Tensor& images, const Tensor& labels) {
  int64_t n = 0;
  for (const Tensor* x : {&images, &labels})
    if (x->defined()) n += static_cast<int64_t>(x->nbytes());
  return n;
}

int64_t Loader::bytes_held() const {
  int64_t total = have_resident_ ? batch_bytes(resident_batch_.images, resident_batch_.labels) : 0;
  for (const auto& s : slots_) {
    {
      std::lock_guard<std::mutex> lk(s->mu);  // a worker may be allocating this slot's batch
      total += batch_bytes(s->images, s->labels);
    }
    total += batch_bytes(s->dev_images, s->dev_labels);  // written by the consumer thread only
  }
  return total;
}

void Loader::report_bad(int64_t index, const std::string& reason) {
  bool first;
  {
    std::lock_guard<std::mutex> lk(bad_mu_);
    first = bad_indices_.insert(index).second;
  }
  const std::string name = dataset_->describe(index);
  if (opt_.strict)
    TANDEM_THROW("unreadable image ", name, ": ", reason,
                 ". Fix or remove the file, or drop [strict] to skip such files with a warning.");
  if (first)
    std::fprintf(stderr, "warning: skipping unreadable image %s: %s (replaced by the next readable sample)\n",
                 name.c_str(), reason.c_str());
}

void Loader::prepare_slot(Slot& slot, int64_t b) {
  std::lock_guard<std::mutex> lk(slot.mu);
  if (slot.prepared == b) return;
  slot.fence.wait();  // CUDA: the copy of the batch that used this buffer before has finished
  if (!stage_on_host_) {
    const int64_t rows = batch_rows(b);
    Shape shape{rows};
    for (int64_t d : dataset_->sample_shape()) shape.push_back(d);
    slot.images = Tensor::empty(shape, DType::F32, Device::cpu());
    slot.labels = Tensor::empty({rows}, DType::I64, Device::cpu());
    slot.image_ptr = slot.images.data<float>();
    slot.label_ptr = slot.labels.data<int64_t>();
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    slot.filling = b;
    slot.done = 0;
  }
  slot.prepared = b;
}

void Loader::fill_sample(int64_t position, Slot& slot) {
  const int64_t row = position % opt_.batch_size;
  float* out = slot.image_ptr + row * sample_numel_;
  const int64_t n = dataset_->size();
  const int64_t first = order_[static_cast<size_t>(position)];
  // Replacement policy: the next readable sample in dataset order. Bad files are re-tried each
  // time they come up (cheap: they fail fast), which keeps the outcome independent of history.
  for (int64_t attempt = 0; attempt < n; ++attempt) {
    const int64_t candidate = (first + attempt) % n;
    int64_t label = 0;
    std::string reason;
    if (dataset_->get(candidate, key_, out, &label, &reason)) {
      // The one place labels are range-checked for CUDA training: here they are still on the host,
      // so the loss kernel never has to copy them back and sync (core/ops/loss/loss.h).
      TANDEM_CHECK(label >= 0 && label < dataset_->num_classes(), "data: ", dataset_->describe(candidate),
                   " has label ", label, ", outside [0, ", dataset_->num_classes(),
                   "); the dataset's labels must be class indices counted from 0");
      slot.label_ptr[row] = label;
      return;
    }
    report_bad(candidate, reason.empty() ? "unknown reason" : reason);
  }
  TANDEM_THROW("none of the ", n, " samples of the dataset could be read; check the data folder");
}

void Loader::mark_done(Slot& slot, int64_t b, int64_t count) {
  bool complete;
  {
    std::lock_guard<std::mutex> lk(mu_);
    slot.done += count;
    complete = slot.filling == b && slot.done == batch_rows(b);
  }
  if (complete) cv_ready_.notify_all();
}

void Loader::worker_loop() {
  const int64_t positions = std::min<int64_t>(static_cast<int64_t>(order_.size()), num_batches_ * opt_.batch_size);
  const auto depth = static_cast<int64_t>(slots_.size());
  try {
    for (;;) {
      const int64_t p = next_position_.fetch_add(1);
      if (p >= positions) return;
      const int64_t b = p / opt_.batch_size;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_space_.wait(lk, [&] { return stop_ || b < consumed_ + depth; });
        if (stop_) return;
      }
      Slot& slot = *slots_[static_cast<size_t>(b % depth)];
      prepare_slot(slot, b);
      fill_sample(p, slot);
      mark_done(slot, b, 1);
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;
    }
    cv_space_.notify_all();
    cv_ready_.notify_all();
  }
}

void Loader::produce_inline(int64_t b) {
  Slot& slot = *slots_[static_cast<size_t>(b % static_cast<int64_t>(slots_.size()))];
  prepare_slot(slot, b);
  const int64_t rows = batch_rows(b);
  for (int64_t r = 0; r < rows; ++r) fill_sample(b * opt_.batch_size + r, slot);
  mark_done(slot, b, rows);
}

Batch Loader::hand_out(Slot& slot, int64_t b) {
  Batch batch;
  batch.index = b;
  if (!stage_on_host_) {
    batch.images = std::move(slot.images);
    batch.labels = std::move(slot.labels);
    slot.images = Tensor();
    slot.labels = Tensor();
    return batch;
  }
  if (slot.issued != b) issue_copy(slot, b);
  batch.images = std::move(slot.dev_images);
  batch.labels = std::move(slot.dev_labels);
  slot.dev_images = Tensor();
  slot.dev_labels = Tensor();
  slot.issued = -1;
  // Before any kernel of the step that reads the batch is enqueued: the compute stream waits for
  // the copy (an event; the host does not block).
  slot.fence.compute_wait(opt_.device);
  return batch;
}

void Loader::issue_copy(Slot& slot, int64_t b) {
  const int64_t rows = batch_rows(b);
  Shape shape{rows};
  for (int64_t d : dataset_->sample_shape()) shape.push_back(d);
  slot.dev_images = Tensor::empty(shape, DType::F32, opt_.device);
  slot.dev_labels = Tensor::empty({rows}, DType::I64, opt_.device);
  copy_stream_wait_compute(opt_.device);  // the allocations above are compute-stream ordered
  copy_to_device_async(slot.pin_images.data(), slot.dev_images);
  copy_to_device_async(slot.pin_labels.data(), slot.dev_labels);
  slot.fence.record(opt_.device);
  slot.issued = b;
}

void Loader::issue_early(int64_t b) {
  if (!stage_on_host_ || opt_.num_workers == 0 || b >= num_batches_) return;
  Slot& slot = *slots_[static_cast<size_t>(b % static_cast<int64_t>(slots_.size()))];
  {
    std::lock_guard<std::mutex> lk(mu_);  // the workers' row counts; complete means nobody writes it
    if (!(slot.filling == b && slot.done == batch_rows(b))) return;
  }
  if (slot.issued != b) issue_copy(slot, b);
}

bool Loader::next(Batch& out) {
  if (!started_) start_epoch(0);
  if (consumed_ >= num_batches_) return false;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  if (opt_.resident) {
    if (!have_resident_) {
      // Always epoch 0's first batch, whatever epoch and offset this run starts at: a resumed run
      // then trains on the same fixed batch as the uninterrupted one (it used to take its start's).
      const SampleKey key = key_;
      const int64_t rank_samples = rank_samples_;
      std::vector<int64_t> order = std::move(order_);
      key_ = SampleKey{opt_.seed, 0};
      order_ = sampler_.indices(0, 0);
      rank_samples_ = static_cast<int64_t>(order_.size());
      produce_inline(0);
      resident_batch_ = hand_out(*slots_[0], 0);
      key_ = key, order_ = std::move(order), rank_samples_ = rank_samples;
      have_resident_ = true;
    }
    out = resident_batch_;
    out.index = consumed_++;
    out.wait_ms = elapsed_ms();
    return true;
  }
  const int64_t b = consumed_;
  Slot& slot = *slots_[static_cast<size_t>(b % static_cast<int64_t>(slots_.size()))];
  if (opt_.num_workers == 0) {
    produce_inline(b);
  } else {
    std::unique_lock<std::mutex> lk(mu_);
    cv_ready_.wait(lk, [&] { return error_ || (slot.filling == b && slot.done == batch_rows(b)); });
    if (!(slot.filling == b && slot.done == batch_rows(b))) std::rethrow_exception(error_);
  }
  out = hand_out(slot, b);
  out.wait_ms = elapsed_ms();
  {
    std::lock_guard<std::mutex> lk(mu_);
    consumed_ = b + 1;
  }
  cv_space_.notify_all();
  issue_early(b + 1);  // step 4: the next batch's copy overlaps the step on this one
  return true;
}

}  // namespace tandem::data
