// dist/tp/layers.h: Megatron-LM's tensor-parallel layers, each holding this rank's shard of the
// canonical (unsplit) layer's parameters under the canonical names "weight" and "bias".
//
//   ColumnParallelLinear  y = x A^T + b, A [out, in] split by OUTPUT rows: rank r holds A_r
//                         [out/T, in] and b_r [out/T] and computes y_r = f(x) A_r^T + b_r, its slice
//                         of y's features (f = copy_to_tp_region: identity forward, all-reduce of
//                         dL/dx backward). gather_output all-gathers the slices into y (tests; BERT
//                         keeps them split for the row-parallel layer that follows).
//   RowParallelLinear     A [out, in] split by INPUT columns: rank r holds A_r [out, in/T] and
//                         computes x_r A_r^T, a partial sum of y; g = reduce_from_tp_region adds
//                         the partial sums (all-reduce forward, identity backward), then the
//                         replicated bias b [out] is added once. input_is_parallel = false first
//                         takes this rank's slice of a replicated x (scatter_to_tp_region).
//   VocabParallelEmbedding  the table [V, D] split by rows (the vocabulary): rank r looks up the
//                         ids in its range and writes zeros for the others (ops::embedding_shard);
//                         g adds the T partial lookups, so every id gets exactly its row.
//
// Splits: out (column), in (row) must be multiples of T (Megatron's divide(): heads and FFN width
// are); the vocabulary need not be - vocab_shard gives the first V % T ranks one row more, so a
// canonical checkpoint with BERT's 30522 tokens splits at any T without padding rows.
// Init (reset_parameters): this shard of the values the unsplit layer would draw from the same
// generator (PyTorch's defaults: Linear's U(+-1/sqrt(in)), Embedding's N(0, 1)), because tandem's
// draws are counter-based (core/random.h): the shards of T ranks assemble into the unsplit layer's
// init bit for bit. gen = nullptr leaves the shard uninitialised (a model's own init follows).
#pragma once
#include <cstdint>
#include <string>

#include "core/random.h"
#include "dist/communicator.h"
#include "layers/module.h"

namespace tandem::dist::tp {

// The slice [start, start + size) of a dimension of `full` elements that one rank holds.
struct ShardRange {
  int64_t start = 0;
  int64_t size = 0;
};
// full / T each; full must be a multiple of T (`what` names the dimension in the error).
ShardRange even_shard(int64_t full, int rank, int ranks, const std::string& what);
// Balanced: sizes full / T or full / T + 1, the larger ones first (numpy.array_split's rule).
ShardRange vocab_shard(int64_t full, int rank, int ranks);

// Fills `shard` - the slice `range` along dimension `dim` (0 or 1) of a tensor of shape `full` -
// with exactly the values normal_ (or uniform_) would put there if it drew the whole tensor from
// `gen`, and advances `gen` by that whole draw (core/random.h: every element has its own counters).
void normal_shard_(Tensor& shard, const Shape& full, int dim, ShardRange range, double mean, double stddev,
                   Generator& gen);
void uniform_shard_(Tensor& shard, const Shape& full, int dim, ShardRange range, double lo, double hi,
                    Generator& gen);

struct ColumnParallelOptions {
  bool bias = true;            // b_r [out/T]
  bool gather_output = false;  // all-gather y's slices into the whole y (Megatron's default is true;
                               // inside a transformer block it is always false)
};

class ColumnParallelLinear : public Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, Communicator& comm,
                       ColumnParallelOptions options = {}, Generator* gen = &default_generator());
  Tensor forward(const Tensor& x) override;  // x [..., in] replicated -> [..., out/T] (or [..., out])
  std::string type_name() const override { return "ColumnParallelLinear"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }  // [out/T, in]
  const Tensor& bias() const { return bias_; }      // [out/T]; undefined without bias
  ShardRange rows() const { return rows_; }         // this rank's output features
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }     // the whole layer's

 private:
  int64_t in_, out_;
  Communicator* comm_;
  ColumnParallelOptions opt_;
  ShardRange rows_;
  Tensor weight_, bias_;
};

struct RowParallelOptions {
  bool bias = true;               // b [out], replicated, added after the all-reduce
  bool input_is_parallel = true;  // x is already this rank's slice [..., in/T] (a column-parallel output)
};

class RowParallelLinear : public Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, Communicator& comm, RowParallelOptions options = {},
                    Generator* gen = &default_generator());
  Tensor forward(const Tensor& x) override;  // -> [..., out] replicated
  // The all-reduced x_r A_r^T without the bias, for a caller that fuses the bias into what follows
  // (the transformer's bias + dropout + residual, ops::bias_dropout_add).
  Tensor reduced_without_bias(const Tensor& x);
  std::string type_name() const override { return "RowParallelLinear"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }  // [out, in/T]
  const Tensor& bias() const { return bias_; }      // [out]
  ShardRange columns() const { return cols_; }      // this rank's input features
  int64_t in_features() const { return in_; }       // the whole layer's
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Communicator* comm_;
  RowParallelOptions opt_;
  ShardRange cols_;
  Tensor weight_, bias_;
};

class VocabParallelEmbedding : public Module {
 public:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, Communicator& comm,
                         Generator* gen = &default_generator());
  Tensor forward(const Tensor& ids) override;  // ids [...] in [0, V) -> [..., D] replicated
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }  // [Vr, D]: rows rows().start ... of the table
  ShardRange rows() const { return rows_; }
  int64_t num_embeddings() const { return num_; }  // V, the whole vocabulary

 private:
  int64_t num_, dim_;
  Communicator* comm_;
  ShardRange rows_;
  Tensor weight_;
};

}  // namespace tandem::dist::tp
