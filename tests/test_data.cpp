// tests/test_data.cpp: the data pipeline's building blocks - sampler sharding, decoding of odd and
// broken files, ImageFolder ordering, and the transforms' geometry and normalisation.
// The loader, synthetic data and procedural images are in test_data_loader.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/decode.h"
#include "data/image_folder.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "data_test_util.h"

using namespace tandem;
using namespace tandem::data;
namespace fs = std::filesystem;

// ---------------------------------------------------------------- sampler

TEST_CASE("sampler: shards are disjoint, equal-sized and cover the data (padding by wrap-around)") {
  for (int64_t n : {1, 7, 10, 12}) {
    for (int world : {1, 2, 3, 4, 5}) {
      for (int64_t epoch : {0, 1}) {
        CAPTURE(n); CAPTURE(world); CAPTURE(epoch);
        std::map<int64_t, int> count;
        int64_t per_rank = -1;
        for (int r = 0; r < world; ++r) {
          DistributedSampler s({n, r, world, true, 42, false});
          auto idx = s.indices(epoch);
          CHECK(static_cast<int64_t>(idx.size()) == (n + world - 1) / world);
          if (per_rank < 0) per_rank = static_cast<int64_t>(idx.size());
          CHECK(static_cast<int64_t>(idx.size()) == per_rank);
          for (int64_t i : idx) {
            REQUIRE(i >= 0);
            REQUIRE(i < n);
            ++count[i];
          }
        }
        CHECK(static_cast<int64_t>(count.size()) == n);  // every sample is seen
        int64_t extra = 0;
        for (auto& [i, c] : count) extra += c - 1;
        CHECK(extra == per_rank * world - n);  // exactly the padding repeats
        if (n % world == 0) CHECK(extra == 0);
      }
    }
  }
}

TEST_CASE("sampler: padding repeats the beginning of the epoch's order (PyTorch semantics)") {
  DistributedSampler s0({10, 0, 4, true, 3, false});
  auto order = s0.global_order(5);
  REQUIRE(order.size() == 12);
  CHECK(order[10] == order[0]);
  CHECK(order[11] == order[1]);
  // world > size wraps more than once
  DistributedSampler big({2, 0, 5, false, 0, false});
  CHECK(big.global_order(0) == std::vector<int64_t>{0, 1, 0, 1, 0});
}

TEST_CASE("sampler: drop_last cuts the tail; no index repeats") {
  for (int world : {2, 3, 4}) {
    std::set<int64_t> seen;
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s({10, r, world, true, 9, true});
      auto idx = s.indices(2);
      CHECK(static_cast<int64_t>(idx.size()) == 10 / world);
      total += static_cast<int64_t>(idx.size());
      seen.insert(idx.begin(), idx.end());
    }
    CHECK(static_cast<int64_t>(seen.size()) == total);  // disjoint
    CHECK(total == 10 / world * world);
  }
  CHECK_THROWS_AS(DistributedSampler({3, 0, 4, true, 0, true}), Error);  // every rank would be empty
}

TEST_CASE("sampler: same permutation on every rank, reshuffled per epoch, seed-dependent, identity without shuffle") {
  DistributedSampler a({50, 0, 2, true, 7, false}), b({50, 1, 2, true, 7, false});
  CHECK(a.global_order(3) == b.global_order(3));
  CHECK(a.global_order(3) != a.global_order(4));
  DistributedSampler c({50, 0, 2, true, 8, false});
  CHECK(a.global_order(3) != c.global_order(3));
  auto perm = a.global_order(3);
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 50; ++i) CHECK(perm[i] == i);
  DistributedSampler plain({6, 1, 2, false, 7, false});
  CHECK(plain.indices(9) == std::vector<int64_t>{1, 3, 5});
}

