// dist/zero_state.cpp: Zero::gather_state and gather_slices (dist/zero.h) - ZeRO's sharded
// optimizer state and masters, assembled unsharded.
//
// Checkpoints stay canonical (shard_layout.h): unsharded tensors by parameter name, so a run resumes
// at any world size and ZeRO stage, and under DDP or on one process. gather_slices rebuilds,
// bucket by bucket, exactly the name-keyed state an unsharded optimizer's state() returns
// ("fc.weight.exp_avg" with fc.weight's shape): one all-gather per bucket and state name, in f32
// whatever the parameters' dtype (optimizer state and masters are f32; a 16-bit trip would round
// them). Keys are "<param>.<state>", or "<param>" itself (AMP's f32 masters,
// optim::MasterWeights::state_slices()); "<param>.step" is taken from the rank owning element 0.
// Every rank first agrees on the state names (a rank may own little). Only `root` keeps the
// tensors: it holds the whole state while it writes (save_checkpoint takes the tensors at once);
// the other ranks hold one bucket's worth at a time. Loading needs nothing from here: every rank
// reads the unsharded tensors and each segment copies its range (Optimizer::load_state).
// Stage 3's weights are not here: they are read, whole, inside Zero::full_parameters().
// Only the collective is here: the members are declared with the rest of Zero, in dist/zero.h.
#include "dist/zero.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/autograd.h"

namespace tandem::dist {

optim::NamedTensors Zero::gather_state(const optim::Optimizer& opt, int root) const {
  return gather_slices(opt.state_slices(), root);
}

optim::NamedTensors Zero::gather_slices(const std::vector<optim::StateSlice>& slices, int root) const {
  autograd::NoGradGuard ng;
  std::map<std::string, size_t> index;  // parameter name -> index
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  // key "<param>.<suffix>": split at the longest parameter name that prefixes it.
  struct Parsed {
    size_t param;
    std::string suffix;
    const optim::StateSlice* slice;
  };
  std::vector<Parsed> parsed;
  std::set<std::string> suffixes;
  for (const optim::StateSlice& s : slices) {
    if (auto whole = index.find(s.key); whole != index.end()) {  // "<param>": an AMP master
      parsed.push_back({whole->second, "", &s});
      suffixes.insert("");
      continue;
    }
    const size_t dot = s.key.rfind('.');
    auto it = index.find(s.key.substr(0, dot));
    TANDEM_CHECK(dot != std::string::npos && it != index.end(), "internal: state key ", s.key, " names no parameter");
    parsed.push_back({it->second, s.key.substr(dot + 1), &s});
    suffixes.insert(s.key.substr(dot + 1));
  }
  // Every rank must run the same gathers: agree on the state names first (a rank may own little).
  std::string mine;
  for (const std::string& s : suffixes) mine += s + "\n";
  suffixes.clear();
  for (const std::string& all : all_gather_strings(comm_, mine))
    for (size_t a = 0, e; (e = all.find('\n', a)) != std::string::npos; a = e + 1) suffixes.insert(all.substr(a, e - a));
  // Which (parameter, state) exist, and the step counts: from the rank owning element 0.
  const size_t np = params_.size(), ns = suffixes.size();
  std::vector<std::string> names(suffixes.begin(), suffixes.end());
  std::vector<double> present(np * ns, 0.0);
  std::vector<char> owns_first(params_.size(), 0);  // this rank holds element 0 of the parameter
  for (const ShardPiece& pc : pieces_)
    if (pc.param_offset == 0) owns_first[pc.param] = 1;
  for (const Parsed& p : parsed) {
    if (p.slice->offset != 0 || !owns_first[p.param]) continue;  // "<name>.step" sits on every segment
    const size_t k = std::find(names.begin(), names.end(), p.suffix) - names.begin();
    present[p.param * ns + k] = p.suffix == "step" ? p.slice->value.item() + 1 : 1;  // +1: a step of 0 exists
  }
  sum_reduce()(present);
  optim::NamedTensors out;
  const bool keep = comm_.rank() == root;
  for (size_t k = 0; k < ns; ++k) {
    if (names[k] == "step") {
      for (size_t i = 0; i < np && keep; ++i)
        if (present[i * ns + k] > 0)
          out.emplace_back(params_[i].first + ".step", Tensor::full({}, present[i * ns + k] - 1, DType::F32));
      continue;
    }
    std::map<std::pair<size_t, int64_t>, Tensor> values;  // this rank's slices of this state
    for (const Parsed& p : parsed)
      if (p.suffix == names[k]) values[{p.param, p.slice->offset}] = p.slice->value;
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      const LayoutBucket& lb = layout_.buckets()[b];
      Tensor mine = own_slice(b, [&](const ShardPiece& pc) {
        auto it = values.find({pc.param, pc.param_offset});
        const Tensor& p = params_[pc.param].second;
        return it == values.end() ? Tensor::zeros({pc.length}, DType::F32, p.device())
                                  : it->second.view({pc.length}).to(DType::F32);
      }, DType::F32);
      Tensor all = Tensor::empty({mine.numel() * comm_.size()}, mine.dtype(), mine.device());
      comm_.all_gather(mine, all, "allgather state bucket " + std::to_string(b))->wait();
      for (size_t j = 0; j < lb.params.size() && keep; ++j)
        if (present[lb.params[j] * ns + k] > 0)
          out.emplace_back(params_[lb.params[j]].first + (names[k].empty() ? "" : "." + names[k]),
                           all.slice(lb.offsets[j], lb.offsets[j] + lb.lengths[j]).clone().view(
                               params_[lb.params[j]].second.shape()));
    }
  }
  return out;
}

}  // namespace tandem::dist
