// core/autograd.h: define-by-run reverse-mode differentiation.
//
// Each differentiable op that sees an input requiring grad records a Node holding what backward
// needs (its "saved" tensors) and edges to the nodes of its inputs. A leaf that requires grad gets an
// AccumulateGrad node. Tensor::backward() walks the graph reachable from the root:
//   1. counts, for every node, how many gradient contributions it will receive;
//   2. runs nodes as soon as all their contributions arrived, newest first (highest sequence
//      number), which is reverse topological order and approximates reverse execution order - the
//      order in which dist/ expects gradients to become ready;
//   3. frees each node's saved tensors right after it ran, so peak memory falls during backward;
//   4. in AccumulateGrad, adds into the leaf's .grad in place (so .grad can be a view into a
//      dist/ bucket) and then fires the leaf's grad-ready hooks: exactly once per leaf per backward.
//      When the .grad is known to be zero (mark_grad_zero after a zero_grad), the first
//      accumulation copies instead: one read of the incoming gradient, no read of the zeros.
//      A leaf without .grad takes the incoming gradient itself when nothing else holds it (else a clone).
//   5. sums the gradients that meet at one tensor (pending + new, out of place), unless the node
//      that delivers the later one added it into the pending gradient in its own kernel
//      (pending_gradient below: conv dgrad with cuDNN's beta = 1), which saves the add pass.
// Backward always runs with grad mode off: tandem does not do double backward.
// Callbacks queued with queue_callback() during a backward run after its last node: dist/ uses
// this to wait for outstanding all-reduces. A node's pre-hooks (register_pre_backward_hook) run
// right before it: ZeRO-3 gathers a module's parameters there, before the module's backward.
// Hook registrations are owned: a HookHandle removes its hook when it goes (as GradReadyHookHandle).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tandem::autograd {

// ---- hooks as owned registrations ----
// Owns one registered hook (a node's pre-hook, a Module's forward hooks): destroying it, or reset(),
// removes the hook; a handle that outlives what it was registered on does nothing. Move-only.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  HookHandle(HookHandle&& o) noexcept : remove_(std::exchange(o.remove_, nullptr)) {}
  HookHandle& operator=(HookHandle&& o) noexcept {
    if (this != &o) reset(), remove_ = std::exchange(o.remove_, nullptr);
    return *this;
  }
  ~HookHandle() { reset(); }
  void reset() {
    if (auto remove = std::exchange(remove_, nullptr)) remove();
  }

 private:
  std::function<void()> remove_;
};

// Hooks taking Args, run in registration order. The entries sit behind a shared_ptr that the
// handles hold weakly (a handle may outlive the list), allocated at the first add(): a node or
// module without hooks pays one null pointer.
template <class... Args>
class HookList {
 public:
  using Fn = std::function<void(Args...)>;
  [[nodiscard]] HookHandle add(Fn fn) {
    if (!entries_) entries_ = std::make_shared<Entries>();
    const uint64_t id = next_id_++;
    entries_->emplace_back(id, std::move(fn));
    return HookHandle([weak = std::weak_ptr<Entries>(entries_), id] {
      if (auto e = weak.lock()) std::erase_if(*e, [id](const auto& h) { return h.first == id; });
    });
  }
  bool empty() const { return !entries_ || entries_->empty(); }
  // On a copy of the list: a hook may add or remove hooks (those removed still run this once).
  void run(Args... args) const {
    if (empty()) return;
    const Entries hooks = *entries_;
    for (const auto& [id, fn] : hooks) fn(args...);
  }

 private:
  using Entries = std::vector<std::pair<uint64_t, Fn>>;
  std::shared_ptr<Entries> entries_;
  uint64_t next_id_ = 0;
};

struct Edge {
  std::shared_ptr<Node> fn;  // null when that input needs no gradient
  uint32_t input_nr = 0;     // which of fn's outputs this edge feeds
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  // grad_outputs[i] is the gradient w.r.t. output i (undefined if nothing flowed into it; nodes
  // with one output always get a defined gradient). Returns one gradient per next_edges entry
  // (undefined allowed where the edge's fn is null).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) = 0;
  // Frees the saved tensors. Called by the engine right after apply().
  virtual void release() {}
  virtual std::string name() const = 0;

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;  // creation order; later nodes run first
  HookList<> pre_hooks;  // run right before apply() (register_pre_backward_hook)
};

