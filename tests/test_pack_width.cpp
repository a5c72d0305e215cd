// tests/test_pack_width.cpp: the host rules that pick the access width and register layout of the
// bandwidth kernels for layer norm, softmax and pooling (core/ops/common/cuda/pack_width.h). The
// kernels need a GPU (gpu_opsb_parity, gpu_attention_parity, gpu_opsa_parity test every path); this
// pins, without one, which path each shape takes - the GPU tests' comments rely on it - and that
// misaligned views and rows too long for the registers go to the generic kernels.
#include <doctest/doctest.h>

#include <cstdint>

#include "core/ops/common/cuda/pack_width.h"

using tandem::cuda::channel_group_width;
using tandem::cuda::row_pack_width;
using tandem::cuda::row_slots;
using tandem::cuda::slots_for;

namespace {
alignas(256) unsigned char buffer[512];  // an allocator-aligned base, and byte offsets into it
const void* at(size_t byte) { return buffer + byte; }
constexpr int kPerLane = 32;  // the kernels' budget: 32 row elements per lane
}  // namespace

TEST_CASE("softmax rows: the widest pack that divides Sk and keeps all 32 lanes busy, up to Sk = 1024") {
  // bf16 (2 bytes): up to 8 keys per access.
  CHECK(row_pack_width(128, 2, kPerLane, {at(0)}) == 4);   // BERT's Sk: 32 lanes x 4 keys
  CHECK(row_pack_width(256, 2, kPerLane, {at(0)}) == 8);
  CHECK(row_pack_width(512, 2, kPerLane, {at(0)}) == 8);
  CHECK(row_pack_width(1024, 2, kPerLane, {at(0)}) == 8);  // 4 slots of 8: the budget, full
  CHECK(row_pack_width(1025, 2, kPerLane, {at(0)}) == 0);  // past the budget: generic kernel
  CHECK(row_pack_width(37, 2, kPerLane, {at(0)}) == 1);
  CHECK(row_pack_width(6, 2, kPerLane, {at(0)}) == 1);     // divisible by 2, but 3 packs < 32 lanes
  CHECK(row_pack_width(1, 2, kPerLane, {at(0)}) == 1);
  CHECK(row_pack_width(96, 2, kPerLane, {at(0)}) == 2);    // 96 = 3 x 32: 3 keys per lane do not pack
  // f32 (4 bytes): up to 4.
  CHECK(row_pack_width(128, 4, kPerLane, {at(0)}) == 4);
  CHECK(row_pack_width(1024, 4, kPerLane, {at(0)}) == 4);
  CHECK(row_pack_width(0, 4, kPerLane, {at(0)}) == 0);
}

TEST_CASE("softmax rows: a pointer off the pack's alignment narrows the pack") {
  CHECK(row_pack_width(256, 2, kPerLane, {at(0), at(8)}) == 4);   // 8-byte aligned: 4 bf16
  CHECK(row_pack_width(256, 2, kPerLane, {at(0), at(2)}) == 1);   // one bf16 in
  CHECK(row_pack_width(256, 4, kPerLane, {at(4), at(0)}) == 1);
  CHECK(row_pack_width(256, 2, kPerLane, {at(0), nullptr}) == 8);  // an absent operand does not block
}

TEST_CASE("slots per lane: the fewest (a power of two) that hold the row's packs") {
  CHECK(slots_for(0) == 1);
  CHECK(slots_for(1) == 1);
  CHECK(slots_for(32) == 1);   // softmax Sk = 128 in 4-key packs: one pack per lane
  CHECK(slots_for(33) == 2);
  CHECK(slots_for(96) == 4);   // 3 per lane round up to 4
  CHECK(slots_for(1024) == 32);
}

TEST_CASE("layer norm rows: 16-byte packs only, slots a power of two, at most 32 elements per lane") {
  CHECK(row_slots(1024, 2, kPerLane, {at(0)}) == 4);  // bf16: 128 packs = 4 per lane
  CHECK(row_slots(768, 2, kPerLane, {at(0)}) == 4);   // 96 packs: 3 per lane, rounded up to 4
  CHECK(row_slots(1024, 4, kPerLane, {at(0)}) == 8);  // f32: 256 packs = 8 per lane
  CHECK(row_slots(768, 4, kPerLane, {at(0)}) == 8);   // 192 packs: 6 per lane, rounded up to 8
  CHECK(row_slots(8, 2, kPerLane, {at(0)}) == 1);
  CHECK(row_slots(36, 4, kPerLane, {at(0)}) == 1);    // f32: 9 packs
  CHECK(row_slots(36, 2, kPerLane, {at(0)}) == 0);    // bf16: 36 is not a multiple of 8
  CHECK(row_slots(37, 4, kPerLane, {at(0)}) == 0);
  CHECK(row_slots(1030, 2, kPerLane, {at(0)}) == 0);
  CHECK(row_slots(1032, 2, kPerLane, {at(0)}) == 0);  // a multiple of 8, but past 1024
  CHECK(row_slots(2048, 4, kPerLane, {at(0)}) == 0);
  CHECK(row_slots(1024, 2, kPerLane, {at(0), at(8)}) == 0);  // a view 8 bytes in: generic
}

TEST_CASE("pooling: the widest channel group that divides C, 1 off 32-byte alignment") {
  CHECK(channel_group_width(64, 2, {at(0), at(32)}) == 8);  // ResNet's stem, bf16
  CHECK(channel_group_width(64, 4, {at(0)}) == 4);          // f32
  CHECK(channel_group_width(12, 2, {at(0)}) == 4);
  CHECK(channel_group_width(6, 2, {at(0)}) == 2);
  CHECK(channel_group_width(5, 2, {at(0)}) == 1);
  CHECK(channel_group_width(3, 4, {at(0)}) == 1);
  CHECK(channel_group_width(64, 2, {at(0), at(16)}) == 1);  // int32 argmax packs of 8 need 32 bytes
}
