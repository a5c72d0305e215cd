// tests/gpu_nonfinite_parity.cpp: ops::count_nonfinite / all_finite on CUDA against the CPU count:
// every dtype (f64 included: the test is on raw bits), lists longer than one launch's table (512),
// tensors longer than one pass of the grid, views, holes, and an empty list on a device. Counts are
// integers, so they must agree exactly. Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {
const Device kGpu = Device::cuda(0);

// n randn values with `bad` of them replaced by NaN / +inf / -inf at spread-out positions.
Tensor with_bad(int64_t n, int64_t bad, Generator& g) {
  std::vector<float> v = randn({n}, g).to_vector();
  const float kinds[] = {NAN, INFINITY, -INFINITY};
  for (int64_t i = 0; i < bad; ++i) v[(i * 7919 + 13) % n] = kinds[i % 3];
  return Tensor::from_vector(v, {n});
}

int64_t read(const Tensor& count) { return count.to_vector_i64()[0]; }

std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts, DType t) {
  std::vector<Tensor> out;
  for (const Tensor& x : ts) out.push_back(x.defined() ? ops::cast_raw(x, t).to(kGpu) : Tensor());
  return out;
}
}  // namespace

TEST_CASE("count_nonfinite on CUDA equals the CPU count, in every dtype") {
  Generator g(1);
  // Distinct positions only for bad counts well below n (the stride 7919 is prime to every n here).
  const std::vector<Tensor> host{with_bad(1000, 3, g), Tensor(), with_bad(37, 0, g), with_bad(5, 5, g),
                                 Tensor::from_vector_i64({1, 2}, {2}), with_bad(3 * 1024 * 1024 + 7, 11, g)};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    CAPTURE(dtype_name(t));
    std::vector<Tensor> cpu, gpu;
    for (const Tensor& x : host) {
      const bool floating = x.defined() && is_floating(x.dtype());
      cpu.push_back(floating ? ops::cast_raw(x, t) : x);
      gpu.push_back(x.defined() ? (floating ? ops::cast_raw(x, t) : x).to(kGpu) : Tensor());
    }
    Tensor n = ops::count_nonfinite(gpu);
    CHECK(n.device() == kGpu);
    CHECK(n.dtype() == DType::I64);
    CHECK(read(n) == 19);
    CHECK(read(n) == read(ops::count_nonfinite(cpu)));
    CHECK_FALSE(ops::all_finite(gpu));
    CHECK(ops::all_finite(gpu[2]));
  }
}

TEST_CASE("count_nonfinite on CUDA: mixed dtypes in one list, views, more tensors than one launch") {
  Generator g(2);
  // 1200 small tensors, a bad value in every 100th: three launches' worth of f32 spans.
  std::vector<Tensor> many;
  for (int i = 0; i < 1200; ++i) many.push_back(with_bad(17 + i % 5, i % 100 == 0 ? 1 : 0, g));
  CHECK(read(ops::count_nonfinite(to_gpu(many, DType::F32))) == 12);
  // Mixed dtypes in one call: one launch per dtype, one counter.
  std::vector<Tensor> mixed = to_gpu({with_bad(100, 2, g)}, DType::F16);
  for (Tensor& x : to_gpu({with_bad(300, 4, g)}, DType::BF16)) mixed.push_back(x);
  for (Tensor& x : to_gpu({with_bad(50, 1, g)}, DType::F32)) mixed.push_back(x);
  CHECK(read(ops::count_nonfinite(mixed)) == 7);
  // Views into one flat buffer count only their own elements.
  std::vector<float> flat(64, 1.0f);
  flat[10] = NAN;
  flat[40] = INFINITY;
  Tensor buf = Tensor::from_vector(flat, {64}).to(kGpu);
  CHECK(read(ops::count_nonfinite({buf.slice(0, 10), buf.slice(11, 40), buf.slice(41, 64)})) == 0);
  CHECK(read(ops::count_nonfinite({buf.slice(8, 48)})) == 2);
  // An empty list still gives a zero count on the device asked for (ready for an all-reduce).
  Tensor none = ops::count_nonfinite({}, kGpu);
  CHECK(none.device() == kGpu);
  CHECK(read(none) == 0);
  // A CPU tensor in a GPU count is refused with a message, not read through a host pointer.
  CHECK_THROWS_WITH_AS(ops::count_nonfinite({Tensor::ones({3})}, kGpu), doctest::Contains("call of their own"), Error);
}
