// tests/support/checkpoint_compare.h: "the two runs ended in the same checkpoint", byte for byte.
//
// A resumed run must end exactly where an uninterrupted one ends (same model, optimizer state and
// metadata); the end-to-end training tests check that by comparing the two safetensors files.
#pragma once
#include <string>

namespace tandem::testing {

// The files at `a` and `b` hold the same tensors in the same order, with identical bytes, and the
// same metadata except saved_at and run_id (two runs, two clocks, two ids). Names the first tensor
// that differs. any_order: the same names in any order (a ZeRO run gathers its optimizer state
// bucket by bucket, so it lists the same entries as a DDP run's in another order).
void check_identical_checkpoints(const std::string& a, const std::string& b, bool any_order = false);

}  // namespace tandem::testing
