// tests/test_bn_relu_cpu.cpp: the CPU's fused batch_norm_relu / batch_norm_add_relu (training mode)
// against their compositions relu(batch_norm(x) [+ z]), byte for byte: y, dx, dz, dweight, dbias and
// the running statistics, in f32 and f64, with exact zeros at ReLU's kink and NaNs (the
// composition's rule: relu(NaN) = NaN, dy passes where y is NaN); that the fused op records one
// node; an f64 gradient check of each; and the CPU batch-norm kernels (plain and fused) giving the
// same bytes on 1 and 2 threads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/ops/batchnorm/kernels.h"
#include "core/ops/ops.h"
#include "core/threads.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {

using Tail = ops::BatchNormTail;

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// Random [.., C] inputs of dtype dt with what the mask must get right: channel 0 has weight 0 and
// bias 0, so bn(x) is exactly 0 there (ReLU's kink, gradient 0); z (AddRelu) is exactly 0 on every
// 7th element, and x has exact zeros and negative values; `nan` puts a NaN into z at one element
// (AddRelu) or into x (Relu: its whole channel becomes NaN through the statistics).
struct Inputs {
  Tensor x, z, w, b, rm, rv, dy;
};
Inputs make_inputs(const Shape& shape, DType dt, Tail tail, bool nan, uint64_t seed) {
  const int64_t C = shape.back();
  Inputs in;
  std::vector<double> x = rand_f64(shape, seed, -2, 3, false).to_vector_f64();
  for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0;
  std::vector<double> z = rand_f64(shape, seed + 1, -1.5, 1.5, false).to_vector_f64();
  for (size_t i = 0; i < z.size(); i += 7) z[i] = 0.0;
  std::vector<double> w = rand_f64({C}, seed + 2, 0.5, 1.5, false).to_vector_f64();
  std::vector<double> b = rand_f64({C}, seed + 3, -1, 1, false).to_vector_f64();
  w[0] = b[0] = 0.0;
  if (nan) (tail == Tail::AddRelu ? z : x)[x.size() / 2 + 1] = std::numeric_limits<double>::quiet_NaN();
  in.x = Tensor::from_vector_f64(x, shape, dt);
  in.z = tail == Tail::AddRelu ? Tensor::from_vector_f64(z, shape, dt) : Tensor();
  in.w = Tensor::from_vector_f64(w, {C}, dt);
  in.b = Tensor::from_vector_f64(b, {C}, dt);
  in.rm = rand_f64({C}, seed + 4, -0.5, 0.5, false).to(dt);
  in.rv = rand_f64({C}, seed + 5, 0.5, 2, false).to(dt);
  in.dy = rand_f64(shape, seed + 6, -1, 1, false).to(dt);
  return in;
}

// One training step of the op (fused: the op; else the composition), on fresh leaves: y, the
// gradients of x, z, weight, bias (backward from in.dy) and the running statistics after it.
struct Outputs {
  Tensor y, dx, dz, dw, db, rm, rv;
  std::string node;
};
Outputs step(const Inputs& in, Tail tail, bool fused) {
  Outputs o;
  Tensor x = in.x.clone().set_requires_grad(true), w = in.w.clone().set_requires_grad(true),
         b = in.b.clone().set_requires_grad(true);
  Tensor z = in.z.defined() ? in.z.clone().set_requires_grad(true) : Tensor();
  o.rm = in.rm.clone(), o.rv = in.rv.clone();
  if (fused)
    o.y = tail == Tail::AddRelu ? ops::batch_norm_add_relu(x, z, w, b, o.rm, o.rv, true, 0.1, 1e-5)
                                : ops::batch_norm_relu(x, w, b, o.rm, o.rv, true, 0.1, 1e-5);
  else {
    o.y = ops::batch_norm(x, w, b, o.rm, o.rv, true, 0.1, 1e-5);
    if (tail == Tail::AddRelu) o.y = ops::add(o.y, z);
    o.y = ops::relu(o.y);
  }
  o.node = o.y.grad_fn() ? o.y.grad_fn()->name() : "";
  o.y.backward(in.dy);
  o.y = o.y.detach();
  o.dx = x.grad(), o.dw = w.grad(), o.db = b.grad();
  if (z.defined()) o.dz = z.grad();
  return o;
}

void check_fused_equals_composed(const Shape& shape, DType dt, Tail tail, bool nan, uint64_t seed) {
  INFO(shape_str(shape), " ", std::string(dtype_name(dt)), std::string(tail == Tail::AddRelu ? " add_relu" : " relu"),
       std::string(nan ? " NaN" : ""));
  Inputs in = make_inputs(shape, dt, tail, nan, seed);
  Outputs f = step(in, tail, true), c = step(in, tail, false);
  CHECK(f.node == (tail == Tail::AddRelu ? "BatchNormAddReluBackward" : "BatchNormReluBackward"));
  CHECK(same_bytes(f.y, c.y));
  CHECK(same_bytes(f.dx, c.dx));
  CHECK(same_bytes(f.dz, c.dz));
  CHECK(same_bytes(f.dw, c.dw));
  CHECK(same_bytes(f.db, c.db));
  CHECK(same_bytes(f.rm, c.rm));
  CHECK(same_bytes(f.rv, c.rv));
  // The cases the mask must get right did occur: exact zeros in y (channel 0), positive outputs, and
  // (nan) NaNs in y. A NaN in x (Relu) spoils its channel's statistics, so dx is NaN there; a NaN in z
  // (AddRelu) makes one y NaN, where dz passes dy (fn::ReluBackward's rule), and dx stays finite.
  std::vector<double> y = f.y.to_vector_f64(), dx = f.dx.to_vector_f64();
  size_t zeros = 0, positive = 0, nan_y = 0, nan_dx = 0;
  for (double v : y) zeros += v == 0.0, positive += v > 0.0, nan_y += std::isnan(v);
  for (double v : dx) nan_dx += std::isnan(v);
  CHECK(zeros > 0);
  CHECK(positive > 0);
  CHECK((nan_y > 0) == nan);
  CHECK((nan_dx > 0) == (nan && tail == Tail::Relu));
  if (nan && tail == Tail::AddRelu) {
    const size_t i = y.size() / 2 + 1;
    CHECK(std::isnan(y[i]));
    CHECK(f.dz.to_vector_f64()[i] == in.dy.to_vector_f64()[i]);
    CHECK(in.dy.to_vector_f64()[i] != 0.0);
  }
}

}  // namespace

