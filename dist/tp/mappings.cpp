// dist/tp/mappings.cpp: the f/g operators and the last-dim gather/scatter as autograd nodes (see mappings.h).
//
// An all_gather returns rank-major chunks [T, K, c] (K = rows of x); the last-dim concatenation is
// [K, T, c], one transpose12 away on a [1, T, K, c] view. The backward of a gather keeps this
// rank's chunk of that transpose, the forward of a scatter the same.
#include "dist/tp/mappings.h"

#include <utility>

#include "core/autograd.h"
#include "core/ops/shape/shape.h"

namespace tandem::dist::tp {
namespace {

// [..., T c] -> this rank's [..., c] (a copy).
Tensor my_slice(const Tensor& x, int rank, int size) {
  const int64_t total = x.size(-1);
  TANDEM_CHECK(total % size == 0, "scatter_to_tp_region: the last dimension ", total, " of ", x.str(),
               " must be a multiple of the TP size ", size);
  const int64_t c = total / size, k = x.numel() / total;
  autograd::NoGradGuard no_grad;
  Tensor rank_major = ops::transpose12(x.detach().view({1, k, size, c})).view({size, k * c});
  Shape shape = x.shape();
  shape.back() = c;
  return rank_major.slice(rank, rank + 1).clone().view(shape);
}

// Every rank's [..., c] -> [..., T c] in rank order.
Tensor gather_last(const Tensor& x, Communicator& comm, const char* name) {
  const int t = comm.size();
  const int64_t c = x.size(-1), k = x.numel() / c;
  Tensor in = x.detach().clone().view({k * c});  // a private, contiguous send buffer
  Tensor out = Tensor::empty({t * k * c}, x.dtype(), x.device());
  comm.all_gather(in, out, name)->wait();
  autograd::NoGradGuard no_grad;
  Shape shape = x.shape();
  shape.back() = t * c;
  return ops::transpose12(out.view({1, t, k, c})).view(shape);
}

}  // namespace

Tensor copy_to_tp_region(const Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  Tensor y = x.detach();
  autograd::record("CopyToTpRegionBackward", {x}, y, [&comm](std::vector<Tensor>& g) {
    // The incoming gradient may be shared with another consumer (an add's backward hands the same
    // tensor to both inputs): reduce a copy.
    Tensor sum = g[0].clone();
    comm.all_reduce(sum, ReduceOp::Sum, "tp f backward")->wait();
    return std::vector<Tensor>{sum};
  });
  return y;
}

Tensor reduce_from_tp_region(const Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  Tensor y = x.detach();
  comm.all_reduce(y, ReduceOp::Sum, "tp g forward")->wait();  // in place: see mappings.h
  autograd::record("ReduceFromTpRegionBackward", {x}, y,
                   [](std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return y;
}

Tensor gather_from_tp_region(const Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  Tensor y = gather_last(x, comm, "tp gather forward");
  autograd::record("GatherFromTpRegionBackward", {x}, y, [&comm](std::vector<Tensor>& g) {
    return std::vector<Tensor>{my_slice(g[0], comm.rank(), comm.size())};
  });
  return y;
}

Tensor scatter_to_tp_region(const Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  Tensor y = my_slice(x, comm.rank(), comm.size());
  autograd::record("ScatterToTpRegionBackward", {x}, y, [&comm](std::vector<Tensor>& g) {
    return std::vector<Tensor>{gather_last(g[0], comm, "tp scatter backward")};
  });
  return y;
}

}  // namespace tandem::dist::tp