TEST_CASE("sampler: the epoch order depends on (seed, epoch) only; an offset continues it on any world size") {
  const int64_t n = 11;
  const std::vector<int64_t> perm = DistributedSampler({n, 0, 1, true, 5, false}).permutation(2);
  for (int world : {1, 2, 3, 4})
    for (bool drop_last : {false, true})
      for (int64_t start = 0; start <= n; ++start) {
        CAPTURE(world); CAPTURE(drop_last); CAPTURE(start);
        DistributedSampler s({n, world - 1, world, true, 5, drop_last});
        CHECK(s.permutation(2) == perm);  // the world size and rank do not enter the order
        const int64_t left = n - start;
        CHECK(s.num_samples(start) == (drop_last ? left / world : (left + world - 1) / world));
        const auto order = s.global_order(2, start);
        REQUIRE(static_cast<int64_t>(order.size()) == s.total_size(start));
        for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == perm[(start + i) % n]);  // padding wraps
        // Rank r's indices are the r-th, (r+W)-th, ... positions.
        for (int r = 0; r < world; ++r) {
          auto mine = DistributedSampler({n, r, world, true, 5, drop_last}).indices(2, start);
          REQUIRE(static_cast<int64_t>(mine.size()) == s.num_samples(start));
          for (size_t j = 0; j < mine.size(); ++j) CHECK(mine[j] == order[j * world + r]);
        }
        // On the same world size, an offset that is a multiple of it is a suffix of every rank's shard.
        if (start % world == 0) {
          auto whole = s.indices(2), rest = s.indices(2, start);
          REQUIRE(rest.size() + static_cast<size_t>(start / world) == whole.size());
          CHECK(std::equal(rest.begin(), rest.end(), whole.begin() + start / world));
        }
      }
  DistributedSampler s({n, 0, 2, true, 5, false});
  CHECK(s.global_order(2) == s.global_order(2, 0));
  CHECK_THROWS_AS(s.indices(2, n + 1), Error);
  CHECK_THROWS_AS(s.num_samples(-1), Error);
}

// ---------------------------------------------------------------- decoding

TEST_CASE("decode: grayscale and RGBA become RGB; JPEG, PNG and BMP decode") {
  TempDir dir;
  // grey ramp, 4x2
  std::vector<uint8_t> grey{0, 40, 80, 120, 160, 200, 240, 255};
  write_image(dir.file("g.png"), 4, 2, 1, grey.data());
  Image g = decode_file(dir.file("g.png"));
  REQUIRE(g.width == 4);
  REQUIRE(g.height == 2);
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < 3; ++c) CHECK(g.pixels[i * 3 + c] == grey[i]);
  // RGBA: alpha is dropped, colour kept exactly (PNG is lossless)
  std::vector<uint8_t> rgba{10, 20, 30, 0, 40, 50, 60, 128, 70, 80, 90, 255};
  write_image(dir.file("a.png"), 3, 1, 4, rgba.data());
  Image a = decode_file(dir.file("a.png"));
  REQUIRE(a.pixels.size() == 9);
  CHECK(a.pixels == std::vector<uint8_t>{10, 20, 30, 40, 50, 60, 70, 80, 90});
  // BMP is lossless too
  write_image(dir.file("c.bmp"), 3, 1, 3, a.pixels.data());
  CHECK(decode_file(dir.file("c.bmp")).pixels == a.pixels);
  // JPEG: lossy, so compare a flat image with a tolerance of a few levels
  Image flat = Image::blank(16, 16);
  for (size_t i = 0; i < flat.pixels.size(); i += 3) {
    flat.pixels[i] = 200; flat.pixels[i + 1] = 100; flat.pixels[i + 2] = 50;
  }
  write_image(dir.file("f.jpg"), flat, 95);
  Image j = decode_file(dir.file("f.jpg"));
  REQUIRE(j.width == 16);
  for (size_t i = 0; i < j.pixels.size(); ++i) CHECK(std::abs(int(j.pixels[i]) - int(flat.pixels[i])) <= 4);
  // grey JPEG
  std::vector<uint8_t> gj(64, 77);
  write_image(dir.file("gj.JPEG"), 8, 8, 1, gj.data());
  Image gd = decode_file(dir.file("gj.JPEG"));
  CHECK(gd.pixels.size() == 8 * 8 * 3);
  CHECK(std::abs(int(gd.pixels[0]) - 77) <= 2);
}

