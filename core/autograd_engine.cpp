// core/autograd_engine.cpp: backward(), the engine that runs a recorded graph (see autograd.h for the
// algorithm), and AccumulateGrad, which sums into a leaf's .grad. It adds gradients with the ops
// (ops::add, cast_raw), so it sits above them; the recording the ops call is core/autograd.cpp.
#include "core/autograd.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/backend.h"
#include "core/ops/copy/copy.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/profile.h"

namespace tandem::autograd {
namespace {
thread_local bool t_in_backward = false;  // guards against a re-entrant backward
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
// zero_grad_copies(): per thread, like the backward it counts, so ranks run as threads in one process
// (dist/transport/comm_thread.h) each count their own.
thread_local uint64_t t_zero_grad_copies = 0;
thread_local uint64_t t_gradient_sums = 0;  // gradient_sums()
// The running node's pending gradients it may add into (pending_gradient), one per next_edges
// entry, undefined where none is offered; null outside a node's apply.
thread_local const std::vector<Tensor>* t_offers = nullptr;


// a += b, creating a when absent. Gradients that meet at one node are summed out of place, unless
// b is a itself: the node that produced b added into the pending a in place (pending_gradient).
void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined() || (slot.defined() && slot.impl_ptr() == g.impl_ptr())) return;
  if (slot.defined()) ++t_gradient_sums;
  slot = slot.defined() ? ops::add(slot, g) : g;
}
// The engine's handle is the only one to g's impl and its storage, and g covers all of that
// storage: taking it as a leaf's .grad cannot alias any other tensor or pin a larger block.
bool sole_owner(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage() && g.storage().use_count() == 1 && g.storage_offset() == 0 &&
         g.nbytes() == g.storage()->bytes();
}
// The pending gradients `node` may add into (see pending_gradient): per next_edges entry, the
// pending tensor where the engine is its sole owner and no other edge of the node feeds that slot.
using PendingMap = std::unordered_map<Node*, std::vector<Tensor>>;
std::vector<Tensor> offers_for(const Node& node, PendingMap& pending) {
  std::vector<Tensor> offers(node.next_edges.size());
  for (size_t i = 0; i < node.next_edges.size(); ++i) {
    const Edge& e = node.next_edges[i];
    if (!e.fn) continue;
    bool shared = false;
    for (size_t j = 0; j < node.next_edges.size(); ++j)
      shared = shared || (j != i && node.next_edges[j].fn == e.fn && node.next_edges[j].input_nr == e.input_nr);
    auto it = pending.find(e.fn.get());
    if (shared || it == pending.end() || e.input_nr >= it->second.size()) continue;
    const Tensor& p = it->second[e.input_nr];
    if (p.defined() && sole_owner(p)) offers[i] = p;
  }
  return offers;
}
}  // namespace

Tensor pending_gradient(size_t input, const Shape& shape, DType dtype, const Device& device) {
  if (!t_offers || input >= t_offers->size()) return Tensor();
  const Tensor& p = (*t_offers)[input];
  if (!p.defined() || p.shape() != shape || p.dtype() != dtype || p.device() != device) return Tensor();
  return p;
}

uint64_t gradient_sums() { return t_gradient_sums; }

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grad_outputs) {
  auto leaf_impl = leaf_.lock();
  if (!leaf_impl || !grad_outputs[0].defined()) return {};
  Tensor leaf(leaf_impl);
  const Tensor& g = grad_outputs[0];
  TANDEM_CHECK(g.shape() == leaf.shape(), "gradient ", g.str(), " does not match its leaf ", leaf.str());
  Tensor cur = leaf.grad();
  // Consumed here: a later backward into the same .grad (gradient accumulation) adds again.
  const bool known_zero = cur.defined() && std::exchange(known_zero_, {}).lock() == cur.impl_ptr();
  if (cur.defined()) {
    const Tensor src = g.dtype() == cur.dtype() ? g : ops::cast_raw(g, cur.dtype());
    if (known_zero) {
      // 0 + g == g (up to the sign of a zero): skips reading the zeros; in place, .grad may be a bucket view.
      cur.copy_(src);
      ++t_zero_grad_copies;
    } else {
      ops::add_(cur, src);  // in place: .grad may be a bucket view
    }
  } else if (g.dtype() != leaf.dtype()) {
    leaf.set_grad(ops::cast_raw(g, leaf.dtype()));
  } else if (sole_owner(g)) {
    // Nobody else can see the incoming gradient: it becomes .grad as is. A clone would hold the
    // gradient twice at this moment (VGG-16's classifier: 392 MiB more peak under ZeRO-2, whose
    // .grad starts undefined every step).
    leaf.set_grad(std::move(grad_outputs[0]));
  } else {
    leaf.set_grad(g.clone());
  }
  // By index: a hook may drop hook handles, which erases from this vector.
  for (size_t k = 0; k < leaf_impl->grad_ready_hooks.size(); ++k) leaf_impl->grad_ready_hooks[k].second(leaf);
  return {};
}

