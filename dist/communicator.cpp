// dist/communicator.cpp: Communicator::split (rules in communicator.h) - the plan each backend's do_split
// builds its sub-communicator from, agreed through one all_gather of the parent.
#include "dist/communicator.h"

#include <algorithm>

namespace tandem::dist {

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  TANDEM_CHECK(color >= 0 && key >= 0, name, ": split takes a colour and a key >= 0, got colour ", color, " and key ",
               key, "; every rank must join some group");
  // Every rank's (colour, key), through this communicator's own collective: watched, and ordered
  // with the collectives before it.
  const Device d = device();
  Tensor mine = Tensor::from_vector_i64({color, key}, {2}, DType::I64, d);
  Tensor all = Tensor::empty({2 * size()}, DType::I64, d);
  all_gather(mine, all, name)->wait();
  const std::vector<int64_t> ck = all.to_vector_i64();  // on a GPU this waits for the collective
  SplitPlan plan;
  plan.color = color;
  plan.index = ++splits_;
  for (int r = 0; r < size(); ++r)
    if (ck[2 * r] == color) plan.members.push_back(r);
  // MPI_Comm_split's order: by key, ties by rank in the parent.
  std::stable_sort(plan.members.begin(), plan.members.end(),
                   [&](int a, int b) { return ck[2 * a + 1] < ck[2 * b + 1]; });
  plan.new_rank = static_cast<int>(std::find(plan.members.begin(), plan.members.end(), rank()) - plan.members.begin());
  return do_split(plan, name);
}

std::unique_ptr<Communicator> Communicator::do_split(const SplitPlan&, const std::string& name) {
  TANDEM_THROW(name, ": the ", backend(), " communicator cannot form sub-communicators");
}

}  // namespace tandem::dist
