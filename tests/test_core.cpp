// tests/test_core.cpp: tensor basics, memory accounting, error messages, dtype conversions.
#include <doctest/doctest.h>

#include "core/check.h"
#include "core/ops/copy/copy.h"
#include "core/storage.h"
#include "core/tensor.h"

using namespace tandem;

TEST_CASE("memory counters track current and peak bytes") {
  reset_peak_memory(Device::cpu());
  int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    Tensor a = Tensor::empty({1024}, DType::F32);
    CHECK(memory_stats(Device::cpu()).current_bytes == before + 4096);
    Tensor b = a.view({32, 32});  // a view allocates nothing
    CHECK(memory_stats(Device::cpu()).current_bytes == before + 4096);
  }
  CHECK(memory_stats(Device::cpu()).current_bytes == before);
  CHECK(memory_stats(Device::cpu()).peak_bytes >= before + 4096);
}

TEST_CASE("errors carry file:line, rank and an actionable sentence") {
  set_error_rank(3);
  try {
    Tensor::from_vector({1, 2, 3}, {2, 2});
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("[rank 3]") == 0);
    CHECK(m.find("core/tensor_ops.cpp:") != std::string::npos);
    CHECK(m.find("do not fill shape [2, 2]") != std::string::npos);
  }
  set_error_rank(-1);
}

TEST_CASE("dtype mismatches are refused with the fix in the message") {
  Tensor a = Tensor::zeros({2}, DType::F32);
  Tensor b = Tensor::zeros({2}, DType::F64);
  CHECK_THROWS_WITH_AS(a.copy_(b), doctest::Contains("cast first"), Error);
  CHECK_THROWS_WITH_AS(dtype_from_name("f8"), doctest::Contains("use one of"), Error);
}

TEST_CASE("casts between all dtypes preserve representable values") {
  Tensor x = Tensor::from_vector({-3, -1, 0, 2, 7, 100}, {6});
  for (DType t : {DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    std::vector<float> back = ops::cast_raw(ops::cast_raw(x, t), DType::F32).to_vector();
    CHECK(back == x.to_vector());
  }
  CHECK(ops::cast_raw(Tensor::from_vector({2.9f, -2.9f}, {2}), DType::I64).to_vector_i64() ==
        std::vector<int64_t>{2, -2});  // truncation toward zero, like C and PyTorch
}

TEST_CASE("no CUDA device means cuda tensors are refused clearly") {
  if (cuda_available()) return;  // only meaningful on machines without a GPU
  CHECK_THROWS_AS(Tensor::empty({2}, DType::F32, Device::cuda(0)), Error);
}
