// dist/tp/shard.h: canonical state dicts <-> this TP rank's shards (checkpoints that ignore TP).
//
// A checkpoint keeps the canonical model: Hugging Face's names and unsplit layouts, whatever the TP
// size that wrote it. A TpLayout says, per canonical parameter name, how TP splits it:
//   dim 0, even   ColumnParallelLinear weights and biases (query/key/value, intermediate.dense)
//   dim 1, even   RowParallelLinear weights (attention.output.dense, output.dense)
//   dim 0, vocab  the word embeddings and cls.predictions.bias (tp/layers.h vocab_shard: no padding)
//   absent        replicated: every rank holds the whole tensor
// The same rule covers every other tensor keyed by a parameter: the optimizer's "<name>.exp_avg" and
// "<name>.exp_avg_sq" (optim/optimizer.h), AMP's "amp.master.<name>" and the weights' average
// "ema.<name>" are split when their shape is the parameter's; "<name>.step" (a 0-d count) is not,
// so it stays replicated.
//   shard_state_dict    canonical -> rank r's shard (a TP run loads a DDP checkpoint)
//   assemble_state_dict every rank's shard -> canonical (pure, for tools and tests)
//   gather_state_dict   the same over the TP communicator: all_gathers, so every rank of the group
//                       ends with the canonical tensors (a DDP run loads a TP checkpoint; rank 0 writes)
// Replicated tensors are taken from this rank (they are identical on every rank of the group).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"  // defines: NamedTensors
#include "dist/communicator.h"
#include "dist/tp/layers.h"
#include "layers/transformer.h"

namespace tandem::dist::tp {

using NamedTensors = safetensors::NamedTensors;

struct Split {
  int dim = 0;         // the split dimension of the canonical tensor
  int64_t full = 0;    // its canonical size along dim
  bool vocab = false;  // vocab_shard's balanced split instead of even_shard's
  ShardRange range(int rank, int ranks) const;
};
using TpLayout = std::map<std::string, Split>;  // canonical parameter name -> split; absent = replicated

// The splits of TpBertForMaskedLM (tp/bert.h) for a model of config `cfg`, any TP size.
TpLayout bert_tp_layout(const BertConfig& cfg);

// The split that applies to `key` holding a tensor of `shape` - the parameter's own entry, or the
// one of the parameter it is keyed by ("<param>.<state>", "amp.master.<param>", "ema.<param>") when `shape` has
// the split dimension; null when the tensor is replicated. `canonical`: shape is the unsplit one
// (else the shard's, at `rank` of `ranks`).
const Split* split_of(const TpLayout& layout, const std::string& key, const Shape& shape, bool canonical, int rank,
                      int ranks);

// Rank r's tensors: each split tensor sliced (a copy), the replicated ones shared as they are.
NamedTensors shard_state_dict(const NamedTensors& canonical, const TpLayout& layout, int rank, int ranks);
// shards[r] is rank r's state dict (same names, same order on every rank) -> the canonical one,
// on the CPU.
NamedTensors assemble_state_dict(const std::vector<NamedTensors>& shards, const TpLayout& layout);
// assemble_state_dict over `tp` (every rank of the group calls it with its own shards, in the same
// name order): one all_gather per split tensor, padded to the largest shard where the vocabulary
// split is uneven. Returns CPU tensors on every rank.
NamedTensors gather_state_dict(const NamedTensors& mine, const TpLayout& layout, Communicator& tp);

}  // namespace tandem::dist::tp
