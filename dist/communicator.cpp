// dist/communicator.cpp: split's plan and all_gather_strings, over any communicator (see communicator.h).
#include "dist/communicator.h"

#include <algorithm>
#include <cstring>

namespace tandem::dist {

std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine) {
  const int n = c.size();
  const Device d = c.device();
  // The lengths first, so every rank sends the same number of words: the longest string's.
  Tensor len = Tensor::from_vector_i64({static_cast<int64_t>(mine.size())}, {1}, DType::I64, d);
  Tensor lens = Tensor::empty({n}, DType::I64, d);
  c.all_gather(len, lens, "all_gather_strings")->wait();
  const std::vector<int64_t> l = lens.to_vector_i64();
  const int64_t words = (*std::max_element(l.begin(), l.end()) + 7) / 8;  // characters packed into i64 words
  Tensor in = Tensor::zeros({words}, DType::I64), out = Tensor::empty({n * words}, DType::I64, d);
  if (!mine.empty()) std::memcpy(in.data_ptr(), mine.data(), mine.size());
  if (!d.is_cpu()) in = in.to(d);
  c.all_gather(in, out, "all_gather_strings")->wait();
  if (!d.is_cpu()) out = out.to(Device::cpu());
  std::vector<std::string> all(n);
  for (int r = 0; r < n; ++r) all[r].assign(static_cast<const char*>(out.data_ptr()) + r * words * 8, l[r]);
  return all;
}

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
