// apps/trainer/step/bn_stats.h: one set of BatchNorm running statistics on every rank, before a
// validation or a checkpoint reads them.
// In full: apps/trainer/step/README.md ("bn_stats.h in detail").
#pragma once
#include "dist/communicator.h"  // defines: Communicator
#include "layers/module.h"      // defines: Module

namespace tandem::trainer {

enum class BnSync { Average, FromRank0 };

// Makes every BatchNorm running_mean/running_var of `model` equal on every rank of `comm` (see the
// file comment). Collective: every rank calls it. Returns the number of statistic tensors touched
// (0: a model without BN, or one rank).
int sync_bn_statistics(Module& model, dist::Communicator& comm, BnSync how);

}  // namespace tandem::trainer
