// tests/gpu_vector_access_parity.cpp: the edge cases of the 16-byte vectorised CUDA maps
// (core/ops/common/cuda/vector_access.cuh, vector_width.h) and of the 2-D bias-gradient reduction
// (column_reduce.cuh), CPU vs CUDA in f32, bf16 and f16, forward and backward:
//   - views whose data pointer is 1 element (2 or 4 bytes) past a 16-byte boundary, as inputs, as
//     the upstream gradient, and as the target of in-place relu_/add_, with sentinel elements on
//     both sides of the view so a write past either end fails the test;
//   - a view shifted by exactly 16 bytes (aligned again: the vector path on a view);
//   - sizes that are not a multiple of the vector width (4 f32, 8 f16/bf16), and one element;
//   - bias widths that vectorise for f32 but not for 16-bit (C = 12), and never (C = 37);
//   - bias gradients with many rows and few channels (multi-chunk partials, one column block) and
//     few rows and many channels (one chunk, thousands of column blocks);
//   - a tensor of more than 2^31 elements (64-bit indices), checked at its head and tail.
// The CPU path is the reference; inputs are fresh random values rounded to the dtype first, so
// both backends read the same numbers. Tolerances: one rounding of an f32 result to the dtype
// (tests/support/parity.h rounded_once), widened where column sums of many rows are compared.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {
const Device kGpu = Device::cuda(0);
const PerDtype rounded_once = testing::rounded_once("f32: libm vs CUDA math functions, f32 vs double row sums");
constexpr float kSentinel = -7.25f;  // exact in bf16 and f16; relu or an add would change it
constexpr int64_t kGuard = 9;        // sentinel elements after a view (and `shift` before it)

Tensor rounded(const Tensor& t, DType dt) { return ops::cast_raw(ops::cast_raw(t, dt), DType::F32); }
bool misaligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0; }

// A GPU tensor of dtype `dt` holding `src` (CPU f32), starting `shift` elements into a buffer of
// sentinels: shift 1 puts its data pointer 2 or 4 bytes past a 16-byte boundary.
struct Shifted {
  Tensor buf;   // [shift + n + kGuard]
  Tensor view;  // the tensor under test, src's shape
  int64_t shift = 0, n = 0;
};
Shifted shifted(const Tensor& src, DType dt, int64_t shift) {
  Shifted s;
  s.shift = shift;
  s.n = src.numel();
  s.buf = Tensor::empty({shift + s.n + kGuard}, dt, kGpu);
  s.buf.fill_(kSentinel);
  Tensor v = s.buf.slice(shift, shift + s.n);
  v.copy_(ops::cast_raw(src, dt).view({s.n}).to(kGpu));
  s.view = v.view(src.shape());
  return s;
}
// "" when every element outside the view still holds the sentinel.
std::string guards(const Shifted& s, const char* what) {
  std::vector<float> all = s.buf.to_vector();
  int bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i)
    if ((i < s.shift || i >= s.shift + s.n) && all[static_cast<size_t>(i)] != kSentinel) ++bad;
  return bad ? std::string(what) + ": " + std::to_string(bad) + " elements outside the view were written\n" : "";
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// parity_check with the GPU inputs and the upstream gradients placed `shift[i]` / `grad_shift`
// elements into sentinel buffers. Floating inputs get gradients; the sentinels are checked after
// forward and backward. Returns "" or a report.
std::string shifted_parity(const Fn& f, const std::vector<Tensor>& inputs, DType dt, Tolerance tol,
                           const std::vector<int64_t>& shift, int64_t grad_shift, uint64_t seed = 99) {
  std::vector<Tensor> cpu_in, gpu_in;
  std::vector<Shifted> bufs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor c = rounded(inputs[i], dt);
    bufs.push_back(shifted(c, dt, shift[i]));
    // Shifts of 1-3 elements must land off a 16-byte boundary and shifts of 0 or 8 on one (16 or
    // 32 bytes in), else a case meant for one path would silently test the other.
    if (shift[i] % 4 != 0) REQUIRE(misaligned(bufs.back().view));
    if (shift[i] % 8 == 0) REQUIRE(!misaligned(bufs.back().view));
    c.set_requires_grad(true);
    bufs.back().view.set_requires_grad(true);
    cpu_in.push_back(c);
    gpu_in.push_back(bufs.back().view);
  }
  std::vector<Tensor> cpu_out = f(cpu_in), gpu_out = f(gpu_in);
  std::string report;
  Generator gen(seed);
  std::vector<Tensor> cpu_roots, cpu_grads, gpu_roots, gpu_grads;
  std::vector<Shifted> grad_bufs;
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    report += compare_values("output " + std::to_string(k), cpu_out[k].to_vector(), gpu_out[k].to_vector(), tol);
    Tensor w = rounded(randn(cpu_out[k].shape(), gen), dt);
    grad_bufs.push_back(shifted(w, dt, grad_shift));
    cpu_roots.push_back(cpu_out[k]);
    cpu_grads.push_back(w);
    gpu_roots.push_back(gpu_out[k]);
    gpu_grads.push_back(grad_bufs.back().view);
  }
  autograd::backward(cpu_roots, cpu_grads);
  autograd::backward(gpu_roots, gpu_grads);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].grad().defined() || !gpu_in[i].grad().defined()) {
      report += "input " + std::to_string(i) + ": gradient missing\n";
      continue;
    }
    report += compare_values("grad of input " + std::to_string(i), cpu_in[i].grad().to_vector(),
                             gpu_in[i].grad().to_vector(), tol);
    report += guards(bufs[i], ("input " + std::to_string(i)).c_str());
  }
  for (const Shifted& g : grad_bufs) report += guards(g, "upstream gradient");
  return report;
}

