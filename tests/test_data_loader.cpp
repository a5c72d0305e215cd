// tests/test_data_loader.cpp: the loader (determinism across worker counts, per-sample augmentation
// across a resume on another world size, skip vs strict, batch shapes, resident mode), the synthetic dataset and its rank sharding, and the procedural images
// behind make_dataset. CPU target only; the pinned/async CUDA path needs a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "core/ops/common/rng.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/procedural.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace tandem;
using namespace tandem::data;
namespace fs = std::filesystem;

namespace {

// 3 classes x 5 images (PNG, so pixels are exact), 12-20 px with varied aspect; optionally one
// garbage file as the 3rd image of class "c1" (dataset index 7).
std::string make_folder(const TempDir& dir, bool with_bad) {
  const fs::path split = dir.path / "train";
  for (int k = 0; k < 3; ++k) {
    fs::create_directories(split / ("c" + std::to_string(k)));
    for (int i = 0; i < 5; ++i) {
      std::string file = (split / ("c" + std::to_string(k)) / ("img" + std::to_string(i) + ".png")).string();
      if (with_bad && k == 1 && i == 2) {
        std::ofstream(file) << "not a png";
        continue;
      }
      int w = 12 + (i * 3 + k) % 9, h = 12 + (i * 5 + k * 2) % 9;
      Image img = Image::blank(w, h);
      for (size_t p = 0; p < img.pixels.size(); ++p)
        img.pixels[p] = static_cast<uint8_t>(rng::mix64(k * 100 + i * 7 + p) & 0xFF);
      write_image(file, img);
    }
  }
  return split.string();
}

struct Epoch {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int64_t>> labels;
  bool operator==(const Epoch&) const = default;
};

Epoch run_epoch(Loader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  Epoch e;
  Batch b;
  while (loader.next(b)) {
    CHECK(b.index == static_cast<int64_t>(e.images.size()));
    CHECK(b.wait_ms >= 0.0);
    e.images.push_back(b.images.to_vector());
    e.labels.push_back(b.labels.to_vector_i64());
  }
  CHECK(static_cast<int64_t>(e.images.size()) == loader.batches_per_epoch());
  return e;
}

// Reads one epoch; returns the message of the error it threw, or "" when none.
std::string epoch_error(Loader& loader) {
  try {
    Batch b;
    while (loader.next(b)) {
    }
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

std::shared_ptr<ImageFolder> folder(const std::string& split, bool train, int size = 8) {
  ImageFolderOptions o;
  o.train = train;
  o.transform.size = size;
  return std::make_shared<ImageFolder>(split, o);
}

}  // namespace

TEST_CASE("loader: identical batches for 0, 1 and 3 workers; a new epoch reshuffles and re-augments") {
  TempDir dir;
  auto ds = folder(make_folder(dir, false), /*train=*/true);
  std::vector<Epoch> e0, e1;
  for (int workers : {0, 1, 3}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    o.prefetch = 2;
    o.seed = 11;
    Loader loader(ds, o);
    e0.push_back(run_epoch(loader, 0));
    e1.push_back(run_epoch(loader, 1));
  }
  CHECK(e0[0] == e0[1]);
  CHECK(e0[0] == e0[2]);
  CHECK(e1[0] == e1[2]);
  CHECK_FALSE(e0[0] == e1[0]);
  REQUIRE(e0[0].images.size() == 3);  // 15 samples, batch 4, drop_last
  CHECK(e0[0].images[0].size() == 4u * 8 * 8 * 3);
}

TEST_CASE("loader: batch layout is [N,H,W,3] f32 + [N] i64; drop_last=false keeps a short last batch") {
  TempDir dir;
  auto ds = folder(make_folder(dir, false), /*train=*/false);
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.shuffle = false;
  o.drop_last = false;
  Loader loader(ds, o);
  CHECK(loader.batches_per_epoch() == 4);
  Batch b;
  std::vector<int64_t> rows, labels;
  while (loader.next(b)) {
    CHECK(b.images.dtype() == DType::F32);
    CHECK(b.labels.dtype() == DType::I64);
    CHECK(b.images.shape() == Shape{b.labels.size(0), 8, 8, 3});
    rows.push_back(b.labels.size(0));
    for (int64_t l : b.labels.to_vector_i64()) labels.push_back(l);
  }
  CHECK(rows == std::vector<int64_t>{4, 4, 4, 3});
  CHECK(labels == std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2});  // shuffle off: dataset order
  // Row k of the unshuffled val stream is exactly dataset sample k.
  loader.start_epoch(0);
  REQUIRE(loader.next(b));
  std::vector<float> want(8 * 8 * 3);
  int64_t label = -1;
  REQUIRE(ds->get(2, {}, want.data(), &label, nullptr));
  auto got = b.images.to_vector();
  CHECK(std::equal(want.begin(), want.end(), got.begin() + 2 * want.size()));
}

TEST_CASE("loader: augmentation is keyed by the sample, so a resume on another world size crops alike") {
  // 1 rank x batch 5 reads epoch 1 whole; 2 ranks x batch 2 resume it after 5 samples. Every
  // sample the resumed ranks read must carry the crop and flip the single rank gave it.
  TempDir dir;
  auto ds = folder(make_folder(dir, false), /*train=*/true);
  const int64_t numel = 8 * 8 * 3, epoch = 1, offset = 5;
  auto options = [](int rank, int world, int64_t batch) {
    LoaderOptions o;
    o.batch_size = batch, o.num_workers = 2, o.seed = 4, o.rank = rank, o.world_size = world;
    return o;
  };
  std::map<int64_t, std::vector<float>> want;  // dataset index -> image
  {
    Loader single(ds, options(0, 1, 5));
    const auto idx = DistributedSampler({ds->size(), 0, 1, true, 4, false}).indices(epoch);
    Epoch e = run_epoch(single, epoch);
    for (size_t b = 0; b < e.images.size(); ++b)
      for (int64_t r = 0; r < 5; ++r)
        want[idx[b * 5 + r]].assign(e.images[b].begin() + r * numel, e.images[b].begin() + (r + 1) * numel);
  }
  REQUIRE(want.size() == 15);
  int64_t compared = 0;
  for (int rank = 0; rank < 2; ++rank) {
    Loader part(ds, options(rank, 2, 2));
    const auto idx = DistributedSampler({ds->size(), rank, 2, true, 4, false}).indices(epoch, offset);
    part.start_epoch(epoch, offset);
    Batch b;
    for (int64_t k = 0; part.next(b); ++k) {
      const std::vector<float> got = b.images.to_vector();
      for (int64_t r = 0; r < 2; ++r, ++compared) {
        const int64_t i = idx[static_cast<size_t>(k * 2 + r)];
        CAPTURE(i);
        CHECK(std::equal(want[i].begin(), want[i].end(), got.begin() + r * numel));
      }
    }
  }
  CHECK(compared == 2 * 2 * 2);  // 10 samples left over 2 ranks: 5 each, 2 full batches of 2
}

TEST_CASE("loader: a corrupt file is skipped once with a warning and replaced by the next sample") {
  TempDir dir;
  auto ds = folder(make_folder(dir, true), /*train=*/false);
  REQUIRE(ds->size() == 15);
  const int64_t bad = 7;
  REQUIRE(fs::path(ds->files()[bad]).filename() == "img2.png");
  LoaderOptions o;
  o.batch_size = 5;
  o.num_workers = 3;
  o.shuffle = false;
  Loader loader(ds, o);
  Epoch e = run_epoch(loader, 0);
  CHECK(loader.skipped_files() == 1);
  run_epoch(loader, 1);
  CHECK(loader.skipped_files() == 1);  // counted per file, not per encounter
  REQUIRE(e.images.size() == 3);
  for (auto& im : e.images) CHECK(im.size() == 5u * 8 * 8 * 3);  // shapes unchanged
  // Position 7 (batch 1, row 2) holds sample 8 and its label.
  std::vector<float> want(8 * 8 * 3);
  int64_t label = -1;
  REQUIRE(ds->get(bad + 1, {}, want.data(), &label, nullptr));
  CHECK(e.labels[1][2] == label);
  CHECK(std::equal(want.begin(), want.end(), e.images[1].begin() + 2 * want.size()));
}

TEST_CASE("loader: strict mode turns a corrupt file into an error that names it") {
  TempDir dir;
  auto ds = folder(make_folder(dir, true), /*train=*/true);
  for (int workers : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 5;
    o.num_workers = workers;
    o.strict = true;
    Loader loader(ds, o);
    std::string message = epoch_error(loader);
    CAPTURE(message);
    CHECK(message.find("img2.png") != std::string::npos);
    CHECK(loader.skipped_files() == 1);
  }
}

TEST_CASE("loader: resident mode hands out one batch every step; bad options are refused") {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{40, 5, 4, 1});
  LoaderOptions o;
  o.batch_size = 8;
  o.resident = true;
  Loader loader(ds, o);
  Batch first, b;
  REQUIRE(loader.next(first));
  int n = 1;
  while (loader.next(b)) {
    CHECK(b.images.shares_storage(first.images));
    ++n;
  }
  CHECK(n == 5);
  LoaderOptions too_big;
  too_big.batch_size = 41;
  CHECK_THROWS_AS(Loader(ds, too_big), Error);
  LoaderOptions cuda;
  cuda.device = Device::cuda(0);
  if (!built_with_cuda()) CHECK_THROWS_AS(Loader(ds, cuda), Error);
}

