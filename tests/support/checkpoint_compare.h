// tests/support/checkpoint_compare.h: "the two runs ended in the same checkpoint", byte for byte.
//
// A resumed run must end exactly where an uninterrupted one ends (same model, optimizer state and
// metadata); the end-to-end training tests check that by comparing the two safetensors files.
#pragma once
#include <string>
#include <vector>

#include "tests/support/app_runner.h"

namespace tandem::testing {

// The files at `a` and `b` hold the same tensors in the same order, with identical bytes, and the
// same metadata except saved_at and run_id (two runs, two clocks, two ids). Names the first tensor
// that differs. any_order: the same names in any order (a ZeRO run gathers its optimizer state
// bucket by bucket, so it lists the same entries as a DDP run's in another order).
void check_identical_checkpoints(const std::string& a, const std::string& b, bool any_order = false);

// The files hold the same tensor names (in any order), shapes and dtypes, and every floating tensor's values agree
// within `rel` of its largest magnitude (at least 1): max |a - b| <= rel * max(max |a|, 1). For runs
// that compute the same sums in another order (another world size, the same global batch).
// Tensors whose name contains one of `skip` are compared in shape only. Returns the largest
// relative difference seen, and names the worst tensor in a MESSAGE.
double check_close_checkpoints(const std::string& a, const std::string& b, double rel,
                               const std::vector<std::string>& skip = {});

// A run resumed in folder `b` against the straight run in folder `a` (each ran with --metrics
// <folder>/m.json): `resumed` succeeded, the two end in identical `checkpoint` files, and the memory
// ledger after the resume measures the straight run's model state within 2% (a checkpoint's copies
// freed after set-up, such as an EMA's, are not counted as held memory).
void check_resumed_run(const AppRun& resumed, const std::string& a, const std::string& b, const std::string& checkpoint);

}  // namespace tandem::testing