Tensor rnd(const Shape& s, Generator& g) { return randn(s, g); }

Fn unary(Tensor (*op)(const Tensor&)) {
  return [op](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0])}; };
}
Fn binary(Tensor (*op)(const Tensor&, const Tensor&)) {
  return [op](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0], in[1])}; };
}
const Fn bias_gelu = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::bias_gelu(in[0], in[1])}; };
// A fresh generator per call: the CPU and the GPU draw the same dropout mask.
const Fn bias_dropout_add = [](const std::vector<Tensor>& in) {
  Generator g(2026);
  g.advance(5);
  return std::vector<Tensor>{ops::bias_dropout_add(in[0], in[1], in[2], 0.3f, true, g)};
};

}  // namespace

TEST_CASE("unary maps: misaligned views, sizes off the vector width, one element") {
  Generator g(1);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (int64_t n : {1, 3, 7, 9, 15, 17, 1001}) {
      CAPTURE(n);
      // shift 0: the vector path (with a scalar tail); 1: the scalar path; 8: a view 16 or 32
      // bytes in, aligned again, so the vector path on a view. The gradient is shifted by 1 too.
      for (int64_t shift : {0, 1, 8}) {
        CAPTURE(shift);
        CHECK(shifted_parity(unary(ops::relu), {rnd({n}, g)}, t, rounded_once(t), {shift}, 1) == "");
        CHECK(shifted_parity(unary(ops::gelu), {rnd({n}, g)}, t, rounded_once(t), {shift}, 1 - shift % 2) == "");
      }
    }
  }
}

TEST_CASE("binary maps: one or both operands misaligned, same shape and broadcast") {
  Generator g(2);
  // Products rounded per element before the f32 row sum (mul's db), as gpu_elementwise_parity.
  const PerDtype mul_tol{.f32 = rounded_once(DType::F32),
                         .bf16 = {1e-2, 3e-2, "bf16: db sums products each rounded to bf16 (2^-9 each)"},
                         .f16 = {2e-3, 4e-3, "f16: db sums products each rounded to f16 (2^-12 each)"}};
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    const std::vector<std::vector<int64_t>> shifts{{1, 0}, {0, 1}, {1, 1}, {3, 8}};
    for (const std::vector<int64_t>& sh : shifts) {
      CAPTURE(sh[0]);
      CAPTURE(sh[1]);
      CHECK(shifted_parity(binary(ops::add), {rnd({3, 37}, g), rnd({3, 37}, g)}, t, rounded_once(t), sh, 1) == "");
      CHECK(shifted_parity(binary(ops::sub), {rnd({5, 9}, g), rnd({5, 9}, g)}, t, rounded_once(t), sh, 0) == "");
      // b of 16 vectorises when aligned, 12 only for f32, 37 never.
      for (int64_t c : {16, 12, 37}) {
        CAPTURE(c);
        CHECK(shifted_parity(binary(ops::add), {rnd({7, c}, g), rnd({c}, g)}, t, rounded_once(t), sh, 1) == "");
        CHECK(shifted_parity(binary(ops::mul), {rnd({4, c}, g), rnd({c}, g)}, t, mul_tol(t), sh, 1) == "");
      }
      CHECK(shifted_parity(binary(ops::add), {rnd({1}, g), rnd({1}, g)}, t, rounded_once(t), sh, 1) == "");
    }
  }
}