TEST_CASE("loader: bytes_held counts the batches prefetched or resident, never those handed out") {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{40, 5, 4, 1});
  const int64_t batch = 8 * (4 * 4 * 3 * 4 + 8);  // 8 rows: f32 [4, 4, 3] images + i64 labels
  Batch b;
  LoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 0;  // each batch is produced inside next() and handed out whole
  Loader inline_loader(ds, o);
  CHECK(inline_loader.bytes_held() == 0);
  REQUIRE(inline_loader.next(b));
  CHECK(inline_loader.bytes_held() == 0);
  o.num_workers = 2;
  o.prefetch = 2;
  Loader ahead(ds, o);
  REQUIRE(ahead.next(b));
  // The workers fill the window (prefetch batches past the one in hand) and stop there.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t held = ahead.bytes_held();
  while (held < 2 * batch && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    held = ahead.bytes_held();
  }
  CHECK(held == 2 * batch);
  o.num_workers = 0;
  o.resident = true;
  Loader resident(ds, o);
  REQUIRE(resident.next(b));
  CHECK(resident.bytes_held() == batch);  // the resident batch, which b shares
}

// A dataset whose sample 3 has a label outside its own class count (a data-pipeline bug).
class BadLabelDataset : public Dataset {
 public:
  int64_t size() const override { return 8; }
  int num_classes() const override { return 4; }
  Shape sample_shape() const override { return {2, 2, 3}; }
  bool get(int64_t index, const SampleKey&, float* out, int64_t* label, std::string*) const override {
    std::fill(out, out + 12, 0.5f);
    *label = index == 3 ? 4 : index % 4;
    return true;
  }
};

