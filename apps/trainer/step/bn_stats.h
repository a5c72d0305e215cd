// apps/trainer/step/bn_stats.h: one set of BatchNorm running statistics on every rank, before a
// validation or a checkpoint reads them.
//
// Why: DDP broadcasts rank 0's buffers before every training forward (dist/ddp.h), but that forward
// then updates each rank's running_mean/var with its own batch, so after a step every rank holds
// different statistics. A validation on N ranks then scores each shard with its own rank's BN, and
// the checkpoint (written by rank 0) holds rank 0's: the logged top-1 is not the saved model's.
// Training itself is untouched either way: training-mode BN normalises with the batch's statistics,
// never the running ones, so the loss and the gradients do not depend on them.
//
// Two ways to agree, and when each is used (train_imagenet's loop):
//   average (BnSync::Average)   at every epoch end, whether or not it validates or saves: the mean
//       over the ranks of running_mean and running_var, one all-reduce per dtype over all of them,
//       as timm's distribute_bn(reduce=True) after each epoch. Average, not rank 0's broadcast:
//       each rank's estimate has seen only its own 1/N of the data, so the mean is the estimate of
//       N times as many batches (the variance of the mean of the ranks' running means is 1/N of one
//       rank's). Not the exact global statistic (that would need the per-batch sums), but the same
//       estimator with N times the samples. At an epoch end every run with the same flags does it,
//       so a resume from an epoch-end checkpoint stays bit-exact.
//   rank 0's (BnSync::FromRank0)   inside an epoch (a --run-steps end, a preemption): rank 0's
//       statistics broadcast to every rank - what DDP's next forward does anyway, so the run's state
//       is the same with or without this validation or checkpoint, and a resume from a mid-epoch
//       checkpoint stays bit-exact with the uninterrupted run (an average there would change the
//       state an uninterrupted run has, and the change would persist through the momentum).
// SyncBatchNorm (--sync-bn) keeps the statistics equal on every rank already: nothing to do.
// num_batches_tracked counts the same steps on every rank and is left alone.
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