// The node used by almost every op: a name plus a closure. Whatever the closure captures is the
// op's saved state, and is destroyed by release().
class FunctionNode : public Node {
 public:
  using Fn = std::function<std::vector<Tensor>(std::vector<Tensor>& grad_outputs)>;
  FunctionNode(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;
  void release() override { fn_ = nullptr; }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

class AccumulateGrad : public Node {
 public:
  // The highest sequence number: an accumulator runs as soon as its gradient is complete, not
  // after every newer node (it is created once per leaf, so its creation order is stale after the
  // first step). Grad-ready hooks then fire during backward - what dist/ overlaps with (PyTorch
  // gives AccumulateGrad UINT64_MAX for the same reason).
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
    num_outputs = 1;
    sequence_nr = UINT64_MAX;
  }
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  // mark_grad_zero: the leaf's current .grad (this impl, compared by identity) holds zeros.
  void set_known_zero(const std::shared_ptr<TensorImpl>& grad) { known_zero_ = grad; }

 private:
  std::weak_ptr<TensorImpl> leaf_;  // weak: the leaf owns this node, not the other way round
  std::weak_ptr<TensorImpl> known_zero_;  // the .grad vouched zero (weak: never keeps it alive); empty: none
};

// ---- grad mode ----
bool grad_mode_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// ---- recording ops ----
// True when grad mode is on and any input requires grad: only then is a node worth recording.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records `fn` as the backward of an op with the given inputs and outputs, if any input requires
// grad. The closure gets the output gradients and returns one gradient per input (in order; return
// an undefined Tensor for inputs that need none). Never capture an output in the closure (that
// makes a cycle): capture out.detach() instead.
void record(const std::string& name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            FunctionNode::Fn fn);
// Convenience for the common one-output case.
inline void record(const std::string& name, const std::vector<Tensor>& inputs, Tensor& output,
                   FunctionNode::Fn fn) {
  record(name, inputs, std::vector<Tensor*>{&output}, std::move(fn));
}

// The edge that a gradient for `t` flows along (its grad_fn, its accumulator, or none).
Edge gradient_edge(const Tensor& t);

// ---- zeroed gradients ----
// Records that `leaf`'s .grad holds zeros now and that nothing will write into it before the next
// backward: that backward's accumulation then copies instead of adding. The promise is the
// caller's, so only code that owns the gradient storage and knows the step's order makes it:
// dist::Reducer::zero_grad, called by the training loop right before forward (nothing in tandem
// writes a gradient between zero_grad and backward; optimizers, clipping and loss scaling all run
// after backward). The flag is consumed by the next accumulation into that leaf, and it is ignored
// when .grad was replaced since (set_grad), so it can only ever vouch for the tensor it was given.
// A leaf without a .grad is left alone.
void mark_grad_zero(const Tensor& leaf);
// How many accumulations on this thread copied into a known-zero .grad instead of adding (tests).
uint64_t zero_grad_copies();

// ---- accumulating into a pending gradient ----
// Where two gradient branches meet (a ResNet block's input feeds both its first conv and its
// shortcut), the engine keeps the first gradient to arrive as "pending" and adds each later one
// into it: one more pass over an activation-sized tensor (resnet50's "residual-gradient Add", 5.5 of
// 100 ms on an H100). The node that delivers a later gradient can do that addition in the kernel
// that produces it instead: inside its backward it calls pending_gradient(i, ...) for its input i,
// and if it gets a tensor, it adds its gradient into that tensor in place and returns that same
// tensor (the same TensorImpl) as its gradient for input i. The engine recognises it and adds
// nothing. The engine hands a pending gradient out only when
//   - BackendConfig::fused_grad_accumulation is on (core/backend.h; off reproduces the engine's add);
//   - a gradient for that input is pending, and the engine holds the only handle to it and to its
//     storage, which it covers whole: an in-place write can then not be seen by anyone else (not a
//     user's grad_roots, not a tensor a node returned for two inputs, not a view of a larger block);
//   - no other input of the same node feeds the same slot (x * x): two writers would race;
//   - its shape, dtype and device are the ones the caller passes (what it is about to produce).
// Otherwise it returns an undefined tensor, and the node returns a fresh gradient as before; a
// backward that never asks stays correct, and any op may adopt the contract on its own.
// Values: pending + new, in the engine's order. A CPU backward that finishes its gradient and then
// adds it in (ops::add_) gives the engine's bits exactly (tests/test_grad_accumulate.cpp); a GPU
// kernel that blends in its epilogue (beta = 1) rounds once where the engine rounds twice.
// Leaves and hooks: the pending gradient is the engine's buffer, never a leaf's .grad; AccumulateGrad
// still runs once per leaf with the complete sum, so grad-ready hooks (DDP's buckets) and
// accumulation across micro-steps (.grad += g) see what they saw before.
// Outside a node's backward it returns an undefined tensor.
Tensor pending_gradient(size_t input, const Shape& shape, DType dtype, const Device& device);
// How many times, on this thread, the engine summed two gradients with its own add (tests: a
// ResNet's backward with fused_grad_accumulation on makes none).
uint64_t gradient_sums();

// ---- before a module's backward ----
// Runs `hook` each time backward is about to run the node that produced `t` (its grad_fn): the
// gradient w.r.t. t is complete, and none of the nodes recorded while computing t has run yet.
// Registered on a module's output, it fires before the module's backward - FSDP's pre-backward
// hook, where ZeRO-3 gathers the module's parameters again (dist/zero3.h). t must have a grad_fn.
[[nodiscard]] HookHandle register_pre_backward_hook(const Tensor& t, std::function<void()> hook);

// ---- running backward ----
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots);
// Runs `cb` once the current backward has finished all nodes (must be called during a backward).
void queue_callback(std::function<void()> cb);

}  // namespace tandem::autograd
