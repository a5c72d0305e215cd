// checkpoint/state_dict.cpp: PyTorch-named, PyTorch-layout views of a Module. See state_dict.h.
#include "checkpoint/state_dict.h"

#include <cstring>
#include <map>
#include <set>

#include "core/ops/copy/copy.h"

namespace tandem {

namespace {

// One tensor of the module as the file sees it.
struct Slot {
  std::string name;
  Tensor tensor;     // the module's live tensor
  bool conv_weight;  // stored OHWI in tandem, OIHW in the file
};

// Walks modules depth-first: own parameters, own buffers, then children (PyTorch's order).
// A module's own tensors are the ones whose relative name has no '.', the rest belong to children.
void collect(const Module& m, const std::string& prefix, std::vector<Slot>& out) {
  const bool is_conv = m.type_name() == "Conv2d";
  for (const auto& [n, t] : m.named_parameters())
    if (n.find('.') == std::string::npos)
      out.push_back({prefix + n, t, is_conv && n == "weight" && t.dim() == 4});
  for (const auto& [n, t] : m.named_buffers())
    if (n.find('.') == std::string::npos) out.push_back({prefix + n, t, false});
  for (const auto& [n, child] : m.named_children()) collect(*child, prefix + n + ".", out);
}

std::vector<Slot> slots(const Module& m) {
  std::vector<Slot> out;
  collect(m, "", out);
  return out;
}

// Generic 4-D axis permutation on host bytes: out[i0,i1,i2,i3] = in[index via perm]. Works on raw
// elements of any size, so every dtype (f32, bf16, ...) moves bit-exactly.
Tensor permute4(const Tensor& w, const int perm[4]) {
  TANDEM_CHECK(w.dim() == 4, "a conv weight must be 4-D, got ", shape_str(w.shape()));
  Tensor src = w.is_cuda() ? w.to(Device::cpu()) : w;
  const Shape& s = src.shape();
  Shape os{s[perm[0]], s[perm[1]], s[perm[2]], s[perm[3]]};
  Tensor dst = Tensor::empty(os, src.dtype(), Device::cpu());
  // Strides of the input, in elements, then reordered to walk the output's index space.
  const int64_t in_stride[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  const int64_t st[4] = {in_stride[perm[0]], in_stride[perm[1]], in_stride[perm[2]], in_stride[perm[3]]};
  const size_t es = dtype_size(src.dtype());
  const char* in = static_cast<const char*>(src.data_ptr());
  char* o = static_cast<char*>(dst.data_ptr());
  for (int64_t a = 0; a < os[0]; ++a)
    for (int64_t b = 0; b < os[1]; ++b)
      for (int64_t c = 0; c < os[2]; ++c)
        for (int64_t d = 0; d < os[3]; ++d, o += es)
          std::memcpy(o, in + (a * st[0] + b * st[1] + c * st[2] + d * st[3]) * es, es);
  return dst;
}

Shape file_shape(const Slot& s) {
  const Shape& t = s.tensor.shape();
  return s.conv_weight ? Shape{t[0], t[3], t[1], t[2]} : t;
}

// At most `limit` names, then a count: keeps errors readable for a 300-tensor model.
std::string list(const std::vector<std::string>& names, size_t limit = 12) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return s;
}

}  // namespace

// OHWI [o, kh, kw, i] -> OIHW [o, i, kh, kw]: output axis k takes input axis perm[k].
Tensor ohwi_to_oihw(const Tensor& w) {
  static const int perm[4] = {0, 3, 1, 2};
  return permute4(w, perm);
}
// OIHW [o, i, kh, kw] -> OHWI [o, kh, kw, i].
Tensor oihw_to_ohwi(const Tensor& w) {
  static const int perm[4] = {0, 2, 3, 1};
  return permute4(w, perm);
}

std::vector<std::string> conv_weight_names(const Module& m) {
  std::vector<std::string> out;
  for (const Slot& s : slots(m))
    if (s.conv_weight) out.push_back(s.name);
  return out;
}

NamedTensors state_dict(const Module& m) {
  NamedTensors out;
  for (const Slot& s : slots(m)) out.emplace_back(s.name, s.conv_weight ? ohwi_to_oihw(s.tensor) : s.tensor.detach());
  return out;
}

LoadResult load_state_dict(Module& m, const NamedTensors& sd, const LoadOptions& opt) {
  std::vector<Slot> want = slots(m);
  std::map<std::string, const Tensor*> have;
  for (const auto& [n, t] : sd) have[n] = &t;

  LoadResult res;
  std::set<std::string> known;
  std::vector<std::string> problems;
  for (const Slot& s : want) {
    known.insert(s.name);
    auto it = have.find(s.name);
    if (it == have.end()) {
      res.missing.push_back(s.name);
      continue;
    }
    const Tensor& src = *it->second;
    const Shape fs = file_shape(s);
    if (src.shape() != fs)
      problems.push_back(s.name + ": shape " + shape_str(src.shape()) + " but the model expects " + shape_str(fs) +
                         (s.conv_weight ? " (OIHW)" : ""));
    DType d = s.tensor.dtype();
    bool castable = opt.cast && is_floating(d) && is_floating(src.dtype());
    if (src.dtype() != d && !castable)
      problems.push_back(s.name + ": dtype " + dtype_name(src.dtype()) + " but the model holds " + dtype_name(d));
  }
  for (const auto& [n, t] : sd)
    if (!known.count(n)) res.unexpected.push_back(n);

  if (opt.strict) {
    if (!res.missing.empty()) problems.push_back("missing from " + opt.source + ": " + list(res.missing));
    if (!res.unexpected.empty())
      problems.push_back("in " + opt.source + " but not in the model: " + list(res.unexpected));
  }
  if (!problems.empty()) {
    std::string msg;
    for (const std::string& p : problems) msg += "\n  " + p;
    if (!opt.advice.empty())
      TANDEM_THROW("cannot load ", opt.source, " into the ", m.type_name(), " model (nothing was changed):", msg, "\n",
                   opt.advice);
    TANDEM_THROW("cannot load ", opt.source, " into the ", m.type_name(), " model (nothing was changed):", msg,
                 "\nCheck that the file was saved from the same architecture (the same model and "
                 "number of classes)",
                 opt.strict ? ", or load non-strictly to skip missing/unexpected tensors." : ".",
                 opt.cast ? "" : " A dtype mismatch can be allowed with LoadOptions::cast.");
  }

  // All checks passed: now modify. copy_ writes into the existing storage (any device pair).
  for (Slot& s : want) {
    auto it = have.find(s.name);
    if (it == have.end()) continue;
    Tensor src = *it->second;
    if (src.dtype() != s.tensor.dtype()) src = ops::cast_raw(src, s.tensor.dtype());
    if (s.conv_weight) src = oihw_to_ohwi(src);
    s.tensor.copy_(src);
  }
  return res;
}

void save_model(const std::string& path, const Module& m, const safetensors::Metadata& metadata) {
  safetensors::save(path, state_dict(m), metadata);
}

LoadResult load_model(const std::string& path, Module& m, LoadOptions opt) {
  if (opt.source == LoadOptions{}.source) opt.source = "'" + path + "'";
  return load_state_dict(m, safetensors::load(path).tensors, opt);
}

}  // namespace tandem
