// layers/module.cpp: the Module base - name walks, train/eval, in-place device/dtype moves, describe().
//
// Naming and ordering are torch.nn.Module's: a module lists its own parameters (registration order)
// and then recurses into its children (registration order), pre-order. Moves replace the Storage
// inside each TensorImpl instead of making new tensors, so every handle taken earlier (optimizer,
// dist/ buckets, layer members) keeps pointing at the live data.
#include "layers/module.h"

#include <sstream>

#include "core/autograd.h"
#include "core/ops/copy/copy.h"
#include "core/profile.h"

namespace tandem {
namespace {

// Points `dst`'s impl at `src`'s bytes (same impl object, new storage, dtype and offset).
void adopt_storage(const Tensor& dst, const Tensor& src) {
  TensorImpl& d = dst.impl();
  d.storage = src.storage();
  d.offset = src.storage_offset();
  d.dtype = src.dtype();
}

void move_tensor(const Tensor& t, Device dev) {
  if (!t.defined() || t.device() == dev) return;
  Tensor moved = Tensor::empty(t.shape(), t.dtype(), dev);
  moved.copy_(t);
  adopt_storage(t, moved);
}

void cast_tensor(const Tensor& t, DType dtype) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return;
  adopt_storage(t, ops::cast_raw(t, dtype));
}

// Adds `indent` spaces after every newline of a nested repr (PyTorch's _addindent).
std::string indent_lines(const std::string& s, int indent) {
  std::string pad(indent, ' ');
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::string repr(const Module& m) {
  std::string extra = m.extra_repr();
  auto kids = m.named_children();
  if (kids.empty()) return m.type_name() + "(" + extra + ")";
  std::ostringstream os;
  os << m.type_name() << "(";
  if (!extra.empty()) os << "\n  " << indent_lines(extra, 2);
  for (const auto& [name, child] : kids) os << "\n  (" << name << "): " << indent_lines(repr(*child), 2);
  os << "\n)";
  return os.str();
}

}  // namespace

Tensor Module::operator()(const Tensor& x) {
  // The range name is the layer type: Nsight groups the timeline by it, and it is cheap to build.
  std::string label = name_.empty() ? type_name() : type_name() + " " + name_;
  profile::Range range(label.c_str(), profile::Level::Layer);
  return call([&] { return forward(x); });
}

size_t Module::add_child(const std::string& name, std::shared_ptr<Module> m, TypeCheck accepts) {
  TANDEM_CHECK(m, "register_module(\"", name, "\"): the module is null");
  for (const auto& slot : children_)
    TANDEM_CHECK(slot.name != name, "child \"", name, "\" is registered twice in ", type_name());
  m->name_ = name;
  children_.push_back({name, std::move(m), accepts});
  return children_.size() - 1;
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  TANDEM_CHECK(m, "replace_child(\"", name, "\"): the new module is null");
  for (auto& slot : children_) {
    if (slot.name != name) continue;
    TANDEM_CHECK(slot.accepts(*m), type_name(), "'s child \"", name, "\" (a ", slot.module->type_name(),
                 ") cannot be replaced by a ", m->type_name(), ": ", type_name(),
                 " uses it through the type it was registered with, and the new module does not derive from it");
    m->name_ = name;
    slot.module = std::move(m);
    return;
  }
  TANDEM_THROW(type_name(), " has no child named \"", name, "\" to replace");
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.reserve(children_.size());
  for (const auto& slot : children_) out.emplace_back(slot.name, slot.module);
  return out;
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  TANDEM_CHECK(t.defined(), "register_parameter(\"", name, "\"): the tensor is undefined");
  for (const auto& [n, _] : params_)
    TANDEM_CHECK(n != name, "parameter \"", name, "\" is registered twice in ", type_name());
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  TANDEM_CHECK(t.defined(), "register_buffer(\"", name, "\"): the tensor is undefined");
  for (const auto& [n, _] : buffers_)
    TANDEM_CHECK(n != name, "buffer \"", name, "\" is registered twice in ", type_name());
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool params,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& c : children_) c.module->collect(prefix + c.name + ".", params, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [_, t] : named_parameters()) n += t.numel();
  return n;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  out.emplace_back("", const_cast<Module*>(this));
  for (const auto& c : children_)
    for (auto& [sub, m] : c.module->named_modules()) out.emplace_back(sub.empty() ? c.name : c.name + "." + sub, m);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.module->train(on);
}

// Gradients move/cast with their parameters (as in PyTorch). A .grad that is a view into a dist/
// bucket would be detached from its bucket by this, so move and cast a model before wrapping it in
// DDP - which is also the order PyTorch requires.
void Module::to(Device d) {
  for (const auto& [_, t] : named_parameters()) {
    move_tensor(t, d);
    if (t.grad().defined()) move_tensor(t.grad(), d);
  }
  for (const auto& [_, t] : named_buffers()) move_tensor(t, d);
}

void Module::to(DType dtype) {
  TANDEM_CHECK(is_floating(dtype), "Module::to(", dtype_name(dtype),
               "): modules can only be cast to a floating dtype (f32, f64, f16, bf16)");
  for (const auto& [_, t] : named_parameters()) {
    cast_tensor(t, dtype);
    if (t.grad().defined()) cast_tensor(t.grad(), dtype);
  }
  // Integer buffers (BatchNorm's num_batches_tracked) keep their dtype, as in PyTorch.
  for (const auto& [_, t] : named_buffers()) cast_tensor(t, dtype);
}

void Module::zero_grad() {
  for (const auto& [_, t] : named_parameters()) {
    Tensor g = t.grad();
    if (g.defined()) g.zero_();
  }
}

std::string Module::describe() const {
  std::ostringstream os;
  os << repr(*this) << "\nparameters: " << num_parameters();
  return os.str();
}

}  // namespace tandem
