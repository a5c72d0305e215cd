// layers/module.h: the Module base class - named parameters, buffers and children.
//
// Names follow PyTorch: a child registered as "layer1" holding a child "0" holding a parameter
// "weight" is reported as "layer1.0.weight". named_parameters() and named_buffers() walk
// depth-first in registration order, exactly like torch.nn.Module, so a tandem model and its
// torchvision twin list the same names in the same order (checkpoints and dist/'s bucketing rely
// on that order).
//
// Parameters are held by handle: a Module's parameter Tensor and the one returned by
// parameters() share one TensorImpl, so optimizers and dist/ see updates made through either.
// to(device) replaces the tensors' storage in place (same TensorImpl), so handles taken before the
// move stay valid.
//
// Children live in one place, the parent's list (name, module). A parent that calls a child's
// typed API (ResNet's bn1, a block's downsample) keeps a Child<M> handle: the parent and the
// child's index in that list, not a second pointer. Every access reads the list, so after
// replace_child (dist::convert_sync_batchnorm swapping BatchNorm2d for SyncBatchNorm) the tree
// walks and the parent's forward both see the new module, with nothing to keep in sync. The handle
// costs an index, not a name lookup, per call.
//
// Forward hooks (PyTorch's register_forward_pre_hook / register_forward_hook) run around a
// module's forward when it is called through operator() or call(): pre-hooks before, post-hooks
// after with its output. A typed forward with more inputs (BertLayer's forward(x, mask)) is seen by
// them only when its caller runs it through call(). ZeRO-3 (dist/zero3.h) gathers a module's
// parameters in its pre-hook and frees them in its post-hook.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/check.h"
#include "core/random.h"
#include "core/tensor.h"

namespace tandem {

class Module;

// A parent's typed view of one of its own children (see the header comment). Made only by
// Module::register_module; default-constructed it is empty (an optional child such as a
// BasicBlock's downsample). The static_cast in operator* is safe because replace_child admits only
// modules derived from M. A handle refers to its parent by address: keep it a member of that
// parent (modules are neither copied nor moved).
template <class M>
class Child {
 public:
  Child() = default;
  explicit operator bool() const { return owner_ != nullptr; }
  M& operator*() const;
  M* operator->() const { return &**this; }
  Tensor operator()(const Tensor& x) const;  // runs the child (with its profiling range)
  // Shared ownership of the current child, for code that keeps a reference of its own (tests,
  // wrappers). Such a copy is a second holder: it does not follow a later replace_child.
  std::shared_ptr<M> get() const;
  operator std::shared_ptr<M>() const { return get(); }

 private:
  friend class Module;
  Child(const Module* owner, size_t index) : owner_(owner), index_(index) {}
  const Module* owner_ = nullptr;
  size_t index_ = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Call the module with operator(), which adds the profiling range.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x);  // forward(x) inside a profiling range, through call()
  // Runs body() - a forward of this module, typed or not - between the forward hooks:
  //   h = layer->call([&] { return layer->forward(h, mask); });
  // The post-hooks get body's result when it is a Tensor, else an undefined Tensor.
  template <class F>
  decltype(auto) call(F&& body) {
    pre_hooks_.run(*this);
    decltype(auto) out = std::forward<F>(body)();
    if constexpr (std::is_same_v<std::decay_t<decltype(out)>, Tensor>) post_hooks_.run(*this, out);
    else post_hooks_.run(*this, Tensor());
    return out;
  }
  // The hook stays registered while the returned handle lives (autograd::HookHandle).
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardHook = std::function<void(Module&, const Tensor& output)>;
  [[nodiscard]] autograd::HookHandle register_forward_pre_hook(ForwardPreHook hook) {
    return pre_hooks_.add(std::move(hook));
  }
  [[nodiscard]] autograd::HookHandle register_forward_hook(ForwardHook hook) { return post_hooks_.add(std::move(hook)); }
  // Short class name for describe() and traces ("Conv2d", "BasicBlock").
  virtual std::string type_name() const = 0;
  // One-line summary of the configuration ("3, 64, kernel_size=7, stride=2"), like PyTorch's repr.
  virtual std::string extra_repr() const { return ""; }

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  int64_t num_parameters() const;
  // This module and every descendant, pre-order ("" for this one, then "layer1", "layer1.0", ...),
  // the order torch.nn.Module.named_modules() uses. Init schemes walk this list.
  std::vector<std::pair<std::string, Module*>> named_modules() const;

  // Re-draws this module's own parameters with its PyTorch default init (not the children's; see
  // layers/init.h for whole-model schemes). Layers without parameters do nothing.
  virtual void reset_parameters(Generator& gen) {}

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device d);           // moves parameters and buffers (in place, see above)
  void to(DType t);            // casts floating parameters and buffers (in place)
  void zero_grad();            // zeroes existing .grad buffers in place (keeps bucket views valid)
  // Multi-line tree like print(model) in PyTorch, plus the parameter count.
  std::string describe() const;
  const std::string& name() const { return name_; }  // this module's name within its parent
  // Replaces the child registered as `name` by `m` (PyTorch: setattr(parent, name, m)), in its
  // place in the list: the tree walks (parameters, buffers, train, to, describe) and the parent's
  // Child handles see `m` from then on. `m` must derive from the type the child was registered
  // with (a SyncBatchNorm may replace a BatchNorm2d; anything may replace a Sequential's entry).
  // Used by dist::convert_sync_batchnorm.
  void replace_child(const std::string& name, std::shared_ptr<Module> m);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);  // sets requires_grad
  Tensor& register_buffer(const std::string& name, Tensor t);
  // Appends `m` as the child `name` and returns the parent's typed handle to it. M is also the type
  // a replacement must derive from.
  template <typename M>
  Child<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    return Child<M>(this, add_child(name, std::move(m), &derives_from<M>));
  }
  // Children by index, in registration order (Sequential runs them this way).
  size_t num_children() const { return children_.size(); }
  const std::shared_ptr<Module>& child_at(size_t i) const { return children_.at(i).module; }

 private:
  template <class M>
  friend class Child;
  using TypeCheck = bool (*)(const Module&);
  template <class M>
  static bool derives_from(const Module& m) {
    return dynamic_cast<const M*>(&m) != nullptr;
  }
  struct ChildSlot {
    std::string name;
    std::shared_ptr<Module> module;
    TypeCheck accepts;  // what register_module's M admits: replace_child's check
  };
  size_t add_child(const std::string& name, std::shared_ptr<Module> m, TypeCheck accepts);  // returns the index
  void collect(const std::string& prefix, bool params, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<ChildSlot> children_;
  autograd::HookList<Module&> pre_hooks_;
  autograd::HookList<Module&, const Tensor&> post_hooks_;
  bool training_ = true;
  std::string name_;
};

using ModulePtr = std::shared_ptr<Module>;

template <class M>
M& Child<M>::operator*() const {
  TANDEM_CHECK(owner_ != nullptr, "this Child handle is empty (an optional child that was not registered)");
  return static_cast<M&>(*owner_->children_[index_].module);
}

template <class M>
Tensor Child<M>::operator()(const Tensor& x) const {
  return (**this)(x);
}

template <class M>
std::shared_ptr<M> Child<M>::get() const {
  if (!owner_) return nullptr;
  return std::static_pointer_cast<M>(owner_->children_[index_].module);
}

}  // namespace tandem
