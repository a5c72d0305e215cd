// checkpoint/checkpoint.cpp: training checkpoints as safetensors files. See checkpoint.h.
#include "checkpoint/checkpoint.h"

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

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
  const std::string tmp = safetensors::temp_path(path);
  safetensors::save(tmp, all, m, /*digests=*/true);
  std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) / 2);
  crash_hook(tmp);
  TANDEM_THROW("the checkpoint crash hook returned; it must end the process (failure drills only)");
}

}  // namespace

std::string utc_timestamp(std::chrono::system_clock::time_point now) {
  const int64_t all_us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t t = static_cast<std::time_t>(all_us / 1000000);
  const int64_t us = all_us % 1000000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%06lldZ", buf, static_cast<long long>(us));
  return out;
}

namespace {

std::string classes_to_json(const std::vector<std::string>& classes) {
  try {
    // strict: a name that is not UTF-8 throws instead of being written as a string PyTorch's
    // json.loads would reject or silently altered.
    return nlohmann::json(classes).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error&) {
    for (const std::string& c : classes) {
      try {
        (void)nlohmann::json(c).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
      } catch (const nlohmann::json::type_error&) {
        TANDEM_THROW("class name '", c, "' is not valid UTF-8, which the checkpoint's metadata (JSON) cannot hold. "
                     "Rename that class folder to a UTF-8 name.");
      }
    }
    throw;
  }
}

std::vector<std::string> classes_from_json(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error&) {
    TANDEM_THROW("checkpoint '", path, "': metadata 'data.classes' is not JSON. The file is damaged; use an "
                 "earlier checkpoint.");
  }
  TANDEM_CHECK(j.is_array(), "checkpoint '", path, "': metadata 'data.classes' is not a JSON array. The file is "
               "damaged; use an earlier checkpoint.");
  std::vector<std::string> out;
  for (const auto& e : j) {
    TANDEM_CHECK(e.is_string(), "checkpoint '", path, "': metadata 'data.classes' holds a non-string. The file is "
                 "damaged; use an earlier checkpoint.");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// The TrainState in a checkpoint's metadata, with format-1 fields derived (see checkpoint.h).
TrainState parse_state(const safetensors::Metadata& m, const std::string& path) {
  const std::string format = get(m, "format");
  TANDEM_CHECK(is_checkpoint_format(format), "'", path, "' is not a tandem training checkpoint (format \"", format,
               "\", expected \"", kCheckpointFormat,
               "\"). To start from a model-only file (e.g. torchvision weights) use load_model, not a resume.");
  TrainState s;
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
  if (format == kCheckpointFormat) {
    s.run_id = get(m, "run_id");
    s.saved_at = get(m, "saved_at");
    s.samples = parse_int<int64_t>(m, "data.samples", path);
    s.epoch_offset = parse_int<int64_t>(m, "data.epoch_offset", path);
    s.global_batch = parse_int<int64_t>(m, "data.global_batch", path);
    s.classes = classes_from_json(get(m, "data.classes"), path);
    TANDEM_CHECK(s.run_id.empty() || is_valid_run_id(s.run_id), "checkpoint '", path,
                 "' holds a malformed run id. The file is damaged; use an earlier checkpoint.");
  } else {  // format 1: derive what the old fields allow
    s.epoch_offset = s.index_in_epoch * s.world_size;
    s.global_batch = 0;
    if (auto it = s.extra.find("batch_per_rank"); it != s.extra.end())
      s.global_batch = parse_int<int64_t>(m, "extra.batch_per_rank", path) * s.world_size;
    s.samples = s.global_batch > 0 ? s.step * s.global_batch : -1;
  }
  TANDEM_CHECK(s.step >= 0 && s.epoch >= 0 && s.world_size >= 1 && s.index_in_epoch >= 0 && s.epoch_offset >= 0 &&
                   s.samples >= -1 && s.global_batch >= 0,
               "checkpoint '", path, "' holds an impossible position (step ", s.step, ", epoch ", s.epoch,
               ", world_size ", s.world_size, ", samples ", s.samples, ", epoch_offset ", s.epoch_offset,
               "). The file is damaged; use an earlier checkpoint.");
  return s;
}
}  // namespace

bool is_valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

bool is_checkpoint_format(const std::string& format) {
  return format == kCheckpointFormat || format == kCheckpointFormat1;
}

std::string new_run_id() {
  std::random_device rd;  // the OS's entropy source, not a seeded PRNG: two runs started together differ
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 4; ++i) {
    uint32_t w = rd();
    for (int k = 0; k < 8; ++k, w >>= 4) id += hex[w & 15];
  }
  return id;
}

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

  TANDEM_CHECK(s.run_id.empty() || is_valid_run_id(s.run_id), "run id '", s.run_id,
               "' may hold only letters, digits, '.', '_' and '-' (at most 64); use new_run_id()");
  TANDEM_CHECK(s.samples >= -1 && s.epoch_offset >= 0 && s.global_batch >= 0, "cannot save a checkpoint with samples ",
               s.samples, ", epoch_offset ", s.epoch_offset, ", global_batch ", s.global_batch,
               ": the training loop's position is wrong");
  safetensors::Metadata m;
  m["format"] = kCheckpointFormat;
  m["tandem_version"] = s.tandem_version;
  m["run_id"] = s.run_id;
  m["saved_at"] = utc_timestamp();
  m["model"] = s.model;
  m["step"] = std::to_string(s.step);
  m["epoch"] = std::to_string(s.epoch);
  m["world_size"] = std::to_string(s.world_size);
  m["data.sampler_epoch"] = std::to_string(s.sampler_epoch);
  m["data.index_in_epoch"] = std::to_string(s.index_in_epoch);
  m["data.samples"] = std::to_string(s.samples);
  // A caller that counts per rank only (the apps before the training-step library) still gets the
  // global position: each rank read index_in_epoch samples of its strided shard.
  const int64_t offset = s.epoch_offset == 0 ? s.index_in_epoch * s.world_size : s.epoch_offset;
  m["data.epoch_offset"] = std::to_string(offset);
  m["data.global_batch"] = std::to_string(s.global_batch);
  m["data.classes"] = classes_to_json(s.classes);
  for (const auto& [name, g] : s.rng) {
    TANDEM_CHECK(name.find('.') == std::string::npos, "RNG stream name '", name, "' must not contain '.'");
    m["rng." + name + ".seed"] = std::to_string(g.seed);
    m["rng." + name + ".offset"] = std::to_string(g.offset);
  }
  for (const auto& [k, v] : s.extra) m["extra." + k] = v;
  if (crash_hook) crash_midway(path, all, m);
  safetensors::save(path, all, m, /*digests=*/true);
}

