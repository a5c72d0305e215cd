// checkpoint/weights.cpp: pretrained weights into a model - format, remap, skip, checks, load. See weights.h.
#include "checkpoint/weights.h"

#include <fnmatch.h>

#include <charconv>
#include <map>
#include <set>

#include "core/torch_save.h"     // defines: torch_save::load (.pth/.pt)
#include "checkpoint/checkpoint.h"

namespace tandem {

namespace {

const std::string kOptimizerPrefix = "optimizer.";  // a checkpoint's optimizer entries (checkpoint.h)
const std::string kBatchesTracked = "num_batches_tracked";

// At most `limit` names, then a count: an error about a 300-tensor model stays readable.
std::string list(const std::vector<std::string>& names, size_t limit = 12) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A model tensor as the file holds it: PyTorch's layout (OIHW for conv weights).
struct Want {
  Shape file_shape;
  DType dtype;
};

std::map<std::string, Want> model_tensors(const Module& m) {
  const std::vector<std::string> convs = conv_weight_names(m);
  const std::set<std::string> conv(convs.begin(), convs.end());
  std::map<std::string, Want> out;
  for (const auto& [n, t] : m.named_parameters()) {
    const Shape& s = t.shape();  // conv weights are OHWI in tandem
    out[n] = {conv.count(n) ? Shape{s[0], s[3], s[1], s[2]} : s, t.dtype()};
  }
  for (const auto& [n, t] : m.named_buffers()) out[n] = {t.shape(), t.dtype()};
  return out;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;  // no FNM_PERIOD/PATHNAME: '*' crosses dots
}

WeightsRemap strip_prefix(std::string prefix) {
  return [prefix = std::move(prefix)](const NamedTensors& sd) {
    NamedTensors out;
    for (const auto& [n, t] : sd) out.emplace_back(n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n, t);
    return out;
  };
}

namespace {

// The file's model tensors, told apart by format: a torch.save zip, a tandem checkpoint (its
// "optimizer.*" entries and position dropped) or a plain safetensors state dict; then the remap.
NamedTensors read_weights_file(const std::string& path, const WeightsOptions& opt, WeightsResult& res) {
  NamedTensors sd;
  safetensors::File file;
  if (torch_save::is_torch_zip(path)) {  // a .pth/.pt: its state dict, read without running its pickle
    std::string wrapper;
    file.tensors = torch_save::load(path, &wrapper);
    res.notes.push_back("a torch.save file" + (wrapper.empty() ? std::string() : ": the state dict under \"" +
                                                                                    wrapper + "\""));
  } else {
    file = safetensors::load(path);
  }
  auto format = file.metadata.find("format");
  if (format != file.metadata.end() && is_checkpoint_format(format->second)) {  // format 1 or 2
    res.format = WeightsFormat::Checkpoint;
    if (auto st = file.metadata.find("step"); st != file.metadata.end())
      std::from_chars(st->second.data(), st->second.data() + st->second.size(), res.checkpoint_step);
    size_t optimizer = 0;
    for (auto& [n, t] : file.tensors) {
      if (n.rfind(kOptimizerPrefix, 0) == 0) ++optimizer;
      else sd.emplace_back(n, std::move(t));
    }
    res.notes.push_back("a tandem checkpoint (step " + std::to_string(res.checkpoint_step) + "): its " +
                        std::to_string(sd.size()) + " model tensors; its " + std::to_string(optimizer) +
                        " optimizer tensors and the run's position are ignored (resuming restores those)");
  } else {
    sd = std::move(file.tensors);
  }
  if (opt.remap) sd = opt.remap(sd);
  return sd;
}

// Both sides after the skip patterns: the file's tensors by name (and in file order) and the model's.
struct Sides {
  std::map<std::string, Tensor> have;
  NamedTensors kept;  // file order
  std::map<std::string, Want> want;
};

// Skip patterns take names out of both sides; every pattern must hit something.
Sides apply_skips(NamedTensors& sd, const Module& model, const WeightsOptions& opt, const std::string& path,
                  WeightsResult& res) {
  std::vector<size_t> hits(opt.skip.size(), 0);
  auto skipped = [&](const std::string& name) {
    bool any = false;
    for (size_t i = 0; i < opt.skip.size(); ++i)
      if (glob_match(opt.skip[i], name)) ++hits[i], any = true;
    return any;
  };
  Sides s;
  for (auto& [n, t] : sd) {
    if (skipped(n)) {
      res.dropped.push_back(n);
      continue;
    }
    TANDEM_CHECK(s.have.emplace(n, t).second, "weights '", path, "' hold two tensors named '", n,
                 "' (after WeightsOptions::remap): make the mapping give every tensor its own name");
    s.kept.emplace_back(n, t);
  }
  s.want = model_tensors(model);
  for (auto it = s.want.begin(); it != s.want.end();) {
    if (skipped(it->first)) {
      res.skipped.push_back(it->first);
      it = s.want.erase(it);
    } else {
      ++it;
    }
  }
  for (size_t i = 0; i < opt.skip.size(); ++i)
    TANDEM_CHECK(hits[i] > 0, opt.skip_name, " pattern '", opt.skip[i], "' matches no tensor in '", path,
                 "' or in the model: check its spelling against the model's names (e.g. 'fc.*' for fc.weight and "
                 "fc.bias; '*' also crosses dots)");
  return s;
}

// What comparing the two sides found: problems refuse the load; casts and absent counters are notes.
struct Comparison {
  std::vector<std::string> problems, absent_counters;
  bool shape_problem = false;
  std::map<std::pair<DType, DType>, int> casts;
};

// Names, shapes, dtypes (fills res.missing and res.unexpected). Changes nothing.
Comparison compare(const Sides& s, const WeightsOptions& opt, WeightsResult& res) {
  Comparison c;
  for (const auto& [n, w] : s.want) {
    auto it = s.have.find(n);
    if (it == s.have.end()) {
      if (ends_with(n, "." + kBatchesTracked) || n == kBatchesTracked) c.absent_counters.push_back(n);
      else res.missing.push_back(n);
      continue;
    }
    const Tensor& t = it->second;
    if (t.shape() != w.file_shape) {
      c.shape_problem = true;
      c.problems.push_back(n + ": shape " + shape_str(t.shape()) + " in the file but " + shape_str(w.file_shape) +
                           " in the model" + (t.dim() == 4 ? " (both OIHW)" : ""));
    }
    if (t.dtype() != w.dtype) {
      if (is_floating(t.dtype()) && is_floating(w.dtype)) ++c.casts[{t.dtype(), w.dtype}];
      else
        c.problems.push_back(n + ": dtype " + dtype_name(t.dtype()) + " in the file but " + dtype_name(w.dtype) +
                             " in the model (only floating tensors are cast)");
    }
  }
  for (const auto& [n, t] : s.kept)
    if (!s.want.count(n)) res.unexpected.push_back(n);
  if (opt.strict) {
    if (!res.missing.empty()) c.problems.push_back("missing from the file: " + list(res.missing));
    if (!res.unexpected.empty()) c.problems.push_back("in the file but not in the model: " + list(res.unexpected));
  }
  return c;
}

// Every problem in one error, with the advice that fits: the skip for a head of another size, and
// for names either the library's options or, when a program named its own word for skip, that word.
[[noreturn]] void refuse(const Comparison& c, const std::string& path, const Module& model, const WeightsOptions& opt,
                         const WeightsResult& res) {
  std::string msg;
  for (const std::string& p : c.problems) msg += "\n  " + p;
  const bool names = opt.strict && (!res.missing.empty() || !res.unexpected.empty());
  const bool library = opt.skip_name == WeightsOptions{}.skip_name;  // a program names its flag alone
  TANDEM_THROW("cannot load weights '", path, "' into the ", model.type_name(), " model (nothing was changed):", msg,
               c.shape_problem ? "\nA shape that differs is usually a classifier head with another number of classes: "
                                 "drop it from both sides with " + opt.skip_name + " (\"fc.*\" for a ResNet, "
                                 "\"classifier.6.*\" for VGG and AlexNet) and it keeps its fresh initialisation."
                               : "",
               !names ? ""
               : library
                   ? "\nFor names the file and the model do not share: skip them (WeightsOptions::skip), map the "
                     "file's names (WeightsOptions::remap, e.g. strip_prefix(\"module.\") for a DDP-wrapped save, "
                     "or the encoder's Hugging Face mapping), or load non-strictly (WeightsOptions::strict = false)."
                   : "\nTensors the model has and the file lacks (or the other way round) are named above: leave "
                     "them at their fresh initialisation with " + opt.skip_name + " PATTERN (a glob, e.g. 'fc.*'), "
                     "or use a file saved from the same architecture.");
}

}  // namespace

WeightsResult load_weights(const std::string& path, Module& model, const WeightsOptions& opt) {
  WeightsResult res;
  NamedTensors sd = read_weights_file(path, opt, res);
  const Sides s = apply_skips(sd, model, opt, path, res);
  const Comparison c = compare(s, opt, res);
  if (!c.problems.empty()) refuse(c, path, model, opt, res);  // nothing is modified until every check passed

  NamedTensors load;
  for (const auto& [n, t] : s.kept)
    if (s.want.count(n)) load.emplace_back(n, t), res.loaded.push_back(n);
  LoadOptions lo;
  lo.strict = false;  // skipped and absent counters are "missing" to it; the checks above decided
  lo.cast = true;
  lo.source = "weights '" + path + "'";
  load_state_dict(model, load, lo);

  for (const auto& [fromto, count] : c.casts)
    res.notes.push_back("cast " + std::to_string(count) + " tensors from " + dtype_name(fromto.first) + " to " +
                        dtype_name(fromto.second) + ", the model's dtype");
  if (!c.absent_counters.empty())
    res.notes.push_back(std::to_string(c.absent_counters.size()) + " BatchNorm " + kBatchesTracked +
                        " counters are not in the file (saved before PyTorch 0.4.1 added them): left as they were, "
                        "as PyTorch does");
  if (!res.skipped.empty()) res.notes.push_back("kept at their initial values (skipped): " + list(res.skipped));
  return res;
}

}  // namespace tandem