TEST_CASE("in-place relu_ and add_ on misaligned views write exactly the view") {
  Generator g(3);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (int64_t n : {1, 9, 67, 1000}) {
      for (int64_t shift : {0, 1, 8}) {
        CAPTURE(n);
        CAPTURE(shift);
        Tensor x = rounded(rnd({n}, g), t);
        Shifted s = shifted(x, t, shift);
        Tensor v = s.view;
        ops::relu_(v);
        CHECK(compare_values("relu_", ops::relu(x).to_vector(), v.to_vector(), rounded_once(t)) == "");
        CHECK(guards(s, "relu_") == "");
        // add_ with a broadcast b of 8 (vectorisable when aligned) into a misaligned [n/8*8] view.
        if (n >= 8) {
          const int64_t rows = n / 8;
          Tensor a = rounded(rnd({rows, 8}, g), t), b = rounded(rnd({8}, g), t);
          Shifted sa = shifted(a, t, shift);
          Tensor av = sa.view;
          ops::add_(av, ops::cast_raw(b, t).to(kGpu));
          CHECK(compare_values("add_", ops::add(a, b).to_vector(), av.to_vector(), rounded_once(t)) == "");
          CHECK(guards(sa, "add_") == "");
        }
      }
    }
  }
}

TEST_CASE("bias_gelu and bias_dropout_add: misaligned x, bias, residual and upstream gradient") {
  Generator g(4);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    // C = 16 vectorises in every dtype when aligned, 12 only in f32, 37 never; [1, 1] is one element.
    for (Shape xs : {Shape{5, 16}, Shape{2, 3, 12}, Shape{4, 37}, Shape{1, 1}}) {
      INFO(shape_str(xs));
      const int64_t c = xs.back();
      const std::vector<std::vector<int64_t>> shifts{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {8, 8, 8}};
      for (const std::vector<int64_t>& sh : shifts) {
        CAPTURE(sh[0]);
        CAPTURE(sh[1]);
        CAPTURE(sh[2]);
        CHECK(shifted_parity(bias_gelu, {rnd(xs, g), rnd({c}, g)}, t, rounded_once(t), {sh[0], sh[1]}, 1) == "");
        CHECK(shifted_parity(bias_dropout_add, {rnd(xs, g), rnd({c}, g), rnd(xs, g)}, t, rounded_once(t), sh, 1) ==
              "");
      }
    }
  }
}

// Bias-gradient shapes and the reduction each takes (column_plan.h; test_column_plan checks the counts):
//   [65536, 1], [20000, 3]: one column block, 512 / 157 row chunks of partials, ordered finish;
//   [1, 40000], [2, 33000]: 1250 / 1032 column blocks, a single chunk written directly;
//   [1024, 2048]: 64 column blocks x 8 chunks.
const Shape kBiasGradShapes[] = {{65536, 1}, {20000, 3}, {1, 40000}, {2, 33000}, {1024, 2048}};
// f32 column sums of up to 65536 N(0,1) terms (|sum| ~ 256) in another order than the CPU's
// double: a few 1e-4 absolute in the worst column, hence atol 5e-3; 16-bit adds one rounding.
const PerDtype column_sums{
    .f32 = {1e-5, 5e-3, "f32 column sums of up to 65536 rows vs double"},
    .bf16 = {1e-2, 5e-3, "bf16: f32 column sums of up to 65536 rows, then one rounding (2^-8)"},
    .f16 = {2e-3, 5e-3, "f16: f32 column sums of up to 65536 rows, then one rounding (2^-11)"}};

TEST_CASE("bias gradients: many rows x few channels, few rows x many channels") {
  Generator g(5);
  for (DType t : kDtypes)
    for (const Shape& xs : kBiasGradShapes) {
      INFO(dtype_name(t), " ", shape_str(xs));
      const int64_t c = xs.back();
      CHECK(shifted_parity(binary(ops::add), {rnd(xs, g), rnd({c}, g)}, t, column_sums(t), {0, 0}, 0) == "");
      CHECK(shifted_parity(bias_gelu, {rnd(xs, g), rnd({c}, g)}, t, column_sums(t), {0, 0}, 1) == "");
      CHECK(shifted_parity(bias_dropout_add, {rnd(xs, g), rnd({c}, g), rnd(xs, g)}, t, column_sums(t), {0, 0, 0}, 0) ==
            "");
    }
}

