// tests/test_data_resume.cpp: progress in samples of the epoch's global order (data/sampler.h).
// k batches at (world W, batch B), then a resume at (W', B') from samples_consumed(), read every
// sample of the epoch once, in the epoch's global order, for W, W' in {1, 2, 4} and B, B' in
// {2, 3, 5}, with padding, cut and drop_last; the ranks' first k batches are the order's prefix;
// on the same W and B the resumed ranks read exactly the uninterrupted ranks' batches. Samples
// are identified by a dataset whose label is the sample's index, so nothing is decoded. The
// per-sample augmentation check (same crop at any W) is in test_data_loader.cpp, the text loader's
// in test_text_dataset.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.h"
#include "data/loader.h"
#include "data/sampler.h"

using namespace tandem;
using namespace tandem::data;

namespace {

// Sample i is three copies of i, labelled i (num_classes = size, so the loader's check passes).
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int num_classes() const override { return static_cast<int>(n_); }
  Shape sample_shape() const override { return {1, 1, 3}; }
  bool get(int64_t index, const SampleKey&, float* out, int64_t* label, std::string*) const override {
    out[0] = out[1] = out[2] = static_cast<float>(index);
    *label = index;
    return true;
  }

 private:
  int64_t n_;
};

constexpr int64_t kSize = 23;  // prime: every world size pads or cuts, every batch size leaves a tail
constexpr uint64_t kSeed = 17;
constexpr int64_t kEpoch = 3;

struct Setup {
  int world = 1;
  int64_t batch = 1;
  bool pad_shards = true;
  bool drop_last = true;
  int workers = 0;
};

std::vector<std::unique_ptr<Loader>> make_ranks(const std::shared_ptr<const Dataset>& ds, const Setup& s) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int r = 0; r < s.world; ++r) {
    LoaderOptions o;
    o.batch_size = s.batch, o.num_workers = s.workers, o.seed = kSeed;
    o.rank = r, o.world_size = s.world, o.pad_shards = s.pad_shards, o.drop_last = s.drop_last;
    ranks.push_back(std::make_unique<Loader>(ds, o));
  }
  return ranks;
}

// One step: every rank's next batch; false (on every rank alike) at the epoch's end.
bool step(std::vector<std::unique_ptr<Loader>>& ranks, std::vector<std::vector<int64_t>>& labels) {
  labels.assign(ranks.size(), {});
  int got = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    Batch b;
    if (!ranks[r]->next(b)) continue;
    ++got;
    labels[r] = b.labels.to_vector_i64();
    REQUIRE(labels[r].size() == labels[0].size());  // ranks read in lockstep
  }
  REQUIRE((got == 0 || got == static_cast<int>(ranks.size())));
  return got > 0;
}

// Reads epoch kEpoch from global position `start`, at most `steps` steps (-1: to its end), and
// returns the samples in global reading order (step, then row, then rank); checks samples_consumed()
// and batches_left() after every step. *consumed: samples_consumed() at the end.
std::vector<int64_t> read(const std::shared_ptr<const Dataset>& ds, const Setup& s, int64_t start, int64_t steps,
                          int64_t* consumed = nullptr) {
  auto ranks = make_ranks(ds, s);
  for (auto& l : ranks) l->start_epoch(kEpoch, start);
  const int64_t left = ranks[0]->batches_left();
  CHECK(left == ranks[0]->batches_per_epoch(start));
  std::vector<int64_t> order;
  std::vector<std::vector<int64_t>> labels;
  for (int64_t j = 0; (steps < 0 || j < steps) && step(ranks, labels); ++j) {
    for (size_t i = 0; i < labels[0].size(); ++i)
      for (const auto& rank : labels) order.push_back(rank[i]);
    for (auto& l : ranks) {
      CHECK(l->samples_consumed() == std::min<int64_t>(kSize, start + static_cast<int64_t>(order.size())));
      CHECK(l->batches_left() == left - j - 1);
    }
  }
  if (consumed) *consumed = ranks[0]->samples_consumed();
  return order;
}

std::vector<Setup> modes(int world, int64_t batch) {
  // pad + drop the short batch (the trainers' default), pad + keep it, cut + drop it.
  return {{world, batch, true, true}, {world, batch, true, false}, {world, batch, false, true}};
}

}  // namespace

