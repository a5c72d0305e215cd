// core/autograd.cpp: the graph a forward records - nodes, edges, grad mode, hooks (see autograd.h).
// The engine that runs it backward is core/autograd_engine.cpp, above the ops it sums gradients with.
#include "core/autograd.h"

#include <atomic>

namespace tandem::autograd {
namespace {
thread_local bool t_grad_mode = true;
std::atomic<uint64_t> g_next_seq{0};
}  // namespace

Node::Node() : sequence_nr(g_next_seq.fetch_add(1)) {}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>& grad_outputs) {
  TANDEM_CHECK(fn_ != nullptr, "backward through ", name_,
               " a second time: its saved tensors were freed by the first backward");
  return fn_(grad_outputs);
}

void mark_grad_zero(const Tensor& leaf) {
  const TensorImpl& impl = *leaf.impl_ptr();
  if (!impl.grad) return;
  Edge e = gradient_edge(leaf);  // the leaf's accumulator, created on first use
  if (auto* acc = dynamic_cast<AccumulateGrad*>(e.fn.get())) acc->set_known_zero(impl.grad);
}

bool grad_mode_enabled() { return t_grad_mode; }
NoGradGuard::NoGradGuard() : prev_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = prev_; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn, impl.output_nr};
  if (!impl.grad_accumulator) impl.grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  return {impl.grad_accumulator, 0};
}

void record(const std::string& name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            FunctionNode::Fn fn) {
  if (!any_requires_grad(inputs)) return;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    TensorImpl& o = outputs[i]->impl();
    o.requires_grad = true;
    o.grad_fn = node;
    o.output_nr = i;
  }
}

HookHandle register_pre_backward_hook(const Tensor& t, std::function<void()> hook) {
  TANDEM_CHECK(t.defined() && t.grad_fn(), "register_pre_backward_hook: ", t.defined() ? t.str() : "an undefined tensor",
               " was not produced by a differentiable op (it has no grad_fn): hook a tensor computed with grad mode on "
               "from inputs that require grad");
  return t.grad_fn()->pre_hooks.add(std::move(hook));
}

}  // namespace tandem::autograd
