// apps/whatif/inputs.h: the what-if model's inputs, from files a run already writes.
//
//   measured step   a 1-rank Chrome trace (train_imagenet --trace): per step the "forward",
//                   "backward", "optimizer.step" ranges and each "allreduce bucket i" launch. At one
//                   rank a bucket launches the moment it is ready (nothing to wait for), so the
//                   launch times are the ready times. Steps are medians over the steady steps.
//   bucket sizes    computed, not measured: the model's parameters in registration order through
//                   dist::assign_buckets, as the reducer does, so any bucket size can be asked for.
//                   The same per-tensor sizes feed the parameter server's whole-tensor partitions.
//   ready times     for a bucket layout other than the measured one, a ready curve: cumulative
//                   gradient bytes (reverse registration order) -> ms, interpolated linearly between
//                   the measured buckets. Without a trace, gradients are assumed to become ready at a
//                   constant byte rate over the backward part of the step.
//   network         alpha/bandwidth given, or fitted to a bench_allreduce JSON (see fit_network).
#pragma once
#include <string>
#include <vector>

#include "apps/whatif/model.h"

namespace tandem::whatif {

// One rank's measured step, from a trace: times in ms after the step's start (its "forward").
struct MeasuredStep {
  double step_ms = 0, backward_start_ms = 0, backward_end_ms = 0, optimizer_ms = 0;
  double jitter_ms = 0;                 // robust standard deviation of the step times (1.4826 MAD)
  std::vector<double> bucket_ready_ms;  // in launch order
  int steps_used = 0;                   // steady steps the medians were taken over
};
// `skip`: leading steps left out (warm-up). Reads the events of process (rank) 0.
MeasuredStep read_trace(const std::string& path, int skip = 2);

// Gradient bytes of each trainable tensor, in registration order, for `model` as train_imagenet
// builds it (f32), or train_encoder for a BERT name (num_classes: then its vocabulary): the sizes the
// reducer buckets and the parameter server partitions.
std::vector<double> param_bytes(const std::string& model, int num_classes);

// Gradient bytes of each bucket, in launch order, for `model` as train_imagenet builds it.
// bucket_mb <= 0: one bucket per parameter (--no-bucketing).
std::vector<double> bucket_bytes(const std::string& model, int num_classes, double first_bucket_mb, double bucket_mb);

// ZeRO-3's buckets for `model` as dist/zero3.cpp regroups them (one per run of consecutive
// parameters of one unit, no size limit), in launch order, each marked resident when it belongs to
// the root unit (dist::unit_of_parameters' unit 0: gathered once in forward and kept to the end of
// backward, so never gathered again - BERT's embeddings and head are most of its bytes).
std::vector<Bucket> zero3_buckets(const std::string& model, int num_classes);

// Tensor parallelism's inputs for a BERT `model` (StrategyOptions::tp_*): the split layers' share of
// the parameters (dist/tp/shard.h's layout), one activation all-reduce's bytes ([B, S, H] f32 of a
// rank's batch) and the layer count.
struct TpShape {
  double split = 0, activation_bytes = 0;
  int layers = 0;
};
TpShape tp_shape(const std::string& model, int vocab, long long batch, long long seq_len);

// Ready time as a function of cumulative gradient bytes.
struct ReadyCurve {
  std::vector<double> bytes, ms;  // increasing; first point (0, backward start)
  double at(double cumulative_bytes) const;
};
// From a measured step and the bucket layout it was measured with (same count as its launches).
ReadyCurve ready_curve(const MeasuredStep& m, const std::vector<double>& measured_buckets);
// Assumed: constant byte rate from backward_start_ms to backward_end_ms.
ReadyCurve linear_ready_curve(double total_bytes, double backward_start_ms, double backward_end_ms);

// A profile for `buckets` (launch order; their bytes and resident flags) placed on `curve`; times
// scaled by `time_scale`.
StepProfile make_profile(const MeasuredStep& m, const ReadyCurve& curve, const std::vector<double>& buckets,
                         long long batch_per_rank, double time_scale = 1);
StepProfile make_profile(const MeasuredStep& m, const ReadyCurve& curve, const std::vector<Bucket>& buckets,
                         long long batch_per_rank, double time_scale = 1);

// Fits alpha and bandwidth to bench_allreduce's JSON (one backend, one rank count) by least squares
// on relative error: time = 2(n-1) alpha + 2(n-1)/n S/B. backend "": the first one in the file.
Network fit_network(const std::string& bench_json, const std::string& backend = "");

}  // namespace tandem::whatif