TEST_CASE("resume: k batches at (W, B) then the rest at (W', B') read the epoch's order once, in order") {
  auto ds = std::make_shared<IndexDataset>(kSize);
  const std::vector<int64_t> perm = DistributedSampler({kSize, 0, 1, true, kSeed, false}).permutation(kEpoch);
  for (int w : {1, 2, 4})
    for (int64_t b : {2, 3, 5})
      for (const Setup& first : modes(w, b)) {
        CAPTURE(w); CAPTURE(b); CAPTURE(first.pad_shards); CAPTURE(first.drop_last);
        const std::vector<int64_t> full = read(ds, first, 0, -1);
        const int64_t batches = make_ranks(ds, first)[0]->batches_per_epoch();
        for (int64_t k = 0; k <= batches; ++k) {
          CAPTURE(k);
          int64_t offset = -1;
          const std::vector<int64_t> head = read(ds, first, 0, k, &offset);
          // The ranks' first k batches together are the first k*B*W positions of the order.
          REQUIRE(head.size() == static_cast<size_t>(std::min<int64_t>(k * b * w, static_cast<int64_t>(full.size()))));
          CHECK(std::equal(head.begin(), head.end(), full.begin()));
          CHECK(offset == std::min<int64_t>(kSize, static_cast<int64_t>(head.size())));
          for (int w2 : {1, 2, 4})
            for (int64_t b2 : {2, 3, 5}) {
                Setup second = first;  // the same padding and drop_last policy, another W and B
                second.world = w2, second.batch = b2;
                CAPTURE(w2); CAPTURE(b2);
                std::vector<int64_t> seq = head;
                const std::vector<int64_t> rest = read(ds, second, offset, -1);
                seq.insert(seq.end(), rest.begin(), rest.end());
                // The same global order: position p holds perm[p]; positions >= size are padding,
                // which repeats the epoch's first samples. So no sample is read twice before p = size.
                for (size_t p = 0; p < seq.size(); ++p) {
                  CAPTURE(p);
                  REQUIRE(seq[p] == perm[p % kSize]);
                }
                const auto n = static_cast<int64_t>(seq.size());
                CHECK(n < kSize + std::max(w, w2));  // padding: under one world size's worth
                if (!first.drop_last) CHECK(n >= kSize);  // every sample read
                // drop_last loses under one batch of every rank, the cut under one sample of each.
                else CHECK(kSize - n < b2 * w2 + (first.pad_shards ? 0 : w2));
            }
        }
      }
}

TEST_CASE("resume: on the same W and B, start_epoch(e, k*B*W) gives each rank the uninterrupted batches") {
  auto ds = std::make_shared<IndexDataset>(kSize);
  for (int w : {1, 2, 4})
    for (int64_t b : {2, 3, 5})
      for (Setup s : modes(w, b)) {
        CAPTURE(w); CAPTURE(b); CAPTURE(s.pad_shards); CAPTURE(s.drop_last);
        auto full = make_ranks(ds, s);
        std::vector<std::vector<std::vector<int64_t>>> want;  // [step][rank] labels
        for (auto& l : full) l->start_epoch(kEpoch);
        std::vector<std::vector<int64_t>> labels;
        while (step(full, labels)) want.push_back(labels);
        for (size_t k = 1; k < want.size(); ++k) {
          CAPTURE(k);
          s.workers = k % 2 == 0 ? 2 : 0;  // the threaded path honours the offset too
          auto resumed = make_ranks(ds, s);
          for (auto& l : resumed) l->start_epoch(kEpoch, static_cast<int64_t>(k) * b * w);
          for (size_t j = k; j < want.size(); ++j) {
            REQUIRE(step(resumed, labels));
            CHECK(labels == want[j]);
          }
          CHECK_FALSE(step(resumed, labels));
          // The next epoch does not remember the offset.
          for (size_t r = 0; r < resumed.size(); ++r) {
            resumed[r]->start_epoch(kEpoch + 1);
            full[r]->start_epoch(kEpoch + 1);
          }
          std::vector<std::vector<int64_t>> a, c;
          while (step(full, a)) {
            REQUIRE(step(resumed, c));
            CHECK(a == c);
          }
          CHECK_FALSE(step(resumed, c));
        }
      }
}

TEST_CASE("resume: offsets outside [0, size] are refused; an exhausted epoch has no batch") {
  auto ds = std::make_shared<IndexDataset>(kSize);
  LoaderOptions o;
  o.batch_size = 2, o.num_workers = 0;
  Loader loader(ds, o);
  CHECK(loader.batches_left() == loader.batches_per_epoch());
  CHECK(loader.samples_consumed() == 0);
  CHECK_THROWS_AS(loader.start_epoch(0, -1), Error);
  try {
    loader.start_epoch(0, kSize + 1);
    FAIL("an offset past the dataset was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("start offset 24 is outside the epoch's [0, 23] samples") != std::string::npos);
  }
  loader.start_epoch(0, kSize);
  CHECK(loader.batches_left() == 0);
  CHECK(loader.samples_consumed() == kSize);
  Batch b;
  CHECK_FALSE(loader.next(b));
  loader.start_epoch(0, kSize - 1);  // one sample left: drop_last drops it
  CHECK(loader.batches_left() == 0);
  CHECK_FALSE(loader.next(b));
}