TEST_CASE("more than 2^31 elements: 64-bit indices in the vector, scalar and bias-gradient kernels") {
  // bf16 [2^28 + 3, 8] = 2^31 + 24 elements (4 GiB each; five such tensors fit an H100 or H200).
  // The middle holds a constant, the first and last 8 rows fresh random values; the head and the
  // tail of each result are compared with the CPU, so an index that wrapped at 2^31 (written to or
  // read from the wrong place) shows up at the tail.
  const DType t = DType::BF16;
  const int64_t rows = (int64_t{1} << 28) + 3, c = 8, n = rows * c;
  REQUIRE(n > (int64_t{1} << 31));
  Generator g(6);
  const float mid = -1.5f;
  Tensor head = rounded(rnd({8, c}, g), t), tail = rounded(rnd({8, c}, g), t), b = rounded(rnd({c}, g), t);
  Tensor x = Tensor::empty({rows, c}, t, kGpu);
  x.fill_(mid);
  x.slice(0, 8).copy_(ops::cast_raw(head, t).to(kGpu));
  x.slice(rows - 8, rows).copy_(ops::cast_raw(tail, t).to(kGpu));
  const Tensor bg = ops::cast_raw(b, t).to(kGpu);
  auto ends = [&](const Tensor& out, const Tensor& want_head, const Tensor& want_tail, const char* what) {
    const Tensor y = out.detach();  // slice() refuses a tensor that requires grad
    const int64_t r = y.size(0);
    CHECK(compare_values(std::string(what) + " head", want_head.to_vector(), y.slice(0, 8).to_vector(),
                         rounded_once(t)) == "");
    CHECK(compare_values(std::string(what) + " tail", want_tail.to_vector(), y.slice(r - 8, r).to_vector(),
                         rounded_once(t)) == "");
  };
  {
    Tensor y = ops::relu(x);  // the vector path
    ends(y, ops::relu(head), ops::relu(tail), "relu (vector)");
    CHECK(y.slice(rows / 2, rows / 2 + 1).to_vector() == std::vector<float>(8, 0.0f));
  }
  {
    Tensor xs = x.view({n}).slice(1, n);  // misaligned: the scalar path over n - 1 elements
    Tensor y = ops::relu(xs);
    const Tensor th = ops::relu(head).view({8 * c}), tt = ops::relu(tail).view({8 * c});
    CHECK(compare_values("relu (scalar) head", th.slice(1, 8 * c).to_vector(), y.slice(0, 8 * c - 1).to_vector(),
                         rounded_once(t)) == "");
    CHECK(compare_values("relu (scalar) tail", tt.slice(1, 8 * c).to_vector(), y.slice(n - 8 * c, n - 1).to_vector(),
                         rounded_once(t)) == "");
  }
  {
    // bias_gelu forward (vector path, bias index stepped per vector) and backward: dx at the ends,
    // and dbias[c] = the random rows' terms + (rows - 16) * dy_mid * gelu'(mid + b[c]).
    Tensor xl = x.detach().set_requires_grad(true);
    Tensor bl = bg.detach().set_requires_grad(true);
    Tensor y = ops::bias_gelu(xl, bl);
    ends(y, ops::bias_gelu(head, b), ops::bias_gelu(tail, b), "bias_gelu");
    const float dy_mid = 0.5f;
    Tensor dyh = rounded(rnd({8, c}, g), t), dyt = rounded(rnd({8, c}, g), t);
    Tensor dy = Tensor::empty({rows, c}, t, kGpu);
    dy.fill_(dy_mid);
    dy.slice(0, 8).copy_(ops::cast_raw(dyh, t).to(kGpu));
    dy.slice(rows - 8, rows).copy_(ops::cast_raw(dyt, t).to(kGpu));
    y.backward(dy);
    Tensor hl = head.detach().set_requires_grad(true), tl = tail.detach().set_requires_grad(true);
    Tensor bh = b.detach().set_requires_grad(true), bt = b.detach().set_requires_grad(true);
    Tensor ml = Tensor::full({1, c}, mid).set_requires_grad(true), bm = b.detach().set_requires_grad(true);
    ops::bias_gelu(hl, bh).backward(dyh);
    ops::bias_gelu(tl, bt).backward(dyt);
    ops::bias_gelu(ml, bm).backward(Tensor::full({1, c}, dy_mid));
    ends(xl.grad(), hl.grad(), tl.grad(), "bias_gelu dx");
    std::vector<float> want(static_cast<size_t>(c)), bhv = bh.grad().to_vector(), btv = bt.grad().to_vector(),
        bmv = bm.grad().to_vector();
    for (size_t k = 0; k < want.size(); ++k)
      want[k] = static_cast<float>(bhv[k] + btv[k] + static_cast<double>(rows - 16) * bmv[k]);
    // 2^28 equal f32 terms, summed 32768 to a thread then 1024 partials: up to ~1e-3 relative
    // drift from rounding each add, then one bf16 rounding (2^-8).
    CHECK(compare_values("bias_gelu dbias", want, bl.grad().to_vector(),
                         Tolerance{1.5e-2, 1e-3, "2^28 f32 adds of one value, then bf16"}) == "");
  }
}
