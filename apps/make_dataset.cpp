// apps/make_dataset: writes the project's default dataset, an ImageNet-layout folder of JPEGs.
//
//   <out>/train/<class>/<class>_<i>.JPEG     (--train-per-class per class)
//   <out>/val/<class>/val_<i>.JPEG           (--val-per-class per class)
//   <out>/COMPLETE                           JSON of the parameters, written last
//
// Content comes from data/procedural.h: class = shape x texture, everything else (colours,
// position, scale, rotation, clutter, noise) random per image, so classes cannot be told apart by
// mean colour but a small CNN learns them. Image sizes are drawn per image in [min, max] for each
// side independently, so the aspect ratios vary as in real photographs.
//
// Idempotent and atomic: everything is written into <out>.tmp-<pid> and renamed to <out> at the end,
// so <out> is either absent or complete. Re-running with the same parameters finds COMPLETE and
// does nothing; different parameters (or an <out> that is not ours) is an error unless --force,
// which deletes <out> first. Every image is a pure function of (seed, split, class, index), so the
// output does not depend on --threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/check.h"
#include "core/ops/common/rng.h"
#include "data/decode.h"
#include "data/procedural.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

struct Params {
  std::string out = "data_default";
  int classes = 10;
  int train_per_class = 300;
  int val_per_class = 50;
  int min_size = 64;
  int max_size = 96;
  uint64_t seed = 0;
  int quality = 90;  // JPEG quality: high enough that compression artefacts do not hide thin stripes
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool force = false;

  // What makes two outputs equal (threads and force do not change the bytes written).
  nlohmann::json identity() const {
    return {{"format", "tandem-procedural-v1"}, {"classes", classes}, {"train_per_class", train_per_class},
            {"val_per_class", val_per_class}, {"min_size", min_size}, {"max_size", max_size},
            {"seed", seed}, {"quality", quality}};
  }
};

struct Job {
  int split;  // 0 train, 1 val
  int label;
  int index;
};

// Writes one image. sample ids of train and val never collide, so val images are not train copies.
void write_one(const Params& p, const fs::path& root, const Job& j) {
  const std::string cls = data::procedural_class_name(j.label);
  const uint64_t sample_id = static_cast<uint64_t>(j.split) << 32 | static_cast<uint64_t>(j.index);
  // Sizes use their own stream so they do not shift the content's random draws.
  const uint64_t size_key = rng::mix64(p.seed ^ 0x73697a65ULL) + (static_cast<uint64_t>(j.label) << 40) + sample_id;
  auto side = [&](uint64_t k) {
    return p.min_size + static_cast<int>(rng::uniform(size_key, k) * (p.max_size - p.min_size + 1));
  };
  const int w = std::min(side(0), p.max_size), h = std::min(side(1), p.max_size);
  data::Image img = data::draw_procedural(j.label, p.seed, sample_id, w, h);
  char name[64];
  if (j.split == 0)
    std::snprintf(name, sizeof name, "%s_%05d.JPEG", cls.c_str(), j.index);
  else
    std::snprintf(name, sizeof name, "val_%05d.JPEG", j.index);
  data::write_image((root / (j.split == 0 ? "train" : "val") / cls / name).string(), img, p.quality);
}

int run(const Params& p) {
  TANDEM_CHECK(p.classes >= 2, "--classes must be at least 2");
  TANDEM_CHECK(p.train_per_class >= 1 && p.val_per_class >= 1, "--train-per-class and --val-per-class must be >= 1");
  TANDEM_CHECK(p.min_size >= 8 && p.max_size >= p.min_size, "--min-size must be >= 8 and <= --max-size");
  const fs::path out = p.out;
  const fs::path marker = out / "COMPLETE";
  const nlohmann::json want = p.identity();

  if (fs::exists(out)) {
    nlohmann::json have;
    if (fs::exists(marker)) {
      std::ifstream in(marker);
      have = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    }
    if (have == want) {
      std::printf("make_dataset: %s is already complete (%s); nothing to do\n", out.c_str(), marker.c_str());
      return 0;
    }
    TANDEM_CHECK(p.force, out.string(),
                 " exists but was not made by make_dataset with these parameters; pass --force to replace it "
                 "or choose another --out");
    std::printf("make_dataset: --force: removing %s\n", out.c_str());
    fs::remove_all(out);
  }

  const fs::path tmp = out.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  std::vector<Job> jobs;
  for (int split = 0; split < 2; ++split)
    for (int k = 0; k < p.classes; ++k) {
      fs::create_directories(tmp / (split == 0 ? "train" : "val") / data::procedural_class_name(k));
      const int n = split == 0 ? p.train_per_class : p.val_per_class;
      for (int i = 0; i < n; ++i) jobs.push_back({split, k, i});
    }

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0}, done{0};
  std::mutex print_mu, err_mu;
  std::string first_error;
  const size_t total = jobs.size(), report_every = std::max<size_t>(1, total / 10);
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < total;) {
      try {
        write_one(p, tmp, jobs[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (first_error.empty()) first_error = e.what();
        next = total;  // stop everyone: a disk error will not fix itself
        return;
      }
      size_t d = done.fetch_add(1) + 1;
      if (d % report_every == 0 || d == total) {
        std::lock_guard<std::mutex> lk(print_mu);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("make_dataset: %zu/%zu images (%3.0f%%, %.1f s)\n", d, total, 100.0 * d / total, s);
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, p.threads); ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (!first_error.empty()) {
    fs::remove_all(tmp);
    TANDEM_THROW("make_dataset failed, nothing was written to ", out.string(), ": ", first_error);
  }

  std::ofstream(tmp / "COMPLETE") << want.dump(2) << "\n";
  std::error_code ec;
  fs::rename(tmp, out, ec);  // atomic on one file system: <out> appears complete or not at all
  if (ec) {
    // A concurrent run (e.g. one per rank on a node) may have finished first with the same bytes.
    fs::remove_all(tmp);
    std::ifstream in(marker);
    TANDEM_CHECK(in && nlohmann::json::parse(in, nullptr, false) == want, "could not rename ", tmp.string(),
                 " to ", out.string(), ": ", ec.message());
    std::printf("make_dataset: another run completed %s first; using it\n", out.c_str());
    return 0;
  }
  std::printf("make_dataset: wrote %zu images (%d classes) to %s in %.1f s\n", total, p.classes, out.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Params p;
  CLI::App app{"Generate tandem's default dataset: an ImageNet-layout folder of procedurally drawn JPEGs "
               "(train/<class>/*.JPEG, val/<class>/*.JPEG) whose classes are shape x texture combinations."};
  app.add_option("--out", p.out, "Output folder (created atomically)")->capture_default_str();
  app.add_option("--classes", p.classes, "Number of classes")->capture_default_str()->check(CLI::Range(2, 9999));
  app.add_option("--train-per-class", p.train_per_class, "Training images per class")->capture_default_str();
  app.add_option("--val-per-class", p.val_per_class, "Validation images per class")->capture_default_str();
  app.add_option("--min-size", p.min_size, "Smallest image side in pixels")->capture_default_str();
  app.add_option("--max-size", p.max_size, "Largest image side in pixels")->capture_default_str();
  app.add_option("--seed", p.seed, "Seed; the output is a pure function of the parameters")->capture_default_str();
  app.add_option("--quality", p.quality, "JPEG quality (1-100)")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--threads", p.threads, "Writer threads (default: all cores)")->capture_default_str();
  app.add_flag("--force", p.force, "Replace --out if it exists with other contents");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_dataset: %s\n", e.what());
    return 1;
  }
}