TEST_CASE("decode: garbage, empty, truncated, corrupt and missing files fail with a reason") {
  TempDir dir;
  std::ofstream(dir.file("garbage.jpg")) << "this is not an image at all";
  std::ofstream(dir.file("empty.png"));
  Image src = test_pattern(32, 24);
  write_image(dir.file("ok.jpg"), src, 90);
  auto bytes = read_bytes(dir.file("ok.jpg"));
  write_bytes(dir.file("truncated.jpg"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + 40));
  auto corrupt = bytes;  // destroy the start-of-frame marker area: the header no longer parses
  for (size_t i = 2; i < std::min<size_t>(corrupt.size(), 200); ++i) corrupt[i] = 0xFF;
  write_bytes(dir.file("corrupt.jpg"), corrupt);

  for (const char* name : {"garbage.jpg", "empty.png", "truncated.jpg", "corrupt.jpg", "missing.jpg"}) {
    CAPTURE(name);
    Image img;
    std::string reason;
    CHECK_FALSE(try_decode_file(dir.file(name), img, &reason));
    CHECK_FALSE(reason.empty());
    bool names_file = false;
    try {
      decode_file(dir.file(name));
    } catch (const Error& e) {
      names_file = std::string(e.what()).find(name) != std::string::npos;
    }
    CHECK(names_file);
  }
  Image ok;
  CHECK(try_decode_file(dir.file("ok.jpg"), ok));
}

TEST_CASE("decode: extensions are matched case-insensitively") {
  CHECK(has_image_extension("a/b/x.JPEG"));
  CHECK(has_image_extension("x.jpg"));
  CHECK(has_image_extension("x.Png"));
  CHECK(has_image_extension("x.BMP"));
  CHECK_FALSE(has_image_extension("x.txt"));
  CHECK_FALSE(has_image_extension("x.jpeg.bak"));
  CHECK_FALSE(has_image_extension("dir.jpg/README"));
}

// ---------------------------------------------------------------- ImageFolder

TEST_CASE("ImageFolder: classes in byte order, files sorted and found recursively, non-images ignored") {
  TempDir dir;
  const fs::path split = dir.path / "train";
  Image img = test_pattern(8, 8);
  for (const char* cls : {"b", "B", "a_2", "a", "_x"}) fs::create_directories(split / cls);
  write_image((split / "b" / "z.JPEG").string(), img);
  write_image((split / "b" / "a.png").string(), img);
  fs::create_directories(split / "b" / "sub");
  write_image((split / "b" / "sub" / "m.Bmp").string(), img);
  std::ofstream((split / "b" / "notes.txt").string()) << "ignored";
  write_image((split / "B" / "x.jpg").string(), img);
  write_image((split / "a" / "x.jpeg").string(), img);
  write_image((split / "a_2" / "x.jpg").string(), img);
  write_image((split / "_x" / "x.jpg").string(), img);
  std::ofstream((split / "stray.jpg").string()) << "files at the split level are not samples";

  ImageFolder f(split.string(), {});
  CHECK(f.classes() == std::vector<std::string>{"B", "_x", "a", "a_2", "b"});
  REQUIRE(f.size() == 7);
  CHECK(f.labels() == std::vector<int64_t>{0, 1, 2, 3, 4, 4, 4});
  // torchvision's os.walk order: the class folder's own files first, then sub-folders.
  CHECK(fs::path(f.files()[4]).filename() == "a.png");
  CHECK(fs::path(f.files()[5]).filename() == "z.JPEG");
  CHECK(fs::path(f.files()[6]).filename() == "m.Bmp");
  CHECK(f.sample_shape() == Shape{224, 224, 3});

  CHECK_THROWS_AS(ImageFolder((dir.path / "nope").string(), {}), Error);
}

