// apps/whatif/model.h: the what-if scaling model - step time at N ranks from one measured rank.
//
// Input: one rank's step (its length, when backward ended, and when each gradient bucket became
// ready, in launch order) and a network (latency alpha per message per hop, bandwidth B per rank).
// The model replays the step with every bucket's communication on one serial channel, as dist/'s
// reducer issues it: bucket i starts at max(its ready time, the previous bucket's finish) - or after
// backward with overlap off - and takes the strategy's cost. Communication past the end of backward
// is exposed and adds to the step; the rest was hidden. Costs (S bytes, N ranks; ms):
//   ring all-reduce   2(N-1)/N * S/B + 2(N-1) * alpha        (DDP; Patarasuk & Yuan's ring)
//   reduce-scatter     (N-1)/N * S/B +  (N-1) * alpha        (ZeRO: half a ring all-reduce)
//   all-gather         (N-1)/N * S/B +  (N-1) * alpha
//   parameter server  push + pull: each of P servers holds S/P; N workers push to it at once, so
//                      its link carries N*S/P (incast). Dedicated servers: 2 * S/B * max(1, N/P)
//                      + 2 alpha. Servers on the workers (P = N): 2 (N-1)/N * S/B + 2 alpha.
// Strategies: DDP with and without overlap; ZeRO-1 (reduce-scatter after backward, the optimizer on
// 1/N of the weights, then all-gather of the weights); ZeRO-2 (reduce-scatter per bucket during
// backward, then as ZeRO-1); the parameter server (push/pull per bucket after backward, not
// overlapped - as tandem's baseline dist/extras/parameter_server.h runs it; it pushes with reduce-to-root,
// which MPI/NCCL may route as a tree, so its measured push can beat the incast cost assumed here;
// its K servers sit on worker ranks, whose own share stays local: the dedicated formula with P = K
// overstates that by a factor N/(N-1) at K = 1).
// Stragglers: a collective waits for the slowest rank. When one rank's step times vary with
// standard deviation sigma (StepProfile::jitter_ms), the slowest of N independent ranks is late by
// about sigma * E[max of N standard normals] (0.56 at N = 2, 1.03 at 4, ~sqrt(2 ln N) for large N),
// added once per step. Small on a dedicated GPU node, large on a shared CPU machine.
// Left out on purpose: congestion between concurrent jobs, hierarchical (intra-/inter-node)
// algorithms, and compute slowed by communication sharing the cores (except oversubscription: N
// ranks on C cores each get C/N of a core, see StrategyOptions::cores).
#pragma once
#include <string>
#include <vector>

namespace tandem::whatif {

struct Bucket {
  double bytes = 0;     // f32 gradient bytes (the wire factor scales them for compressed strategies)
  double ready_ms = 0;  // when its last gradient was produced, ms after the step's start (1 rank)
};

// One rank's step, measured (apps/whatif/inputs.h reads it from a trace) or assumed.
struct StepProfile {
  double step_ms = 0;          // data + forward + backward + optimizer, no communication to speak of
  double backward_end_ms = 0;  // ms after the step's start
  double optimizer_ms = 0;     // the optimizer's part of step_ms (ZeRO runs it on 1/N of the weights)
  double jitter_ms = 0;        // standard deviation of step_ms from step to step (stragglers)
  std::vector<Bucket> buckets; // in launch order
  long long batch_per_rank = 1;
  double total_bytes() const;
};

struct Network {
  double alpha_us = 5;         // latency per message per ring hop (an NCCL-over-Ethernet order)
  double bandwidth_GBps = 12.5;  // per-rank bus bandwidth, 1e9 bytes/s (100 Gb/s); busbw in nccl-tests terms
};

enum class Strategy { Ddp, DdpNoOverlap, Zero1, Zero2, Ps };
Strategy strategy_from_name(const std::string& name);  // ddp ddp_no_overlap zero1 zero2 ps
std::string strategy_name(Strategy s);

struct StrategyOptions {
  Strategy strategy = Strategy::Ddp;
  double wire_factor = 1;  // bytes on the wire per f32 gradient byte: 0.5 for bf16/fp16 compression
  int ps_servers = 0;      // parameter server: 0 = one server on every rank; >0 = that many dedicated
  int cores = 0;           // 0: every rank has its own device; >0: all ranks share this many cores
};

// Communication costs in ms (0 for one rank).
double ring_allreduce_ms(double bytes, int n, const Network& net);
double reduce_scatter_ms(double bytes, int n, const Network& net);
double all_gather_ms(double bytes, int n, const Network& net);
double ps_push_pull_ms(double bytes, int n, int servers, const Network& net);
// E[max of n independent standard normals]: exact values for n <= 8, Blom's approximation above.
double expected_max_normal(int n);

struct Prediction {
  int ranks = 1;
  double step_ms = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0, overlap = 1;
  double straggler_ms = 0;  // waiting for the slowest rank (part of step_ms, not of exposed_ms)
  double images_per_s = 0, images_per_s_per_rank = 0, speedup = 1, efficiency = 1;
};

// Step time, throughput and scaling efficiency (weak scaling: batch_per_rank on every rank,
// against the same profile at 1 rank) at `ranks` ranks.
Prediction predict(const StepProfile& p, const Network& net, const StrategyOptions& s, int ranks);

}  // namespace tandem::whatif
