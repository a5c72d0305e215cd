// tests/support/autograd_graph.h: what a recorded autograd graph holds, for tests that check which
// ops a forward ran (e.g. that the encoder's attention runs no head split or transpose).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace tandem::testing {

// How many nodes of each name the graph behind `root` holds (each node counted once).
inline std::map<std::string, int> graph_op_counts(const Tensor& root) {
  std::map<std::string, int> counts;
  std::set<const autograd::Node*> seen;
  std::vector<std::shared_ptr<autograd::Node>> todo;
  if (root.grad_fn()) todo.push_back(root.grad_fn());
  while (!todo.empty()) {
    std::shared_ptr<autograd::Node> n = todo.back();
    todo.pop_back();
    if (!seen.insert(n.get()).second) continue;
    ++counts[n->name()];
    for (const autograd::Edge& e : n->next_edges)
      if (e.fn) todo.push_back(e.fn);
  }
  return counts;
}

}  // namespace tandem::testing
