// dist/collectives/same_model.cpp: the model signature and its comparison (see same_model.h).
#include "dist/collectives/same_model.h"

#include <sstream>

namespace tandem::dist {
namespace {

// One line per parameter/buffer: "parameter layer1.0.weight f32[64, 3, 3, 3]".
std::string signature(const Module& m) {
  std::string lines;
  for (auto& [name, t] : m.named_parameters())
    lines += "parameter " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()) + "\n";
  for (auto& [name, t] : m.named_buffers())
    lines += "buffer " + name + " " + dtype_name(t.dtype()) + shape_str(t.shape()) + "\n";
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

}  // namespace

void check_same_model(Communicator& comm, const Module& m) {
  std::vector<std::string> all = all_gather_strings(comm, signature(m));
  const std::vector<std::string> ref = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> other = split_lines(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    const std::string a = i < ref.size() ? ref[i] : "(nothing: its list ends here)";
    const std::string b = i < other.size() ? other[i] : "(nothing: its list ends here)";
    TANDEM_THROW("rank ", r, " built a different model than rank 0. First difference, entry #", i, ": rank 0 has '",
                 a, "', rank ", r, " has '", b, "'. Every rank must construct the same model (same arguments, "
                 "same order of registration) before wrapping it in DistributedDataParallel");
  }
}

}  // namespace tandem::dist