Checkpoint read_checkpoint(const std::string& path) {
  safetensors::File f = safetensors::load(path);  // checks the digests, when the file has them
  Checkpoint c;
  c.state = parse_state(f.metadata, path);
  c.verified = f.digests_checked > 0 && f.digests_checked == f.tensors.size();
  for (auto& [n, t] : f.tensors) {
    if (n.rfind(kOpt, 0) == 0)
      c.optimizer.emplace_back(n.substr(kOpt.size()), std::move(t));
    else
      c.model.emplace_back(n, std::move(t));
  }
  return c;
}

TrainState read_train_state(const std::string& path) { return parse_state(safetensors::read_metadata(path), path); }

std::string checkpoint_damage(const std::string& path) {
  try {
    read_checkpoint(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

Checkpoint load_checkpoint(const std::string& path, Module& model) { return apply_checkpoint(read_checkpoint(path), path, model); }

Checkpoint apply_checkpoint(Checkpoint c, const std::string& path, Module& model) {
  LoadOptions opt;
  opt.source = "checkpoint '" + path + "'";
  // A training checkpoint resumes into the model it was saved from; its user has no switch for a
  // partial or cast load, so the advice names what they can change.
  opt.advice = "A checkpoint resumes only into the model it was trained as: the same model, number of classes (or "
               "vocabulary) and precision (its metadata records them: model, data.classes, extra.amp). Resume with "
               "those settings, or start a new run without resuming.";
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

}  // namespace tandem
