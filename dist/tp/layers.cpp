// dist/tp/layers.cpp: the shard ranges, the shard draws and the three parallel layers (see layers.h).
#include "dist/tp/layers.h"

#include <cmath>

#include "core/ops/embedding/embedding.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/matmul/matmul.h"
#include "dist/tp/mappings.h"

namespace tandem::dist::tp {

ShardRange even_shard(int64_t full, int rank, int ranks, const std::string& what) {
  TANDEM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "even_shard: rank ", rank, " is not in a TP group of ", ranks);
  TANDEM_CHECK(full % ranks == 0, what, " (", full, ") must be a multiple of the tensor parallel size ", ranks,
               ": each TP rank holds an equal slice. Pick a TP size that divides it");
  return {rank * (full / ranks), full / ranks};
}

ShardRange vocab_shard(int64_t full, int rank, int ranks) {
  TANDEM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "vocab_shard: rank ", rank, " is not in a TP group of ", ranks);
  TANDEM_CHECK(full >= ranks, "the vocabulary (", full, " rows) is smaller than the tensor parallel size ", ranks);
  const int64_t base = full / ranks, extra = full % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

namespace {

// Runs draw(run, positioned) for each contiguous run of the shard, `positioned` being a generator
// at the counter where the whole tensor's draw reaches that run's first element (`per` counters
// per element: 2 for normal_'s Box-Muller pairs, 1 for uniform_), then advances `gen` past the
// whole draw, as drawing the unsplit tensor would.
template <class Draw>
void draw_shard(Tensor& shard, const Shape& full, int dim, ShardRange range, uint64_t per, Generator& gen, Draw draw) {
  TANDEM_CHECK((dim == 0 && !full.empty()) || (dim == 1 && full.size() == 2), "draw_shard: splits dimension 0 of a "
               "tensor or dimension 1 of a matrix, got dimension ", dim, " of ", full.size());
  Shape expect = full;
  expect[dim] = range.size;
  check_shape(shard, expect, "draw_shard", "shard");
  const int64_t numel = shape_numel(full), rows = full[0], cols = numel / rows;
  const uint64_t base = gen.advance(per * static_cast<uint64_t>(numel));
  Generator at(gen.seed());
  Tensor s = shard.detach();  // parameters require grad; their storage is what is written
  if (dim == 0) {  // rows [start, start + size): one run
    at.set_state(gen.seed(), base + per * static_cast<uint64_t>(range.start * cols));
    draw(s, at);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {  // columns [start, start + size) of each row
    Tensor run = s.slice(i, i + 1);
    at.set_state(gen.seed(), base + per * static_cast<uint64_t>(i * cols + range.start));
    draw(run, at);
  }
}

}  // namespace

void normal_shard_(Tensor& shard, const Shape& full, int dim, ShardRange range, double mean, double stddev,
                   Generator& gen) {
  draw_shard(shard, full, dim, range, 2, gen, [&](Tensor& run, Generator& g) { normal_(run, mean, stddev, g); });
}

void uniform_shard_(Tensor& shard, const Shape& full, int dim, ShardRange range, double lo, double hi,
                    Generator& gen) {
  draw_shard(shard, full, dim, range, 1, gen, [&](Tensor& run, Generator& g) { uniform_(run, lo, hi, g); });
}

// ---- ColumnParallelLinear ----

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features, Communicator& comm,
                                           ColumnParallelOptions options, Generator* gen)
    : in_(in_features), out_(out_features), comm_(&comm), opt_(options) {
  TANDEM_CHECK(in_ > 0 && out_ > 0, "ColumnParallelLinear(", in_, ", ", out_, "): feature counts must be positive");
  rows_ = even_shard(out_, comm.rank(), comm.size(), "ColumnParallelLinear's out_features");
  weight_ = register_parameter("weight", Tensor::empty({rows_.size, in_}));
  if (opt_.bias) bias_ = register_parameter("bias", Tensor::empty({rows_.size}));
  if (gen) reset_parameters(*gen);
}

