// apps/whatif/model.cpp: the cost formulas and the replay of one step (see model.h).
#include "apps/whatif/model.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "apps/trainer/step/name_table.h"  // defines: NameTable, from_name, name_of
#include "core/check.h"
#include "dist/extras/parameter_server.h"  // assign_partitions: the servers' whole-tensor partitions

namespace tandem::whatif {

double StepProfile::total_bytes() const {
  double s = 0;
  for (const Bucket& b : buckets) s += b.bytes;
  return s;
}

namespace {
constexpr trainer::NameTable<Strategy> kStrategies[] = {
    {Strategy::Ddp, "ddp"},     {Strategy::DdpNoOverlap, "ddp_no_overlap"}, {Strategy::Zero1, "zero1"},
    {Strategy::Zero2, "zero2"}, {Strategy::Zero3, "zero3"}, {Strategy::Tp, "tp"}, {Strategy::Ps, "ps"}};
}  // namespace

Strategy strategy_from_name(const std::string& name) {
  const std::optional<Strategy> s = trainer::from_name(kStrategies, name);
  TANDEM_CHECK(s, "unknown strategy '", name, "': use ddp, ddp_no_overlap, zero1, zero2, zero3, tp or ps");
  return *s;
}

std::string strategy_name(Strategy s) { return trainer::name_of(kStrategies, s); }

namespace {
double transfer_ms(double bytes, const Network& net) { return bytes / (net.bandwidth_GBps * 1e9) * 1e3; }
double hops_ms(double hops, const Network& net) { return hops * net.alpha_us / 1e3; }
}  // namespace

double tcp_payload_GBps(double line_gbit, int mtu, int frame_extra) {
  TANDEM_CHECK(mtu > 52, "what-if: an MTU of ", mtu, " bytes holds no TCP payload (IPv4 20 + TCP 20 + timestamps 12)");
  return line_gbit / 8 * (mtu - 52.0) / (mtu + frame_extra);
}

double ring_allreduce_ms(double bytes, int n, const Network& net) {
  if (n <= 1) return 0;
  TANDEM_CHECK(net.allreduce_efficiency > 0 && net.allreduce_efficiency <= 1,
               "what-if: the all-reduce's efficiency is a share of the bandwidth, in (0, 1]: got ", net.allreduce_efficiency);
  return 2.0 * (n - 1) / n * transfer_ms(bytes, net) / net.allreduce_efficiency + hops_ms(2.0 * (n - 1), net);
}

double reduce_scatter_ms(double bytes, int n, const Network& net) {
  if (n <= 1) return 0;
  return 1.0 * (n - 1) / n * transfer_ms(bytes, net) + hops_ms(n - 1.0, net);
}

double all_gather_ms(double bytes, int n, const Network& net) { return reduce_scatter_ms(bytes, n, net); }

double tp_activation_ms(double activation_bytes, int layers, int tp, const Network& net) {
  return (4.0 * layers + 2.0) * ring_allreduce_ms(activation_bytes, tp, net);
}

std::vector<double> ps_server_bytes(const std::vector<double>& param_bytes, int servers, double total_bytes) {
  TANDEM_CHECK(servers >= 1, "what-if: the parameter server needs at least one server, got ", servers);
  std::vector<double> load(static_cast<size_t>(servers), 0.0);
  if (param_bytes.empty()) {
    std::fill(load.begin(), load.end(), total_bytes / servers);
    return load;
  }
  std::vector<int64_t> numels;  // assign_partitions balances elements; f32 gradients: bytes / 4
  for (double b : param_bytes) numels.push_back(static_cast<int64_t>(b / 4));
  const std::vector<int> server = dist::assign_partitions(numels, servers);
  for (size_t i = 0; i < param_bytes.size(); ++i) load[static_cast<size_t>(server[i])] += param_bytes[i];
  return load;
}

double ps_push_pull_ms(const std::vector<double>& server_bytes, int n, const Network& net) {
  if (n <= 1 || server_bytes.empty()) return 0;
  const int k = static_cast<int>(server_bytes.size());
  TANDEM_CHECK(k <= n, "what-if: ", k, " parameter servers on ", n, " ranks; servers sit on ranks 0..K-1, so K <= N");
  double total = 0, busiest = 0, least = server_bytes.front();
  for (double b : server_bytes) total += b, busiest = std::max(busiest, b), least = std::min(least, b);
  // The busiest server's inbound link carries its partition from every other rank; a rank's outbound
  // link carries every partition but its own (a rank that serves nothing keeps none: K < N).
  const double incast = (n - 1) * busiest, outbound = total - (k < n ? 0.0 : least);
  // A server receives N-1 pushes; a rank sends at most N-1 (K-1 or K <= N-1): N-1 messages each way.
  return 2.0 * (transfer_ms(std::max(incast, outbound), net) + hops_ms(n - 1.0, net));
}

double ps_host_ms(const std::vector<double>& server_bytes, int n, double host_GBps) {
  if (n <= 1 || server_bytes.empty() || host_GBps <= 0) return 0;
  double total = 0, busiest = 0;
  for (double b : server_bytes) total += b, busiest = std::max(busiest, b);
  // Push + pull, bytes sent + received: a worker 2S, server s 2(S - L_s) + 2(N-1) L_s.
  const double moved = std::max(2 * total, 2 * total + 2.0 * (n - 2) * busiest);
  return moved / (2 * host_GBps * 1e9) * 1e3;
}

double host_copy_bytes(Strategy s, double bytes, int ranks, double ps_busiest) {
  if (ranks <= 1) return 0;  // the 1-rank DDP step itself (every strategy's 1-rank step is predicted as it)
  const double S = bytes, n = ranks, one_rank = 2 * S;  // see model.h for where each term is in dist/
  switch (s) {
    case Strategy::Ddp:
    case Strategy::DdpNoOverlap:
    case Strategy::Tp: return 3 * S - one_rank;
    case Strategy::Zero1: return 4 * S + 3 * S / n - one_rank;
    case Strategy::Zero2: return 3 * S + 4 * S / n - one_rank;
    case Strategy::Zero3: return 2 * S + 2 * S / n - one_rank;
    case Strategy::Ps: return 4 * S + 2 * ps_busiest - one_rank;
  }
  return 0;
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

Replay zero3_replay(const StepProfile& p, double forward_ms, double time_scale,
                    const std::function<double(double)>& gather_ms, const std::function<double(double)>& reduce_scatter_ms) {
  std::vector<double> xs;  // the transfers' times, in the order they are made here
  auto transfer = [&](double ms) {
    xs.push_back(ms);
    return static_cast<int>(xs.size()) - 1;
  };
  const size_t nb = p.buckets.size();
  bool units = false;  // per-unit buckets with the root marked (inputs.h zero3_buckets)?
  for (const Bucket& b : p.buckets) units = units || b.resident;
  // Backward's compute, bucket by bucket: from the previous ready time (or backward's start) to its own.
  const double bwd_begin = (p.backward_start_ms > 0 ? p.backward_start_ms : 0.0) * time_scale;
  const double bwd_end = p.backward_end_ms * time_scale;
  std::vector<double> work(nb);
  for (size_t i = 0; i < nb; ++i)
    work[i] = std::max(0.0, p.buckets[i].ready_ms * time_scale - (i ? p.buckets[i - 1].ready_ms * time_scale : bwd_begin));
  const double tail = std::max(0.0, bwd_end - (nb ? p.buckets.back().ready_ms * time_scale : bwd_begin));
  std::vector<Segment> segs;
  if (!units) {
    // No unit layout (--params-m): every forward gather from the step's start, prefetched freely (the
    // forward waits only for their end), and each bucket's backward gather with its reduce-scatter.
    segs.push_back({forward_ms, {transfer(gather_ms(p.total_bytes()))}, -1, {}});
    segs.push_back({0, {}, static_cast<int>(xs.size()) - 1, {}});
    for (size_t i = 0; i < nb; ++i)
      segs.push_back({work[i], {}, -1, {transfer(gather_ms(p.buckets[i].bytes)), transfer(reduce_scatter_ms(p.buckets[i].bytes))}});
    segs.push_back({tail, {}, -1, {}});
    return replay_step(segs, xs);
  }
  // One pass over the buckets in `order` (forward: reverse launch order; backward: launch order), each
  // a segment of `work_of(i)`: reaching a unit issues its gather unless it is out already (its
  // prefetch) and the next unit's (Zero3Options::prefetch = 1), then waits for its own; `on_end(i)`
  // is issued when the segment is done. A resident (root) bucket waits for `root_wait`.
  std::vector<int> gathered(nb, -1);  // each unit's gather in the current pass
  auto pass = [&](const std::vector<size_t>& order, const std::function<double(size_t)>& work_of,
                  const std::function<std::vector<int>(size_t)>& on_end, int root_wait) {
    std::vector<size_t> units_in_order;
    for (size_t i : order)
      if (!p.buckets[i].resident) units_in_order.push_back(i);
    size_t k = 0;  // units reached
    for (size_t i : order) {
      Segment g{work_of(i), {}, root_wait, {}};
      if (!p.buckets[i].resident) {
        for (size_t u : {i, k + 1 < units_in_order.size() ? units_in_order[k + 1] : i})
          if (gathered[u] < 0) g.on_start.push_back(gathered[u] = transfer(gather_ms(p.buckets[u].bytes)));
        g.wait_for = gathered[i];
        ++k;
      }
      g.on_end = on_end(i);
      segs.push_back(g);
    }
  };
  std::vector<size_t> forward_order, backward_order;
  for (size_t i = 0; i < nb; ++i) backward_order.push_back(i), forward_order.push_back(nb - 1 - i);
  // Forward: the root's runs gathered together at the step's start, the first unit's gather with them
  // (the root's pre-forward hook), and the root waited for before any compute. Each bucket takes the
  // share of the forward that it takes of backward.
  double root = 0;
  for (const Bucket& b : p.buckets) root += b.resident ? b.bytes : 0.0;
  const int root_gather = root > 0 ? transfer(gather_ms(root)) : -1;
  Segment start{0, {}, root_gather, {}};
  if (root_gather >= 0) start.on_start.push_back(root_gather);
  for (size_t i : forward_order)
    if (!p.buckets[i].resident) {
      start.on_start.push_back(gathered[i] = transfer(gather_ms(p.buckets[i].bytes)));
      break;
    }
  segs.push_back(start);
  const double bwd_span = std::max(1e-9, bwd_end - bwd_begin);
  pass(forward_order, [&](size_t i) { return work[i] / bwd_span * forward_ms; },
       [](size_t) { return std::vector<int>{}; }, root_gather);
  // Backward: dist/zero3.cpp frees every unit after its forward but the root, so each unit is gathered
  // again; its end reduce-scatters its gradients. The gathers queue behind the reduce-scatters issued
  // before them.
  std::fill(gathered.begin(), gathered.end(), -1);
  pass(backward_order, [&](size_t i) { return work[i]; },
       [&](size_t i) { return std::vector<int>{transfer(reduce_scatter_ms(p.buckets[i].bytes))}; }, -1);
  segs.push_back({tail, {}, -1, {}});
  return replay_step(segs, xs);
}

Prediction predict(const StepProfile& p, const Network& net, const StrategyOptions& s, int ranks) {
  TANDEM_CHECK(ranks >= 1, "what-if: ranks must be at least 1, got ", ranks);
  TANDEM_CHECK(p.step_ms > 0, "what-if: the measured step time must be positive (is the profile empty?)");
  TANDEM_CHECK(net.bandwidth_GBps > 0, "what-if: the network bandwidth must be positive");
  const bool tp = s.strategy == Strategy::Tp;
  const int t = tp ? s.tp : 1;
  TANDEM_CHECK(t >= 1 && ranks % t == 0, "what-if: tensor parallelism over ", t, " ranks needs a rank count divisible "
               "by it, got ", ranks);
  TANDEM_CHECK(!tp || (s.tp_split >= 0 && s.tp_split <= 1), "what-if: tp_split is a share, in [0, 1]: got ",
               s.tp_split);
  const int dp = ranks / t;  // the data-parallel ranks: the gradients' collectives span these
  // Oversubscribed cores stretch every compute time by the same factor; TP shrinks the split
  // layers' part of it to 1/T, and with it their gradient bytes.
  const double shrink = tp ? 1.0 - s.tp_split + s.tp_split / t : 1.0;
  const double scale = (s.cores > 0 ? std::max(1.0, static_cast<double>(ranks) / s.cores) : 1.0) * shrink;
  const double grad_share = shrink;  // TP: this rank's gradient bytes (the split ones 1/T)
  // TP's activation all-reduces sit on the critical path: everything after the forward's first
  // layer starts later by their forward half, the step by all of them.
  const double tp_ms = tp ? tp_activation_ms(s.tp_activation_bytes, s.tp_layers, t, net) : 0.0;
  // The ranks' own CPU work of moving the bytes (Network::host_GBps): every collective below is
  // costed a second time on `host`, a network of that rate and no latency, and the sum is compute.
  const Network host{0, net.host_GBps > 0 ? net.host_GBps : 1, 1};
  double cpu = 0;
  auto on_host = [&](double host_cost) { if (net.host_GBps > 0) cpu += host_cost; };
  // A ring collective with no compute beside it (issued after backward or after the update): its
  // bytes' CPU work overlaps its own wire time, so it costs the slower of the two, and its host work
  // is not charged to compute again (see Network::host_GBps).
  auto alone = [&](double link_ms, double host_ms) { return net.host_GBps > 0 ? std::max(link_ms, host_ms) : link_ms; };
  if (tp) on_host(tp_activation_ms(s.tp_activation_bytes, s.tp_layers, t, host));
  // ZeRO-3 (see model.h): its gathers and reduce-scatters replayed with the compute that waits for them.
  double channel = 0, comm = tp_ms;  // channel: when the serial channel is free; comm: its busy time
  double zero3_exposed = 0;
  const bool zero3 = s.strategy == Strategy::Zero3 && dp > 1;
  if (zero3) {
    const double forward = (p.backward_start_ms > 0 ? p.backward_start_ms : p.backward_end_ms / 3) * scale;
    const Replay z = zero3_replay(
        p, forward, scale, [&](double bytes) { return all_gather_ms(bytes * s.wire_factor, dp, net); },
        [&](double bytes) { return reduce_scatter_ms(bytes * s.wire_factor, dp, net); });
    comm += z.channel_ms;
    zero3_exposed = z.end_ms - p.backward_end_ms * scale;
    on_host(all_gather_ms(p.total_bytes() * s.wire_factor, dp, host));  // the forward gathers' bytes
  }
  const double backward_end = p.backward_end_ms * scale + tp_ms;
  // The parameter server pushes after backward, as dist/extras/parameter_server.h's synchronous baseline does.
  const bool overlap = s.strategy != Strategy::DdpNoOverlap && s.strategy != Strategy::Zero1 &&
                       s.strategy != Strategy::Ps;
  double ps_busiest = 0;  // parameter server: the busiest server's partition (f32 bytes)
  if (s.strategy == Strategy::Ps) {
    // One push and one pull per server, all servers at once, after backward (not per bucket).
    const int k = s.ps_servers > 0 ? std::min(s.ps_servers, ranks) : ranks;
    std::vector<double> wire = ps_server_bytes(p.param_bytes, k, p.total_bytes());
    ps_busiest = *std::max_element(wire.begin(), wire.end());
    for (double& b : wire) b *= s.wire_factor;
    TANDEM_CHECK(net.ps_efficiency >= 0 && net.ps_efficiency <= 1, "what-if: the parameter server's efficiency is "
                 "a share of the link's rate, in (0, 1], or 0 (not measured): got ", net.ps_efficiency);
    if (net.ps_efficiency > 0) {  // measured alone on the link: the host work is in it (Network::ps_efficiency)
      comm = ps_push_pull_ms(wire, ranks, net) / net.ps_efficiency;
    } else {
      comm = ps_push_pull_ms(wire, ranks, net);
      cpu += ps_host_ms(wire, ranks, net.host_GBps);
    }
    channel = backward_end + comm;
  } else {
    for (const Bucket& b : p.buckets) {
      const double bytes = b.bytes * s.wire_factor * grad_share;
      auto cost_on = [&](const Network& n) {
        return s.strategy == Strategy::Zero1 || s.strategy == Strategy::Zero2
                   ? reduce_scatter_ms(bytes, dp, n)
               : s.strategy == Strategy::Zero3  // its backward gather (not the root's), then its reduce-scatter
                   ? (b.resident ? 0.0 : all_gather_ms(bytes, dp, n)) + reduce_scatter_ms(bytes, dp, n)
                   : ring_allreduce_ms(bytes, dp, n);
      };
      if (overlap) on_host(cost_on(host));  // beside backward; alone (below), the host work is in its time
      if (zero3) continue;                  // on the channel in zero3_replay
      const double cost = overlap ? cost_on(net) : alone(cost_on(net), cost_on(host));
      // A bucket's gradients are ready later by the TP forward all-reduces, and by its share of the
      // backward TP all-reduces (they run before it, in order).
      const double ready = b.ready_ms * scale + tp_ms / 2 +
                           (p.backward_end_ms > 0 ? tp_ms / 2 * std::min(1.0, b.ready_ms / p.backward_end_ms) : 0.0);
      const double start = std::max(overlap ? ready : backward_end, channel);
      channel = start + cost;
      comm += cost;
    }
  }
  Prediction r;
  r.ranks = ranks;
  r.tp_ms = tp_ms;
  r.compute_ms = p.step_ms * scale;  // + the communication's CPU work, below
  // Exposed: what the channel runs past the end of backward and all of TP's activation all-reduces
  // (none of them overlaps compute); for ZeRO-3, every wait of its replay.
  r.exposed_ms = zero3 ? zero3_exposed : std::max(0.0, channel - backward_end) + tp_ms;
  double extra = 0;  // the optimizer's saving (negative)
  if (s.strategy == Strategy::Zero1 || s.strategy == Strategy::Zero2) {
    // The optimizer updates 1/N of the weights, then the updated f32 weights are all-gathered, alone.
    const double gather = alone(all_gather_ms(p.total_bytes(), ranks, net), all_gather_ms(p.total_bytes(), ranks, host));
    extra = -p.optimizer_ms * scale * (1.0 - 1.0 / ranks);
    comm += gather;
    r.exposed_ms += gather;
  }
  if (s.strategy == Strategy::Zero3) extra = -p.optimizer_ms * scale * (1.0 - 1.0 / dp);  // each unit gathered when it runs
  if (s.strategy == Strategy::Ps && ranks > 1) {
    // Each server updates only its partition, between push and pull: the busiest one sets the pace.
    r.ps_busiest_bytes = ps_busiest;
    if (p.total_bytes() > 0) extra = -p.optimizer_ms * scale * (1.0 - ps_busiest / p.total_bytes());
  }
  r.comm_ms = comm;
  r.host_cpu_ms = cpu;
  // dist/'s own copies beyond the 1-rank step's (host_copy_bytes), f32 bytes of this rank's
  // gradients (TP: its share; TP at D = 1 runs no data-parallel reducer).
  if (net.copy_GBps > 0 && (!tp || dp > 1)) {
    const double bytes = host_copy_bytes(s.strategy, p.total_bytes() * grad_share, ranks, ps_busiest);
    r.copy_ms = bytes / (net.copy_GBps * 1e9) * 1e3;
  }
  r.compute_ms += cpu + r.copy_ms;
  r.overlap = comm > 0 ? std::max(0.0, comm - r.exposed_ms) / comm : 1.0;
  r.straggler_ms = p.jitter_ms * scale * expected_max_normal(ranks);
  r.step_ms = r.compute_ms + r.exposed_ms + extra + r.straggler_ms;
  r.images_per_s = 1e3 * p.batch_per_rank * dp / r.step_ms;  // a TP group computes one batch
  r.images_per_s_per_rank = r.images_per_s / ranks;
  const double one = 1e3 * p.batch_per_rank / p.step_ms;  // the same profile at 1 rank
  r.speedup = r.images_per_s / one;
  r.efficiency = r.speedup / ranks;
  return r;
}

Verdict judge(const Prediction& p, double measured_step_ms, double measured_exposed_ms, const Target& t) {
  TANDEM_CHECK(measured_step_ms > 0, "what-if: a measured step time must be positive, got ", measured_step_ms);
  Verdict v;
  v.step_error = (p.step_ms - measured_step_ms) / measured_step_ms;
  v.step_ok = std::abs(v.step_error) <= t.step;
  v.predicted_exposed_ms = p.exposed_ms + p.straggler_ms;
  v.exposed_error_ms = v.predicted_exposed_ms - measured_exposed_ms;
  v.exposed_bound_ms = std::max(t.exposed * measured_exposed_ms, t.exposed_floor * measured_step_ms);
  v.exposed_ok = std::abs(v.exposed_error_ms) <= v.exposed_bound_ms;
  return v;
}

}  // namespace tandem::whatif
