// apps/whatif/model.h: the what-if scaling model - step time at N ranks from one measured rank.
//
// Input: one rank's step (its length, when backward ended, and when each gradient bucket became
// ready, in launch order) and a network (latency alpha per message per hop, bandwidth B per rank).
// The model replays the step with every bucket's communication on one serial channel, as dist/'s
// reducer issues it: bucket i starts at max(its ready time, the previous bucket's finish) - or after
// backward with overlap off - and takes the strategy's cost. Communication past the end of backward
// is exposed and adds to the step; the rest was hidden. Costs (S bytes, N ranks; ms):
//   ring all-reduce   2(N-1)/N * S/(B e) + 2(N-1) * alpha    (DDP; Patarasuk & Yuan's ring; e: the
//                                                             all-reduce's efficiency, Network)
//   reduce-scatter     (N-1)/N * S/B +  (N-1) * alpha        (ZeRO: half a ring all-reduce)
//   all-gather         (N-1)/N * S/B +  (N-1) * alpha
//   parameter server  push + pull of whole-tensor partitions, as dist/extras/parameter_server.h runs it:
//                      K servers on ranks 0..K-1, each tensor on one server (dist::assign_partitions
//                      itself: largest first to the least loaded), all K pushes in flight at once.
//                      The busiest server receives its partition L_max from the N-1 other ranks
//                      (incast) while a worker sends S less its own partition L_own:
//                        push = max((N-1) L_max, S - L_own)/B + (N-1) * alpha
//                      (a server takes N-1 messages one after another, alpha each); the pull
//                      mirrors the push. Even shards (L = S/K) give 2 (N-1)/N S/B at K = N, a ring's
//                      bytes - but one 392 MiB VGG classifier weight on one server makes that server
//                      carry (N-1) x 392 MiB, and that is what tandem's parameter server does.
// Strategies: DDP with and without overlap; ZeRO-1 (reduce-scatter after backward, the optimizer on
// 1/N of the weights, then all-gather of the weights); ZeRO-2 (reduce-scatter per bucket during
// backward, then as ZeRO-1); the parameter server (one push per server after backward, not
// overlapped, the optimizer on each server's partition only - saving optimizer_ms (1 - L_max/S) -
// then the pull, as tandem's synchronous baseline (dist/extras/parameter_server.h) runs it. It pushes with reduce-to-root, which MPI/NCCL may route as a tree, so its
// measured push can beat the incast cost assumed here).
// ZeRO-3 (DeepSpeed's paper, Rajbhandari et al. 2020, section 7.2.2): each unit's parameters are
// all-gathered before its forward, all-gathered again before its backward, and its gradients are
// reduce-scattered - three collectives of the parameter bytes per step, where ZeRO-2 has two (the
// reduce-scatter and the all-gather after the update) and DDP's all-reduce moves the same 2(N-1)/N S:
// 1.5x the volume - less the root unit, which dist/zero3.h gathers once in forward and keeps to the
// end of backward (FSDP's root; BERT's embeddings and head, 72 % of bert_small's bytes). Modelled
// on ZeRO-3's own buckets (one per run of one unit's parameters, apps/whatif/inputs.h zero3_buckets):
// every gather and reduce-scatter replayed on the channel where dist/zero3.h issues it, the compute
// waiting for each unit's gather before its forward and before its backward (zero3_replay below: one
// unit ahead, the forward's length StepProfile::backward_start_ms, unknown: a third of backward_end;
// no backward gather for the root's buckets, Bucket::resident); every wait is exposed. No all-gather
// after the update, the optimizer on 1/N.
// (Until the 2026-11-28 study the backward gathers counted every byte: bert_small +17 % at 1 Gbit/s.)
// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; StrategyOptions::tp = T, N = T x D ranks):
// the split layers' compute and parameters are 1/T per rank (StrategyOptions::tp_split: their share
// of the gradient bytes, which also stands for their share of the compute - the matrix products),
// and each layer adds 4 all-reduces of its activations [B, S, H] over the TP group - 2 in forward (the
// g after attention and after the FFN), 2 in backward (the f's) - plus 2 for the embedding's g and
// the head's f: (4 L + 2) ring all-reduces of tp_activation_bytes over T ranks, on the critical path
// (the next layer needs their result: nothing hides them). The gradients - (1 - tp_split) + tp_split / T
// of the bytes - are all-reduced over the D data-parallel ranks as DDP does, overlapped with backward.
// Throughput counts the D data-parallel batches (a TP group computes one): batch x D / step.
// Stragglers: a collective waits for the slowest rank. When one rank's step times vary with
// standard deviation sigma (StepProfile::jitter_ms), the slowest of N independent ranks is late by
// about sigma * E[max of N standard normals] (0.56 at N = 2, 1.03 at 4, ~sqrt(2 ln N) for large N),
// added once per step. Small on a dedicated GPU node, large on a shared CPU machine.
// Left out on purpose: congestion between concurrent jobs, hierarchical (intra-/inter-node)
// algorithms, and compute slowed by communication sharing the cores (except oversubscription: N
// ranks on C cores each get C/N of a core, see StrategyOptions::cores; the CPU work of moving
// the bytes on a CPU host, Network::host_GBps; and the strategies' own copies of gradient and
// parameter bytes that the 1-rank DDP step does not make, Network::copy_GBps, host_copy_bytes).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "apps/whatif/replay.h"

