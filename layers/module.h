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
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Call the module with operator(), which adds the profiling range.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x);
  // Short class name for describe() and traces ("Conv2d", "BasicBlock").
  virtual std::string type_name() const = 0;
  // One-line summary of the configuration ("3, 64, kernel_size=7, stride=2"), like PyTorch's repr.
  virtual std::string extra_repr() const { return ""; }

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
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
  // Replaces the child registered as `name` by `m` (PyTorch: setattr(parent, name, m)): the tree
  // walks (parameters, buffers, train, to, describe) see `m` from then on, and the old child
  // forwards every call to `m`, so a parent holding a typed pointer to it (ResNet's bn1_) runs `m`.
  // Used by dist::convert_sync_batchnorm.
  void replace_child(const std::string& name, std::shared_ptr<Module> m);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);  // sets requires_grad
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    m->name_ = name;
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool params, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::string name_;
  std::shared_ptr<Module> forward_to_;  // set on a child that replace_child() replaced
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace tandem