TEST_CASE("loader: a label outside [0, num_classes) is an error that names the sample") {
  // The loader is where labels are range-checked for CUDA training (the loss does not sync to look).
  for (int workers : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    o.shuffle = false;
    Loader loader(std::make_shared<BadLabelDataset>(), o);
    std::string message = epoch_error(loader);
    CAPTURE(message);
    CHECK(message.find("sample 3 has label 4, outside [0, 4)") != std::string::npos);
  }
}

TEST_CASE("synthetic: sample i is a pure function of (seed, i); labels in range and varied") {
  SyntheticDataset a({100, 7, 5, 3}), b({100, 7, 5, 3}), c({100, 7, 5, 4});
  std::vector<float> x(75), y(75), z(75);
  int64_t la, lb, lc;
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 100; ++i) {
    a.get(i, {0, 0}, x.data(), &la, nullptr);
    b.get(i, {9, 5}, y.data(), &lb, nullptr);  // the epoch key does not matter
    CHECK(x == y);
    CHECK(la == lb);
    CHECK(la == a.label_of(i));
    CHECK((la >= 0 && la < 7));
    labels.insert(la);
  }
  CHECK(labels.size() == 7);
  a.get(0, {}, x.data(), &la, nullptr);
  a.get(1, {}, y.data(), &lb, nullptr);
  c.get(0, {}, z.data(), &lc, nullptr);
  CHECK(x != y);
  CHECK(x != z);
}

TEST_CASE("synthetic: two ranks together see exactly the single-process data") {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{24, 4, 3, 5});
  const int64_t numel = 3 * 3 * 3;
  std::set<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = 2;
    o.rank = rank;
    o.world_size = 2;
    o.seed = 3;
    Loader loader(ds, o);
    DistributedSampler s({24, rank, 2, true, 3, false});
    auto idx = s.indices(2);
    Epoch e = run_epoch(loader, 2);
    REQUIRE(e.images.size() == 3);
    std::vector<float> want(numel);
    for (size_t b = 0; b < e.images.size(); ++b)
      for (int r = 0; r < 4; ++r) {
        int64_t i = idx[b * 4 + r], label;
        ds->get(i, {}, want.data(), &label, nullptr);
        CHECK(std::equal(want.begin(), want.end(), e.images[b].begin() + r * numel));
        CHECK(e.labels[b][r] == label);
        CHECK(seen.insert(i).second);  // no sample twice across ranks
      }
  }
  CHECK(seen.size() == 24);
}

