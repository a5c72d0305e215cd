// layers/checkpoint.cpp: training checkpoints as safetensors files. See checkpoint.h.
#include "layers/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <regex>

#include <unistd.h>  // getpid: the crash hook's temporary name matches safetensors::save's

namespace tandem {

namespace {
const std::string kOpt = "optimizer.";

template <typename T>
T parse_int(const safetensors::Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  TANDEM_CHECK(it != m.end(), "checkpoint '", path, "' has no '", key,
               "' in its metadata. It was not written by tandem's save_checkpoint (or by an incompatible "
               "version); load it as a model file with load_model instead.");
  T v{};
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  TANDEM_CHECK(ec == std::errc() && p == s.data() + s.size(), "checkpoint '", path, "': metadata '", key, "' = \"",
               s, "\" is not an integer. The file is damaged; use an earlier checkpoint.");
  return v;
}

// The conv weight that optimizer tensor `name` belongs to ("conv1.weight.momentum_buffer" ->
// "conv1.weight"), or "" when it belongs to none.
std::string conv_owner(const std::string& name, const std::vector<std::string>& convs) {
  for (const std::string& c : convs)
    if (name.size() > c.size() + 1 && name.compare(0, c.size(), c) == 0 && name[c.size()] == '.') return c;
  return "";
}

std::string get(const safetensors::Metadata& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

CheckpointCrashHook crash_hook = nullptr;

// The crash drill: the complete file is written under the temporary name, cut to half its size
// and handed to the hook, so the disk holds exactly what an interrupted write leaves.
void crash_midway(const std::string& path, const NamedTensors& all, const safetensors::Metadata& m) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  safetensors::save(tmp, all, m);
  std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) / 2);
  crash_hook(tmp);
  TANDEM_THROW("the checkpoint crash hook returned; it must end the process (failure drills only)");
}
}  // namespace

void set_checkpoint_crash_hook(CheckpointCrashHook hook) { crash_hook = hook; }

void save_checkpoint(const std::string& path, const Module& model, const NamedTensors& optimizer_state,
                     const TrainState& s) {
  NamedTensors all = state_dict(model);
  // A model tensor named "optimizer.*" would be read back as optimizer state: refuse it.
  for (const auto& [n, t] : all)
    TANDEM_CHECK(n.rfind(kOpt, 0) != 0, "model tensor '", n, "' clashes with the checkpoint's optimizer prefix");
  const std::vector<std::string> convs = conv_weight_names(model);
  const NamedTensors params = model.named_parameters();
  for (const auto& [n, t] : optimizer_state) {
    std::string owner = conv_owner(n, convs);
    bool permute = false;
    for (const auto& [pn, p] : params)
      if (pn == owner) permute = t.shape() == p.shape();
    all.emplace_back(kOpt + n, permute ? ohwi_to_oihw(t) : t);
  }

  safetensors::Metadata m;
  m["format"] = kCheckpointFormat;
  m["tandem_version"] = s.tandem_version;
  m["model"] = s.model;
  m["step"] = std::to_string(s.step);
  m["epoch"] = std::to_string(s.epoch);
  m["world_size"] = std::to_string(s.world_size);
  m["data.sampler_epoch"] = std::to_string(s.sampler_epoch);
  m["data.index_in_epoch"] = std::to_string(s.index_in_epoch);
  for (const auto& [name, g] : s.rng) {
    TANDEM_CHECK(name.find('.') == std::string::npos, "RNG stream name '", name, "' must not contain '.'");
    m["rng." + name + ".seed"] = std::to_string(g.seed);
    m["rng." + name + ".offset"] = std::to_string(g.offset);
  }
  for (const auto& [k, v] : s.extra) m["extra." + k] = v;
  if (crash_hook) crash_midway(path, all, m);
  safetensors::save(path, all, m);
}

Checkpoint read_checkpoint(const std::string& path) {
  safetensors::File f = safetensors::load(path);
  const auto& m = f.metadata;
  TANDEM_CHECK(get(m, "format") == kCheckpointFormat, "'", path, "' is not a tandem training checkpoint (format \"",
               get(m, "format"), "\", expected \"", kCheckpointFormat,
               "\"). To start from a model-only file (e.g. torchvision weights) use load_model, not --resume.");
  Checkpoint c;
  for (auto& [n, t] : f.tensors) {
    if (n.rfind(kOpt, 0) == 0)
      c.optimizer.emplace_back(n.substr(kOpt.size()), std::move(t));
    else
      c.model.emplace_back(n, std::move(t));
  }
  TrainState& s = c.state;
  s.step = parse_int<int64_t>(m, "step", path);
  s.epoch = parse_int<int64_t>(m, "epoch", path);
  s.world_size = parse_int<int64_t>(m, "world_size", path);
  s.sampler_epoch = parse_int<int64_t>(m, "data.sampler_epoch", path);
  s.index_in_epoch = parse_int<int64_t>(m, "data.index_in_epoch", path);
  s.model = get(m, "model");
  s.tandem_version = get(m, "tandem_version");
  for (const auto& [k, v] : m) {
    if (k.rfind("extra.", 0) == 0) s.extra[k.substr(6)] = v;
    if (k.rfind("rng.", 0) == 0 && k.size() > 9 && k.ends_with(".seed")) {
      std::string name = k.substr(4, k.size() - 4 - 5);
      s.rng[name] = {parse_int<uint64_t>(m, k, path), parse_int<uint64_t>(m, "rng." + name + ".offset", path)};
    }
  }
  TANDEM_CHECK(s.step >= 0 && s.epoch >= 0 && s.world_size >= 1 && s.index_in_epoch >= 0, "checkpoint '", path,
               "' holds an impossible position (step ", s.step, ", epoch ", s.epoch, ", world_size ", s.world_size,
               "). The file is damaged; use an earlier checkpoint.");
  return c;
}

Checkpoint load_checkpoint(const std::string& path, Module& model) {
  Checkpoint c = read_checkpoint(path);
  LoadOptions opt;
  opt.source = "checkpoint '" + path + "'";
  load_state_dict(model, c.model, opt);
  // The model loaded, so its conv weights now hold the file's values; an optimizer tensor that
  // belongs to one and has its OIHW shape goes back to OHWI.
  const std::vector<std::string> convs = conv_weight_names(model);
  const NamedTensors params = model.named_parameters();
  for (auto& [n, t] : c.optimizer) {
    std::string owner = conv_owner(n, convs);
    if (owner.empty() || t.dim() != 4) continue;
    for (const auto& [pn, p] : params) {
      const Shape& s = p.shape();  // OHWI; the file holds OIHW
      if (pn == owner && t.shape() == Shape{s[0], s[3], s[1], s[2]}) t = oihw_to_ohwi(t);
    }
  }
  return c;
}

std::string checkpoint_path(const std::string& dir, int64_t epoch) {
  return (std::filesystem::path(dir) / ("checkpoint_epoch" + std::to_string(epoch) + ".safetensors")).string();
}

namespace {
// The checkpoints in dir as (epoch, path), newest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex re(R"(checkpoint_epoch(\d+)\.safetensors)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch mt;
    std::string name = e.path().filename().string();
    if (std::regex_match(name, mt, re)) out.emplace_back(std::stoll(mt[1].str()), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}
}  // namespace

std::string latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  return all.empty() ? "" : all.front().second;
}

int prune_checkpoints(const std::string& dir, int keep) {
  if (keep <= 0) return 0;
  auto all = list_checkpoints(dir);
  int removed = 0;
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    std::error_code ec;
    if (std::filesystem::remove(all[i].second, ec)) ++removed;
  }
  return removed;
}

}  // namespace tandem
