// tests/test_vector_width.cpp: the host rule that picks the CUDA maps' 16-byte vector path
// (core/ops/common/cuda/vector_width.h). The kernels themselves need a GPU (gpu_vector_access_parity);
// this checks, without one, that misaligned views and broadcast lengths off the vector width are
// sent to the scalar loop, because a vector access on them would fault or read the wrong bias.
#include <doctest/doctest.h>

#include <cstdint>

#include "core/ops/common/cuda/vector_width.h"

using tandem::cuda::aligned16;
using tandem::cuda::vector_path_ok;
using tandem::cuda::vector_width;

namespace {
// A 16-byte aligned base, as the allocator gives (it aligns to 256), and byte offsets into it.
alignas(16) unsigned char buffer[256];
const void* at(size_t byte) { return buffer + byte; }
}  // namespace

TEST_CASE("vector width: 16 bytes of f32 is 4 elements, of f16/bf16 8; wider elements never vectorise") {
  CHECK(vector_width(4) == 4);
  CHECK(vector_width(2) == 8);
  CHECK(vector_width(8) == 2);
  CHECK(vector_width(1) == 16);
  CHECK(vector_width(32) == 0);
  CHECK(vector_width(0) == 0);
  CHECK_FALSE(vector_path_ok({at(0)}, 32));
}

TEST_CASE("alignment: a view starting one element in is not 16-byte aligned; nullptr does not block") {
  CHECK(aligned16(at(0)));
  CHECK(aligned16(at(16)));
  CHECK(aligned16(at(64)));
  CHECK(aligned16(nullptr));
  for (size_t b = 1; b < 16; ++b) {
    CAPTURE(b);
    CHECK_FALSE(aligned16(at(b)));
  }
  // slice(1, n) of an f32 tensor starts 4 bytes in, of a bf16/f16 one 2 bytes in.
  CHECK_FALSE(vector_path_ok({at(4), at(0)}, 4));
  CHECK_FALSE(vector_path_ok({at(0), at(2)}, 2));
  // Four f32 (eight 16-bit) elements in, the view is aligned again and may vectorise.
  CHECK(vector_path_ok({at(16), at(0)}, 4));
  CHECK(vector_path_ok({at(16), at(32)}, 2));
  // Every operand counts, the output included; an absent residual (nullptr) does not.
  CHECK_FALSE(vector_path_ok({at(0), at(0), nullptr, at(8)}, 4, 64));
  CHECK(vector_path_ok({at(0), at(0), nullptr, at(32)}, 4, 64));
}

TEST_CASE("broadcast period: a bias of C elements vectorises only when C is a multiple of the width") {
  CHECK(vector_path_ok({at(0)}, 4, 0));  // 0: nothing broadcast, any numel (the tail is scalar)
  CHECK(vector_path_ok({at(0)}, 4, 4));
  CHECK(vector_path_ok({at(0)}, 4, 12));  // f32: 12 = 3 vectors
  CHECK_FALSE(vector_path_ok({at(0)}, 2, 12));  // bf16/f16: 12 is not a multiple of 8
  CHECK(vector_path_ok({at(0)}, 2, 16));
  CHECK(vector_path_ok({at(0)}, 2, 1024));
  for (int64_t c : {1, 2, 3, 5, 6, 7, 37}) {
    CAPTURE(c);
    CHECK_FALSE(vector_path_ok({at(0)}, 4, c));
    CHECK_FALSE(vector_path_ok({at(0)}, 2, c));
  }
  // Alignment still decides when the period is fine.
  CHECK_FALSE(vector_path_ok({at(2), at(0)}, 2, 64));
}