void ColumnParallelLinear::reset_parameters(Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));  // Linear's default, fan_in = in
  uniform_shard_(weight_, {out_, in_}, 0, rows_, -bound, bound, gen);
  if (bias_.defined()) uniform_shard_(bias_, {out_}, 0, rows_, -bound, bound, gen);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() >= 1 && x.size(-1) == in_, "ColumnParallelLinear(in_features=", in_, "): input ", x.str(),
               " has the wrong last dimension");
  Tensor y = ops::linear(copy_to_tp_region(x, *comm_), weight_, bias_);
  return opt_.gather_output ? gather_from_tp_region(y, *comm_) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) + " (rows " +
         std::to_string(rows_.start) + ".." + std::to_string(rows_.start + rows_.size) + " here), bias=" +
         (bias_.defined() ? "True" : "False");
}

// ---- RowParallelLinear ----

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, Communicator& comm,
                                     RowParallelOptions options, Generator* gen)
    : in_(in_features), out_(out_features), comm_(&comm), opt_(options) {
  TANDEM_CHECK(in_ > 0 && out_ > 0, "RowParallelLinear(", in_, ", ", out_, "): feature counts must be positive");
  cols_ = even_shard(in_, comm.rank(), comm.size(), "RowParallelLinear's in_features");
  weight_ = register_parameter("weight", Tensor::empty({out_, cols_.size}));
  if (opt_.bias) bias_ = register_parameter("bias", Tensor::empty({out_}));
  if (gen) reset_parameters(*gen);
}

void RowParallelLinear::reset_parameters(Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));  // the whole layer's fan_in
  uniform_shard_(weight_, {out_, in_}, 1, cols_, -bound, bound, gen);
  if (bias_.defined()) uniform_(bias_, -bound, bound, gen);  // replicated: the whole draw on every rank
}

Tensor RowParallelLinear::reduced_without_bias(const Tensor& x) {
  const int64_t expect = opt_.input_is_parallel ? cols_.size : in_;
  TANDEM_CHECK(x.dim() >= 1 && x.size(-1) == expect, "RowParallelLinear(in_features=", in_, "): input ", x.str(),
               " should end in ", expect, opt_.input_is_parallel ? " (this rank's slice of the features)" : "");
  Tensor mine = opt_.input_is_parallel ? x : scatter_to_tp_region(x, *comm_);
  return reduce_from_tp_region(ops::linear(mine, weight_), *comm_);  // a fresh GEMM output: reduced in place
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor y = reduced_without_bias(x);
  return bias_.defined() ? ops::add(y, bias_) : y;
}

std::string RowParallelLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_) + " (columns " + std::to_string(cols_.start) + ".." +
         std::to_string(cols_.start + cols_.size) + " here), out_features=" + std::to_string(out_) +
         ", bias=" + (bias_.defined() ? "True" : "False");
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, Communicator& comm,
                                               Generator* gen)
    : num_(num_embeddings), dim_(embedding_dim), comm_(&comm) {
  TANDEM_CHECK(num_ > 0 && dim_ > 0, "VocabParallelEmbedding(", num_, ", ", dim_, "): sizes must be positive");
  rows_ = vocab_shard(num_, comm.rank(), comm.size());
  weight_ = register_parameter("weight", Tensor::empty({rows_.size, dim_}));
  if (gen) reset_parameters(*gen);
}

void VocabParallelEmbedding::reset_parameters(Generator& gen) {
  normal_shard_(weight_, {num_, dim_}, 0, rows_, 0.0, 1.0, gen);  // Embedding's N(0, 1)
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  // The lookup is a fresh tensor nobody saved: reduced in place.
  return reduce_from_tp_region(ops::embedding_shard(ids, weight_, rows_.start, num_), *comm_);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return std::to_string(num_) + ", " + std::to_string(dim_) + " (rows " + std::to_string(rows_.start) + ".." +
         std::to_string(rows_.start + rows_.size) + " here)";
}

}  // namespace tandem::dist::tp