TEST_CASE("procedural: class names sort in class order; images are deterministic") {
  std::vector<std::string> names;
  for (int k = 0; k < 80; ++k) names.push_back(procedural_class_name(k));
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  CHECK(draw_procedural(3, 1, 7, 20, 16).pixels == draw_procedural(3, 1, 7, 20, 16).pixels);
  CHECK(draw_procedural(3, 1, 7, 20, 16).pixels != draw_procedural(3, 1, 8, 20, 16).pixels);
}

TEST_CASE("procedural: the mean colour does not reveal the class (nearest-centroid is near chance)") {
  // 6 classes, 60 train + 40 test images each, 24x24. A nearest-centroid classifier on mean RGB
  // is the best linear-ish rule on that feature; chance is 1/6 = 0.167. With 240 test images the
  // standard error of the accuracy is ~0.024, so 0.30 is > 5 sigma above chance: a failure means
  // colour leaks the class, not bad luck.
  const int classes = 6, n_train = 60, n_test = 40;
  auto mean_rgb = [](const Image& img) {
    std::array<double, 3> m{0, 0, 0};
    for (size_t i = 0; i < img.pixels.size(); ++i) m[i % 3] += img.pixels[i];
    for (double& v : m) v /= img.pixels.size() / 3.0;
    return m;
  };
  std::vector<std::array<double, 3>> centroid(classes, {0, 0, 0});
  for (int k = 0; k < classes; ++k)
    for (int i = 0; i < n_train; ++i) {
      auto m = mean_rgb(draw_procedural(k, 0, i, 24, 24));
      for (int c = 0; c < 3; ++c) centroid[k][c] += m[c] / n_train;
    }
  int correct = 0;
  for (int k = 0; k < classes; ++k)
    for (int i = 0; i < n_test; ++i) {
      auto m = mean_rgb(draw_procedural(k, 0, 100000 + i, 24, 24));
      int best = 0;
      double best_d = 1e30;
      for (int j = 0; j < classes; ++j) {
        double d = 0;
        for (int c = 0; c < 3; ++c) d += (m[c] - centroid[j][c]) * (m[c] - centroid[j][c]);
        if (d < best_d) { best_d = d; best = j; }
      }
      correct += best == k;
    }
  double acc = double(correct) / (classes * n_test);
  MESSAGE("mean-colour nearest-centroid accuracy: ", acc, " (chance 0.167)");
  CHECK(acc < 0.30);
}

TEST_CASE("loader: a batch larger than the data says what to change, without naming an option users cannot set") {
  // Issue 29, item 5: the message named `drop_last = false`, which is no flag of either trainer.
  TempDir dir;
  auto ds = folder(make_folder(dir, false), /*train=*/false);
  LoaderOptions o;
  o.batch_size = 1000;
  std::string e;
  try {
    Loader loader(ds, o);
  } catch (const tandem::Error& err) {
    e = err.what();
  }
  CHECK(e.find("smaller batch size") != std::string::npos);
  // the sentence after TANDEM_CHECK's "file:line: check failed (<condition>): " prefix
  CHECK(e.substr(e.find("): ") + 3).find("drop_last") == std::string::npos);
  data::SamplerOptions so;
  so.dataset_size = 2;
  so.world_size = 4;
  so.drop_last = true;
  try {
    data::DistributedSampler s(so);
    e = "";
  } catch (const tandem::Error& err) {
    e = err.what();
  }
  CHECK(e.find("fewer ranks") != std::string::npos);
  CHECK(e.find("drop_last") == std::string::npos);
}

TEST_CASE("loader: the resident (--synthetic) batch is epoch 0's first at any start, so a resumed run trains on it too") {
  // Issue 29, item 5: a run resumed at epoch 2, 8 samples in, built its fixed batch from there.
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{40, 5, 4, 1});
  LoaderOptions o;
  o.batch_size = 4;
  o.resident = true;
  Loader fresh(ds, o), resumed(ds, o);
  fresh.start_epoch(0, 0);
  resumed.start_epoch(2, 8);
  Batch a, b;
  REQUIRE(fresh.next(a));
  REQUIRE(resumed.next(b));
  CHECK(a.labels.to_vector_i64() == b.labels.to_vector_i64());
  CHECK(a.images.to_vector() == b.images.to_vector());
  fresh.start_epoch(1, 0);  // later epochs keep the same batch
  Batch c;
  REQUIRE(fresh.next(c));
  CHECK(a.labels.to_vector_i64() == c.labels.to_vector_i64());
}