uint64_t zero_grad_copies() { return t_zero_grad_copies; }

void queue_callback(std::function<void()> cb) {
  TANDEM_CHECK(t_callbacks != nullptr, "queue_callback must be called during a backward pass");
  t_callbacks->push_back(std::move(cb));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots) {
  TANDEM_CHECK(roots.size() == grad_roots.size(), "backward: ", roots.size(), " roots but ", grad_roots.size(),
               " gradients");
  TANDEM_CHECK(!t_in_backward, "backward called from inside a backward (re-entrant backward is not supported)");
  profile::Range range("backward");
  NoGradGuard no_grad;
  t_in_backward = true;
  std::vector<std::function<void()>> callbacks;
  t_callbacks = &callbacks;
  struct Reset {
    ~Reset() { t_in_backward = false; t_callbacks = nullptr; t_offers = nullptr; }
  } reset;

  // Seed gradients.
  std::unordered_map<Node*, std::vector<Tensor>> inputs;  // pending output-gradients per node
  std::vector<std::shared_ptr<Node>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TANDEM_CHECK(r.requires_grad(), "backward on ", r.str(),
                 " which does not require grad: no parameter it depends on requires grad (or it was computed under no_grad)");
    Tensor g = grad_roots[i];
    if (!g.defined()) {
      TANDEM_CHECK(r.numel() == 1, "backward on non-scalar ", r.str(), " needs an explicit gradient");
      g = Tensor::ones(r.shape(), r.dtype(), r.device());
    }
    TANDEM_CHECK(g.shape() == r.shape(), "backward: gradient ", g.str(), " does not match root ", r.str());
    Edge e = gradient_edge(r);
    auto& slot = inputs[e.fn.get()];
    slot.resize(e.fn->num_outputs);
    accumulate(slot[e.input_nr], g);
    seeds.push_back(e.fn);
  }

  // 1. Dependency counts: how many edges point at each node from the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& s : seeds)
    if (seen.insert(s.get()).second) stack.push_back(s.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // 2. Ready queue ordered by sequence number, newest first.
  auto later = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later)> ready(later);
  {
    std::unordered_set<Node*> queued;
    for (auto& s : seeds)
      if (deps[s.get()] == 0 && queued.insert(s.get()).second) ready.push(s);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(inputs[node.get()]);
    inputs.erase(node.get());
    grads.resize(node->num_outputs);
    bool has_grad = false;
    for (auto& g : grads) has_grad = has_grad || g.defined();
    std::vector<Tensor> out;
    if (has_grad) {  // a node that received nothing only passes the dependency count on
      node->pre_hooks.run();
      profile::Range node_range(node->name().c_str(), profile::Level::Op);
      // Offered after the pre-hooks (they may run anything) and withdrawn right after apply.
      const std::vector<Tensor> offers =
          backend().fused_grad_accumulation ? offers_for(*node, inputs) : std::vector<Tensor>();
      t_offers = &offers;
      struct Withdraw {
        ~Withdraw() { t_offers = nullptr; }
      } withdraw;
      out = node->apply(grads);
    }
    node->release();  // 3. free saved tensors as soon as they are used
    grads.clear();
    TANDEM_CHECK(out.size() == node->next_edges.size() || out.empty(), node->name(), " returned ", out.size(),
                 " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      if (!out.empty() && out[i].defined()) {
        auto& slot = inputs[e.fn.get()];
        slot.resize(e.fn->num_outputs);
        accumulate(slot[e.input_nr], out[i]);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
  for (auto& cb : callbacks) cb();
}

}  // namespace tandem::autograd