TEST_CASE("fused CPU batch_norm_relu / batch_norm_add_relu: the composition's bytes, one node") {
  // Small shapes (one thread) and ones above the kernels' parallel threshold (C not a multiple of the
  // channel block, so blocks end mid-row), NHWC and [N, C].
  for (Shape shape : {Shape{2, 3, 3, 5}, Shape{7, 4}, Shape{8, 32, 32, 40}, Shape{4, 34, 34, 64}})
    for (DType dt : {DType::F32, DType::F64})
      for (Tail tail : {Tail::Relu, Tail::AddRelu})
        for (bool nan : {false, true}) check_fused_equals_composed(shape, dt, tail, nan, 100 + shape[0]);
}

TEST_CASE("fused CPU ops: gradients without weight or running stats, and for inputs that do not all need one") {
  Tensor none, rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
  auto f_add = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm_add_relu(in[0], in[1], none, none, none, none, true, 0.1, 1e-5);
  };
  CHECK(gradcheck(f_add, {rand_f64({3, 2, 2, 3}, 201, -2, 2), rand_f64({3, 2, 2, 3}, 202, -1, 1)}) == "");
  auto f_relu = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm_relu(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5);
  };
  CHECK(gradcheck(f_relu, {rand_f64({6, 3}, 203, -2, 2), rand_f64({3}, 204, 0.5, 1.5), rand_f64({3}, 205, -1, 1)}) ==
        "");
  // z alone requires grad (x is data): dz is the masked dy, the same bytes as the composition's.
  Tensor x = rand_f64({4, 3, 3, 8}, 206, -2, 2, false), z = rand_f64({4, 3, 3, 8}, 207, -1, 1);
  Tensor z2 = z.detach().clone().set_requires_grad(true), dy = rand_f64({4, 3, 3, 8}, 208, -1, 1, false);
  ops::batch_norm_add_relu(x, z, none, none, none, none, true).backward(dy);
  ops::relu(ops::add(ops::batch_norm(x, none, none, none, none, true), z2)).backward(dy);
  CHECK(same_bytes(z.grad(), z2.grad()));
}

TEST_CASE("CPU batch norm kernels: the same bytes on 1 and 2 threads (plain, ReLU, add + ReLU)") {
  const CpuThreads before = configured_cpu_threads();
  const Shape shape{8, 32, 32, 40};  // 327,680 values: above the parallel threshold (2^18)
  CHECK(kernels::batchnorm_cpu_threads(shape_numel(shape)) >= 1);
  for (DType dt : {DType::F32, DType::F64})
    for (int tail = 0; tail < 3; ++tail) {
      INFO(dtype_name(dt), " tail ", tail);
      Inputs in = make_inputs(shape, dt, tail == 2 ? Tail::AddRelu : Tail::Relu, false, 300 + tail);
      Outputs o[2];
      for (int t : {1, 2}) {
        set_cpu_threads(CpuThreads{t, 2, "test"});
        if (kernels::batchnorm_cpu_threads(0) == 0) {
          MESSAGE("this build's CPU batch norm is single-threaded (no OpenMP): comparing one path with itself");
        } else {
          CHECK(kernels::batchnorm_cpu_threads(shape_numel(shape)) == t);
          CHECK(kernels::batchnorm_cpu_threads(1000) == 1);  // below the threshold: no fork
        }
        if (tail == 0) {
          Tensor x = in.x.clone().set_requires_grad(true), w = in.w.clone().set_requires_grad(true),
                 b = in.b.clone().set_requires_grad(true);
          o[t - 1].rm = in.rm.clone(), o[t - 1].rv = in.rv.clone();
          o[t - 1].y = ops::batch_norm(x, w, b, o[t - 1].rm, o[t - 1].rv, true, 0.1, 1e-5);
          o[t - 1].y.backward(in.dy);
          o[t - 1].y = o[t - 1].y.detach();
          o[t - 1].dx = x.grad(), o[t - 1].dw = w.grad(), o[t - 1].db = b.grad();
        } else {
          o[t - 1] = step(in, tail == 2 ? Tail::AddRelu : Tail::Relu, true);
        }
      }
      CHECK(same_bytes(o[0].y, o[1].y));
      CHECK(same_bytes(o[0].dx, o[1].dx));
      CHECK(same_bytes(o[0].dz, o[1].dz));
      CHECK(same_bytes(o[0].dw, o[1].dw));
      CHECK(same_bytes(o[0].db, o[1].db));
      CHECK(same_bytes(o[0].rm, o[1].rm));
      CHECK(same_bytes(o[0].rv, o[1].rv));
    }
  set_cpu_threads(before.threads > 0 ? before : CpuThreads{1, 1, "test"});
}