namespace tandem::whatif {

struct Bucket {
  double bytes = 0;     // f32 gradient bytes (the wire factor scales them for compressed strategies)
  double ready_ms = 0;  // when its last gradient was produced, ms after the step's start (1 rank)
  bool resident = false;  // ZeRO-3: the root unit's, gathered once in forward and kept (no backward gather)
};

// One rank's step, measured (apps/whatif/inputs.h reads it from a trace) or assumed.
struct StepProfile {
  double step_ms = 0;          // data + forward + backward + optimizer, no communication to speak of
  double backward_end_ms = 0;  // ms after the step's start
  double backward_start_ms = 0;  // ms after the step's start (the forward's end); 0: unknown
  double optimizer_ms = 0;     // the optimizer's part of step_ms (ZeRO runs it on 1/N of the weights)
  double jitter_ms = 0;        // standard deviation of step_ms from step to step (stragglers)
  std::vector<Bucket> buckets; // in launch order
  // Each trainable tensor's gradient bytes in registration order: the parameter server's whole-
  // tensor partitions are cut from these. Empty (a model tandem does not build, --params-m): the
  // parameter server is assumed to split the bytes evenly, which flatters it (see ps_server_bytes).
  std::vector<double> param_bytes;
  long long batch_per_rank = 1;
  double total_bytes() const;
};

struct Network {
  double alpha_us = 5;         // latency per message per ring hop (an NCCL-over-Ethernet order)
  double bandwidth_GBps = 12.5;  // per-rank bus bandwidth, 1e9 bytes/s (100 Gb/s); busbw in nccl-tests terms
  // The all-reduce's bus bandwidth as a share of bandwidth_GBps. 1: a ring at the link's payload
  // rate (NCCL). Less where the library's all-reduce does not reach the link's rate: on the emulated
  // 2-host TCP links MPICH 4.0.2's MPI_Iallreduce moved its bytes at 0.49-0.94 of the payload rate,
  // bimodal from run to run (4 MiB at 100 Mbit/s: 355, 523 or 688 ms), the training runs' at 0.60-0.65,
  // while reduce-scatter, all-gather, reduce and broadcast kept within 10 % of it (the 2026-11-28
  // emulated-link study, apps/results/2026-11-28-cpu-2core/emulated_links). Measure it on the target
  // as DDP's reducer runs it, its buckets issued together and run back to back (bench_allreduce
  // --in-flight 3: at 100 Mbit/s one after a barrier reached 0.98 of the rate, three back to back
  // a median of 0.74, the training runs' 0.76 - emulated_links_4), busbw over the link's payload
  // rate. Reduce-scatter,
  // all-gather and the parameter server's reduce and broadcast keep bandwidth_GBps.
  double allreduce_efficiency = 1;
  // A CPU host's own rate of moving bytes between ranks, GB/s (0: not counted - a GPU with a NIC of
  // its own). Where ranks compute on the cores that also run their communication (the comm thread,
  // MPI/UCX, the kernel's TCP), every collective's bytes cost CPU time as well as link time: each
  // collective is costed again at this rate (no latency) and added to compute, not overlapped -
  // also where the rank waits on exposed communication: counting the wait's share of that work as
  // done during the wait (B / host_GBps of each exposed ms) put all 12 cells at 10 Gbit/s 6-22 %
  // short on the quiet sweep (16 of 24 within 10 %, against 20 of 24 without; emulated_links_4).
  // Except a ring collective with no compute beside it - ZeRO-1/2's all-gather after the update,
  // ZeRO-1's reduce-scatters and DDP-without-overlap's all-reduces after backward: its CPU work
  // overlaps its own wire time, so it costs max(link, host) and is not charged to compute (ZeRO-2 in
  // the study: +7 to +15 % at 10 Gbit/s with the two added, -7.4 to +1.1 % with the slower;
  // emulated_links_7_alone). The parameter server's push and pull are neither (the slower of the two
  // gave -11 to -14 %, the sum +6 to +13 %): measured alone, see ps_efficiency; without it, the sum.
  // Measure it as bench_allreduce's busbw with the link unlimited (on emulated hosts the veth is
  // CPU work too): 0.38 GB/s for 8 MiB on the loaded 2-core VM of the 2026-11-28 study.
  // The rate is a ring's busbw: per second a rank sends host_GBps bytes and receives as many, so a
  // collective costs (its busiest rank's bytes sent + received) / (2 host_GBps) - for the ring
  // collectives that is their link formula at host_GBps, for the parameter server see ps_host_ms.
  double host_GBps = 0;
  // A CPU host's memory-copy rate, GB/s of bytes written by one rank's Tensor::copy_ of a large f32
  // tensor (bench_allreduce's copy_GBps, measured beside host_GBps). tandem's own per-step copies,
  // fills and in-place scalings of gradient and parameter bytes beyond those of the 1-rank DDP step
  // (host_copy_bytes) are added to compute at this rate. 0: not counted (a GPU, where they are
  // kernels at HBM rate, or an input not measured).
  double copy_GBps = 0;
  // The parameter server's push and pull alone on this link, host work included, as a share of the
  // link formula's rate (ps_push_pull_ms): bench_allreduce --collective ps's busbw over the link's
  // payload rate. 0: not measured - the push and pull then cost their link time plus their host work
  // (ps_host_ms), which on the 2026-11-28 study over-predicted every PS cell at 10 Gbit/s (+6 to +13 %;
  // the slower of the two under-predicted them, -13 to -14 %: MPI's reduce and broadcast overlap part
  // of their CPU work with the wire, emulated_links_7_alone). Given, it replaces both.
  double ps_efficiency = 0;
};

// A link's payload rate from its line rate: TCP over IPv4 with timestamps on Ethernet carries
// mtu - 52 payload bytes per frame of mtu + 14 bytes (the header a token bucket such as tc's tbf
// counts; a real wire adds 24 more: preamble, FCS, gap - give frame_extra 38 for it). MTU 1500:
// 1448 / 1514 = 95.6 % of the rate.
double tcp_payload_GBps(double line_gbit, int mtu = 1500, int frame_extra = 14);

enum class Strategy { Ddp, DdpNoOverlap, Zero1, Zero2, Zero3, Tp, Ps };
Strategy strategy_from_name(const std::string& name);  // ddp ddp_no_overlap zero1 zero2 zero3 tp ps
std::string strategy_name(Strategy s);

struct StrategyOptions {
  Strategy strategy = Strategy::Ddp;
  double wire_factor = 1;  // bytes on the wire per f32 gradient byte: 0.5 for bf16/fp16 compression
  int ps_servers = 0;      // parameter server: K servers on ranks 0..K-1, as train_imagenet --ps-servers K
                           // (capped at the rank count, as tandem requires K <= N); 0: K = N
  int cores = 0;           // 0: every rank has its own device; >0: all ranks share this many cores
  // Tensor parallelism (Strategy::Tp; see the file comment).
  int tp = 1;                      // T: ranks per TP group (must divide the rank count)
  double tp_split = 0;             // the split layers' share of the gradient bytes (and of the compute)
  double tp_activation_bytes = 0;  // one all-reduce's bytes: [B, S, H] of one rank's batch, f32
  int tp_layers = 0;               // L: transformer layers
};

// Communication costs in ms (0 for one rank).
double ring_allreduce_ms(double bytes, int n, const Network& net);
double reduce_scatter_ms(double bytes, int n, const Network& net);
double all_gather_ms(double bytes, int n, const Network& net);
// Tensor parallelism's activation all-reduces per step over a TP group of `tp` ranks: (4 L + 2) ring
// all-reduces of `activation_bytes` (0 for tp = 1).
double tp_activation_ms(double activation_bytes, int layers, int tp, const Network& net);
// The parameter server's partitions in bytes per server: `param_bytes` (registration order) placed
// by dist::assign_partitions, the function tandem's parameter server calls, so the busiest server
// here is the busiest one there. Empty `param_bytes`: `total_bytes` split evenly.
std::vector<double> ps_server_bytes(const std::vector<double>& param_bytes, int servers, double total_bytes = 0);
// Push + pull at n ranks with servers on ranks 0..K-1 holding `server_bytes` (K = its size, <= n).
double ps_push_pull_ms(const std::vector<double>& server_bytes, int n, const Network& net);
// The parameter server's CPU work of moving its bytes at Network::host_GBps (ms; 0 for one rank or
// host_GBps 0). Its reduce and broadcast move each partition one way at a time: in the push server
// s (rank s < K, partition L_s) receives (N-1) L_s and sends S - L_s, a worker (rank >= K) sends S;
// the pull mirrors it. The busiest rank moves max(2S, 2S + 2(N-2) L_max) bytes sent + received, at
// 2 host_GBps (see Network::host_GBps): (S + (N-2) L_max) / host_GBps. K = N = 2 gives S/host_GBps,
// a ring all-reduce's; K = 1 at N = 2 also S/host_GBps - not 2S, as costing the push and the pull
// each like a link transfer at host_GBps would (the 2026-11-28 emulated-link study: +23 %).
double ps_host_ms(const std::vector<double>& server_bytes, int n, double host_GBps);
// Bytes that dist/'s own code copies, fills (memset) or scales in place per step on the busiest rank
// at `ranks` ranks, less those of the 1-rank DDP step that the model's compute time was measured
// with. Counted from the code (f32 gradients, S = `bytes`, N = ranks, L = `ps_busiest` bytes):
//   1-rank DDP   reducer zero_grad's memset of the buckets S, autograd's copy of each fresh
//                gradient into its bucket view S (AccumulateGrad's known-zero path)        2S
//   DDP          as 1 rank, + the average's scale_ of the buckets (N > 1)                    3S
//   ZeRO-1       DDP's 3S, + the optimizer's zero_grad of its shard views S/N, then per bucket
//                its own slice (a zero-filled chunk S/N + the copy S/N) and the copy of the
//                gathered bucket into the parameters S                                    4S + 3S/N
//   ZeRO-2       the shards' zero_grad S/N (no bucket memset; autograd's gradient becomes .grad
//                uncopied), per bucket a zero-filled padded buffer S + the gradients copied in S,
//                the shard's scale_ S/N, then ZeRO-1's own slice 2S/N and copy-out S     3S + 4S/N
//   ZeRO-3       as ZeRO-2 up to the shard's scale_, no gather after the step            2S + 2S/N
//                (the units' gathers land in the parameters' storage: MPI's bytes, the host term)
//   PS           1-rank DDP's 2S, + pack_grads S and unpack_values S on every rank, + on a server
//                the scale_ of its partition L and the copy of its values L               4S + 2L
//   TP           DDP's count on the rank's gradient share, at D > 1 data-parallel ranks
// Left out: allocations (a fresh ZeRO-2 bucket or ZeRO-3 gather buffer may page-fault), ZeRO-2's
// lone exact-fit parameters (no fill, no copy: VGG's classifier), the wire casts of bf16/f16.
double host_copy_bytes(Strategy s, double bytes, int ranks, double ps_busiest = 0);
// ZeRO-3's step, replayed (replay.h) as dist/zero3.cpp schedules its collectives, on one serial
// channel with the compute that waits for them:
//   forward   the root's runs (Bucket::resident) gathered at the step's start and waited for before any
//             compute; every other unit's gather issued when the forward reaches the unit before it
//             (Zero3Options::prefetch = 1; the first one with the root's) and waited for at its unit;
//   backward  reaching a unit gathers it again (the forward freed it) unless its prefetch is out,
//             and prefetches the next unit; the unit waits for its gather; its end reduce-scatters its
//             gradients. So a prefetch queues behind the reduce-scatter issued just before it.
// The buckets run in reverse launch order in forward, each taking the share of `forward_ms` that it
// takes of backward (its ready time's gap); backward's compute is the profile's, times `time_scale`.
// Without a unit layout (no bucket resident: --params-m): every forward gather from the step's start,
// and each bucket's backward gather issued with its reduce-scatter when its gradients are ready.
// History (the 2026-11-28 emulated-link study): the model first put every forward gather at the
// step's start (ResNet-50 ZeRO-3 at 10 Gbit/s 12.8 % short: its layer4 holds 64 % of the bytes and
// 39 % of the forward, so with one unit of prefetch its gathers wait unit after unit), then, with the
// forward unit by unit, still issued each backward gather after its unit's gradients were ready, as if
// backward needed no weights (-10.6 %; -7.1 % with the backward as above).
Replay zero3_replay(const StepProfile& p, double forward_ms, double time_scale,
                    const std::function<double(double)>& gather_ms, const std::function<double(double)>& reduce_scatter_ms);
// E[max of n independent standard normals]: exact values for n <= 8, Blom's approximation above.
double expected_max_normal(int n);

struct Prediction {
  int ranks = 1;
  double step_ms = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0, overlap = 1;
  double straggler_ms = 0;  // waiting for the slowest rank (part of step_ms, not of exposed_ms)
  double ps_busiest_bytes = 0;  // parameter server: the busiest server's partition (0 otherwise)
  double tp_ms = 0;             // TP: the activation all-reduces (part of comm_ms and exposed_ms)
  double host_cpu_ms = 0;       // the communication's CPU work (Network::host_GBps; part of compute_ms)
  double copy_ms = 0;           // dist/'s own copies beyond the 1-rank step's (Network::copy_GBps; part of compute_ms)
  double images_per_s = 0, images_per_s_per_rank = 0, speedup = 1, efficiency = 1;
};

// Step time, throughput and scaling efficiency (weak scaling: batch_per_rank on every rank,
// against the same profile at 1 rank) at `ranks` ranks.
Prediction predict(const StepProfile& p, const Network& net, const StrategyOptions& s, int ranks);

// "Within target": a prediction agrees with a measurement of the same cell when both hold:
//   step     |predicted - measured| step time <= `step` x the measured step (the 15 %);
//   exposed  |predicted - measured| exposed communication <= max(`exposed` x the measured exposed
//            time, `exposed_floor` x the measured step). The predicted side is exposed_ms +
//            straggler_ms, because tandem's timeline (dist/measure/timeline.h) measures waiting for a
//            slower rank as exposed communication too.
// Why this bound: exposed time is a small difference of two noisy times (on a shared CPU its repeats
// differ by 2x), so 15 % would fail every honest model; but a prediction off by more than half of
// the measurement has the mechanism wrong (0.1 ms predicted against 4.2 ms measured is 98 % off),
// and a step time that matches only because compute errors cancel a missing communication term is
// not a model that works. The floor, 2 % of the step: an error that small moves the step verdict by
// at most 2 of its 15 points and sits in the step's own noise, so 0.3 ms predicted against 0.05 ms
// measured in a 30 ms step is not a failure.
struct Target {
  double step = 0.15;
  double exposed = 0.5;
  double exposed_floor = 0.02;
};
struct Verdict {
  double step_error = 0;            // (predicted - measured) / measured step time
  double predicted_exposed_ms = 0;  // exposed_ms + straggler_ms
  double exposed_error_ms = 0;      // predicted_exposed_ms - measured exposed
  double exposed_bound_ms = 0;      // the largest |exposed_error_ms| that passes
  bool step_ok = false, exposed_ok = false;
  bool within() const { return step_ok && exposed_ok; }
};
Verdict judge(const Prediction& p, double measured_step_ms, double measured_exposed_ms, const Target& t = {});

}  // namespace tandem::whatif
