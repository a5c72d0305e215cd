// dist/collectives/strings.cpp: all_gather_strings over any communicator (see strings.h).
#include "dist/collectives/strings.h"

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

}  // namespace tandem::dist
