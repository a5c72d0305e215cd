// dist/tp/mappings.h: the four autograd operators at the edges of a tensor-parallel region.
//
// Megatron-LM splits a transformer block's two GEMMs so that the activation between them never
// needs to be whole on any rank: the first GEMM's weight is split by output rows (column-parallel),
// each rank computes its slice of the hidden features, the second GEMM's weight is split by input
// columns (row-parallel), each rank computes a partial sum of the full output, and one all-reduce
// adds the partial sums. The operators below are where that region begins and ends. Each is its
// own conjugate's transpose, which is why forward and backward swap roles:
//
//   copy_to_tp_region     "f"   forward: identity            backward: all-reduce (sum) of the gradient
//   reduce_from_tp_region "g"   forward: all-reduce (sum)    backward: identity
//   gather_from_tp_region       forward: all-gather the last dim (rank order)   backward: keep my slice
//   scatter_to_tp_region        forward: keep my slice of the last dim          backward: all-gather
//
// Why f all-reduces in backward: every rank's slice of the region consumed the same replicated
// input x, so dL/dx is the sum over ranks of each slice's contribution. Why g needs nothing in
// backward: its output is replicated, so its gradient already is the whole gradient on every rank.
// One block = f ... g: one all-reduce forward (g), one backward (f). BERT's layer has two blocks
// (attention, MLP): 2 + 2 all-reduces of [B, S, H] per layer per step, and nothing else.
//
// All collectives run on the TP communicator `comm` and are waited for before the op returns (the
// next GEMM needs the result). On one rank every operator is the identity and records nothing.
// reduce_from_tp_region reduces its input IN PLACE (no copy of the activation): pass a fresh
// result that no recorded op saved for its backward - a GEMM's output or a lookup's, as the layers
// here do (core/ops/elementwise/elementwise.h's relu_ states the same contract).
#pragma once
#include "core/tensor.h"
#include "dist/communicator.h"

namespace tandem::dist::tp {

Tensor copy_to_tp_region(const Tensor& x, Communicator& comm);
Tensor reduce_from_tp_region(const Tensor& x, Communicator& comm);
// x [..., c] on every rank -> [..., T * c], rank t's x in columns [t c, (t + 1) c).
Tensor gather_from_tp_region(const Tensor& x, Communicator& comm);
// x [..., T * c] (replicated) -> [..., c], this rank's columns.
Tensor scatter_to_tp_region(const Tensor& x, Communicator& comm);

}  // namespace tandem::dist::tp