namespace {
// Creates <split>/<cls>/<file> holding a small PNG.
void put_image(const fs::path& split, const std::string& cls, const std::string& file) {
  fs::create_directories(split / cls);
  write_image((split / cls / file).string(), test_pattern(4, 4));
}
std::string construction_error(const fs::path& split, ImageFolderOptions o = {}) {
  try {
    ImageFolder f(split.string(), o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("ImageFolder: hidden folders and files are no classes and no samples") {
  TempDir dir;
  const fs::path split = dir.path / "train";
  put_image(split, "cat", "a.png");
  put_image(split, "dog", "a.png");
  put_image(split, ".ipynb_checkpoints", "a-checkpoint.png");  // Jupyter, sorts before every class
  put_image(split, "cat/.ipynb_checkpoints", "a-checkpoint.png");
  put_image(split, "dog", "._a.png");  // a macOS resource fork: not an image
  ImageFolder f(split.string(), {});
  CHECK(f.classes() == std::vector<std::string>{"cat", "dog"});
  REQUIRE(f.size() == 2);
  CHECK(f.labels() == std::vector<int64_t>{0, 1});
  CHECK(fs::path(f.files()[0]) == split / "cat" / "a.png");
  CHECK(fs::path(f.files()[1]) == split / "dog" / "a.png");
  // Only hidden folders: no class at all.
  TempDir only;
  put_image(only.path / "train", ".hidden", "a.png");
  CHECK(construction_error(only.path / "train").find("has no class sub-folders") != std::string::npos);
}

TEST_CASE("ImageFolder: an empty class folder is an error that names it") {
  TempDir dir;
  const fs::path split = dir.path / "train";
  put_image(split, "a", "x.png");
  fs::create_directories(split / "b" / "sub");
  std::ofstream((split / "b" / "sub" / "notes.txt").string()) << "no image";
  put_image(split, "b/.cache", "x.png");  // hidden: does not count
  const std::string message = construction_error(split);
  CAPTURE(message);
  CHECK(message.find("class folder " + (split / "b").string() + " has no .jpg/.jpeg/.png/.bmp file") !=
        std::string::npos);
  CHECK(message.find("add its images or remove the folder") != std::string::npos);
}

TEST_CASE("ImageFolder: val/ maps to train's class list by name; a val-only class is an error") {
  TempDir dir;
  for (const char* cls : {"ant", "bee", "cow", "doe"}) {
    put_image(dir.path / "train", cls, "t1.png");
    put_image(dir.path / "train", cls, "t2.png");
  }
  // val/ lacks "bee": on its own it would number cow 1 and doe 2.
  for (const char* cls : {"ant", "cow", "doe"}) put_image(dir.path / "val", cls, "v.png");
  ImageFolder train((dir.path / "train").string(), {});
  REQUIRE(train.classes() == std::vector<std::string>{"ant", "bee", "cow", "doe"});
  ImageFolderOptions vo;
  vo.train = false;
  vo.classes = train.classes();
  ImageFolder val((dir.path / "val").string(), vo);
  CHECK(val.labels() == std::vector<int64_t>{0, 2, 3});  // train's indices, not 0, 1, 2
  CHECK(val.num_classes() == 4);
  CHECK(val.classes() == train.classes());
  // Labels come out of get() the same way, and the loader's range check accepts them.
  std::vector<float> pixels(shape_numel(val.sample_shape()));
  int64_t label = -1;
  std::string error;
  REQUIRE(val.get(2, {}, pixels.data(), &label, &error));
  CHECK(label == 3);
  // Samples stay in the split's folder order whatever the given list's order.
  vo.classes = {"doe", "cow", "bee", "ant"};
  ImageFolder reversed((dir.path / "val").string(), vo);
  CHECK(reversed.files() == val.files());
  CHECK(reversed.labels() == std::vector<int64_t>{3, 1, 0});

  put_image(dir.path / "val", "elk", "v.png");
  vo.classes = train.classes();
  const std::string message = construction_error(dir.path / "val", vo);
  CAPTURE(message);
  CHECK(message.find("class folder " + (dir.path / "val" / "elk").string() + ", which is not one of the 4 classes") !=
        std::string::npos);
  vo.classes = {"ant", "bee", "ant"};
  CHECK(construction_error(dir.path / "train", vo).find("names class 'ant' twice") != std::string::npos);
}

// ---------------------------------------------------------------- transforms

TEST_CASE("transforms: val is resize-shorter-side + centre crop, exact on an identity-scale image") {
  // Width 8, height 12; size 6 and resize_ratio 8/6 resize the shorter side 8 -> 8 (identity), so
  // the crop is the centre 6x6 window starting at (1, 3) and must reproduce the pixels exactly.
  Image src = test_pattern(8, 12);
  TransformOptions opt;
  opt.size = 6;
  opt.resize_ratio = 8.0 / 6.0;
  opt.mean = {0, 0, 0};
  opt.std = {1, 1, 1};
  std::vector<float> out(6 * 6 * 3);
  val_transform(src, opt, out.data());
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 6; ++x)
      for (int c = 0; c < 3; ++c) CHECK(out[(y * 6 + x) * 3 + c] == doctest::Approx(src.at(1 + x, 3 + y)[c] / 255.0));
}

TEST_CASE("transforms: normalisation maps a flat image to (v/255 - mean) / std; outputs have the asked shape") {
  Image src = Image::blank(40, 30);
  for (size_t i = 0; i < src.pixels.size(); i += 3) {
    src.pixels[i] = 255; src.pixels[i + 1] = 128; src.pixels[i + 2] = 0;
  }
  TransformOptions opt;
  opt.size = 16;
  std::vector<float> out(16 * 16 * 3, NAN);
  SampleRng rng(1, 0, 0);
  for (int mode = 0; mode < 2; ++mode) {
    if (mode == 0) train_transform(src, opt, rng, out.data());
    else val_transform(src, opt, out.data());
    const float v[3] = {1.0f, 128 / 255.0f, 0.0f};
    for (size_t i = 0; i < out.size(); ++i)
      CHECK(out[i] == doctest::Approx((v[i % 3] - opt.mean[i % 3]) / opt.std[i % 3]).epsilon(1e-5));
  }
}

TEST_CASE("transforms: RandomResizedCrop boxes stay inside, respect scale/ratio, and fall back to a centre crop") {
  TransformOptions opt;
  int fallback = 0;
  for (int i = 0; i < 300; ++i) {
    SampleRng rng(5, 0, i);
    CropBox b = random_resized_crop_box(120, 80, opt, rng);
    REQUIRE(b.x >= 0); REQUIRE(b.y >= 0);
    REQUIRE(b.x + b.w <= 120); REQUIRE(b.y + b.h <= 80);
    double area = double(b.w) * b.h / (120.0 * 80.0), ratio = double(b.w) / b.h;
    bool in_range = area >= 0.08 * 0.9 && area <= 1.0 && ratio >= 0.75 * 0.9 && ratio <= 4.0 / 3.0 * 1.1;
    if (!in_range) ++fallback;
  }
  CHECK(fallback < 15);  // fallbacks are rare for a 3:2 image
  // A 1000x10 strip never fits a box of ratio <= 4/3 and area >= 8%: always the fallback,
  // height 10 and width round(10 * 4/3) = 13, centred.
  SampleRng rng(0, 0, 0);
  CHECK(random_resized_crop_box(1000, 10, opt, rng) == CropBox{493, 0, 13, 10});
  SampleRng rng2(0, 0, 0);
  CHECK(random_resized_crop_box(10, 1000, opt, rng2) == CropBox{0, 493, 10, 13});
  // Same key, same box; another index, (almost surely) another box.
  SampleRng r1(3, 1, 17), r2(3, 1, 17), r3(3, 1, 18);
  CropBox b1 = random_resized_crop_box(300, 200, opt, r1);
  CHECK(b1 == random_resized_crop_box(300, 200, opt, r2));
  CHECK_FALSE(b1 == random_resized_crop_box(300, 200, opt, r3));
}

TEST_CASE("transforms: the horizontal flip mirrors columns") {
  Image src = test_pattern(10, 10);
  TransformOptions opt;
  opt.size = 10;
  opt.scale_min = opt.scale_max = 1.0;  // whole image ...
  opt.ratio_min = opt.ratio_max = 1.0;  // ... at identity scale
  std::vector<float> a(300), b(300);
  opt.flip_prob = 0.0;
  SampleRng r1(0, 0, 0);
  train_transform(src, opt, r1, a.data());
  opt.flip_prob = 1.0;
  SampleRng r2(0, 0, 0);
  train_transform(src, opt, r2, b.data());
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 10; ++x)
      for (int c = 0; c < 3; ++c) CHECK(b[(y * 10 + x) * 3 + c] == a[(y * 10 + 9 - x) * 3 + c]);
}
