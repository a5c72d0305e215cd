// apps/whatif/model.cpp: the cost formulas and the replay of one step (see model.h).
#include "apps/whatif/model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tandem::whatif {

double StepProfile::total_bytes() const {
  double s = 0;
  for (const Bucket& b : buckets) s += b.bytes;
  return s;
}

Strategy strategy_from_name(const std::string& name) {
  if (name == "ddp") return Strategy::Ddp;
  if (name == "ddp_no_overlap") return Strategy::DdpNoOverlap;
  if (name == "zero1") return Strategy::Zero1;
  if (name == "zero2") return Strategy::Zero2;
  if (name == "ps") return Strategy::Ps;
  TANDEM_THROW("unknown strategy '", name, "': use ddp, ddp_no_overlap, zero1, zero2 or ps");
}

std::string strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Ddp: return "ddp";
    case Strategy::DdpNoOverlap: return "ddp_no_overlap";
    case Strategy::Zero1: return "zero1";
    case Strategy::Zero2: return "zero2";
    case Strategy::Ps: return "ps";
  }
  return "?";
}

namespace {
double transfer_ms(double bytes, const Network& net) { return bytes / (net.bandwidth_GBps * 1e9) * 1e3; }
double hops_ms(double hops, const Network& net) { return hops * net.alpha_us / 1e3; }
}  // namespace

double ring_allreduce_ms(double bytes, int n, const Network& net) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * transfer_ms(bytes, net) + hops_ms(2.0 * (n - 1), net);
}

double reduce_scatter_ms(double bytes, int n, const Network& net) {
  if (n <= 1) return 0;
  return 1.0 * (n - 1) / n * transfer_ms(bytes, net) + hops_ms(n - 1.0, net);
}

double all_gather_ms(double bytes, int n, const Network& net) { return reduce_scatter_ms(bytes, n, net); }

double ps_push_pull_ms(double bytes, int n, int servers, const Network& net) {
  if (n <= 1) return 0;
  if (servers <= 0)  // a server on every rank: each sends and receives (N-1)/N of S per direction
    return 2.0 * (n - 1) / n * transfer_ms(bytes, net) + hops_ms(2, net);
  // Dedicated servers: a worker sends S; a server receives N * S/P at once (incast), and the
  // slower of the two links sets the pace; the pull mirrors the push.
  const double link = std::max(1.0, static_cast<double>(n) / servers);
  return 2.0 * link * transfer_ms(bytes, net) + hops_ms(2, net);
}

double expected_max_normal(int n) {
  // Tabulated (Harter 1961) for small n, where the approximation is worst.
  static const double kExact[] = {0, 0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236};
  if (n <= 1) return 0;
  if (n <= 8) return kExact[n];
  // Blom: the expected maximum is close to the normal quantile at (n - 0.375) / (n + 0.25).
  const double q = (n - 0.375) / (n + 0.25);
  // Inverse normal CDF by bisection on erfc (accurate enough for a model term).
  double lo = 0, hi = 10;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Prediction predict(const StepProfile& p, const Network& net, const StrategyOptions& s, int ranks) {
  TANDEM_CHECK(ranks >= 1, "what-if: ranks must be at least 1, got ", ranks);
  TANDEM_CHECK(p.step_ms > 0, "what-if: the measured step time must be positive (is the profile empty?)");
  TANDEM_CHECK(net.bandwidth_GBps > 0, "what-if: the network bandwidth must be positive");
  // Oversubscribed cores stretch every compute time by the same factor.
  const double scale = s.cores > 0 ? std::max(1.0, static_cast<double>(ranks) / s.cores) : 1.0;
  const double backward_end = p.backward_end_ms * scale;
  // The parameter server pushes after backward, as dist/extras/parameter_server.h's synchronous baseline does.
  const bool overlap = s.strategy != Strategy::DdpNoOverlap && s.strategy != Strategy::Zero1 &&
                       s.strategy != Strategy::Ps;
  double channel = 0, comm = 0;  // when the serial communication channel is free; its busy time
  for (const Bucket& b : p.buckets) {
    const double bytes = b.bytes * s.wire_factor;
    double cost = 0;
    switch (s.strategy) {
      case Strategy::Ddp:
      case Strategy::DdpNoOverlap: cost = ring_allreduce_ms(bytes, ranks, net); break;
      case Strategy::Zero1:
      case Strategy::Zero2: cost = reduce_scatter_ms(bytes, ranks, net); break;
      case Strategy::Ps: cost = ps_push_pull_ms(bytes, ranks, s.ps_servers, net); break;
    }
    const double start = std::max(overlap ? b.ready_ms * scale : backward_end, channel);
    channel = start + cost;
    comm += cost;
  }
  Prediction r;
  r.ranks = ranks;
  r.compute_ms = p.step_ms * scale;
  r.exposed_ms = std::max(0.0, channel - backward_end);
  double extra = 0;
  if (s.strategy == Strategy::Zero1 || s.strategy == Strategy::Zero2) {
    // The optimizer updates 1/N of the weights, then the updated f32 weights are all-gathered.
    const double gather = all_gather_ms(p.total_bytes(), ranks, net);
    extra = gather - p.optimizer_ms * scale * (1.0 - 1.0 / ranks);
    comm += gather;
    r.exposed_ms += gather;
  }
  r.comm_ms = comm;
  r.overlap = comm > 0 ? std::max(0.0, comm - r.exposed_ms) / comm : 1.0;
  r.straggler_ms = p.jitter_ms * scale * expected_max_normal(ranks);
  r.step_ms = r.compute_ms + std::max(0.0, channel - backward_end) + extra + r.straggler_ms;
  r.images_per_s = 1e3 * p.batch_per_rank * ranks / r.step_ms;
  r.images_per_s_per_rank = r.images_per_s / ranks;
  const double one = 1e3 * p.batch_per_rank / p.step_ms;  // the same profile at 1 rank
  r.speedup = r.images_per_s / one;
  r.efficiency = r.speedup / ranks;
  return r;
}

}  // namespace tandem::whatif
