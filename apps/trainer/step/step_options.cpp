// apps/trainer/step/step_options.cpp: the names of the choices, every refusal, and DDP's options (see
// step_options.h). Each refusal says what cannot work, why, and what to change.
#include "apps/trainer/step/step_options.h"

#include <cstdlib>

#include "apps/trainer/step/name_table.h"  // defines: NameTable, from_name, name_of
#include "core/check.h"               // defines: TANDEM_CHECK, TANDEM_THROW

namespace tandem::trainer {

namespace {
constexpr NameTable<Strategy> kStrategies[] = {{Strategy::Ddp, "ddp"}, {Strategy::Zero1, "zero1"}, {Strategy::Zero2, "zero2"},
                                               {Strategy::Zero3, "zero3"}, {Strategy::ParameterServer, "ps"}};
// "off" is the flags' word (--amp off), "f32" the dtype's.
constexpr NameTable<Precision> kPrecisions[] = {
    {Precision::F32, "off"}, {Precision::F32, "f32"}, {Precision::BF16, "bf16"}, {Precision::F16, "fp16"}};
}  // namespace

Strategy strategy_from_name(const std::string& name) {
  const std::optional<Strategy> s = from_name(kStrategies, name);
  TANDEM_CHECK(s, "StepOptions::strategy '", name, "': use ddp, zero1, zero2, zero3 or ps");
  return *s;
}

const char* strategy_name(Strategy s) { return name_of(kStrategies, s); }

Precision precision_from_name(const std::string& name) {
  const std::optional<Precision> p = from_name(kPrecisions, name);
  TANDEM_CHECK(p, "StepOptions::precision '", name, "': use off, bf16 or fp16");
  return *p;
}

const char* precision_name(Precision p) { return name_of(kPrecisions, p); }

namespace {
const char* nonfinite_name(OnNonfinite p) {
  return p == OnNonfinite::Stop ? "stop" : p == OnNonfinite::Skip ? "skip" : "off";
}
}  // namespace

std::optional<std::string> refusal(const StepOptions& o) {
  auto n = [&](const std::string& option, const std::string& value = "") { return option_name(o.names, option, value); };
  const std::string strategy = strategy_name(o.strategy), ps = "ps", ddp = "ddp";
  const bool is_ps = o.strategy == Strategy::ParameterServer;
  const std::string accum = std::to_string(o.grad_accum_steps);
  if (o.compress != "none" && o.compress != "bf16" && o.compress != "fp16")
    return n("compress", o.compress) + " is not a wire dtype: use none, bf16 or fp16";
  if (zero_stage(o.strategy) >= 2 && o.compress != "none")
    return n("strategy", strategy) + " with " + n("compress", o.compress) + " is not supported (stage " +
           std::to_string(zero_stage(o.strategy)) + " reduce-scatters f32 gradients): drop " + n("compress") +
           " or use " + n("strategy", "zero1");
  if (o.grad_accum_steps < 1)
    return n("grad_accum_steps", accum) + " must be at least 1 (1: no accumulation)";
  // Tensor parallelism (step_options.h, "tp"): what the Step composes with it, and why not the rest.
  if (o.tp < 1) return n("tp", std::to_string(o.tp)) + " must be at least 1 (1: no tensor parallelism)";
  if (o.tp > 1) {
    const std::string tp = n("tp", std::to_string(o.tp));
    if (is_ps)
      return tp + " cannot run with " + n("strategy", ps) + ": the servers partition whole parameters over the "
             "world, and a TP rank holds a shard of each split one. Use " + n("strategy", ddp) + " or " +
             n("strategy", "zero1");
    if (o.strategy == Strategy::Zero3)
      return tp + " with " + n("strategy", "zero3") + " is not supported: stage 3 would gather each unit over the "
             "data-parallel ranks between the TP group's per-layer all-reduces, an interleaving not built yet. Use " +
             n("strategy", "zero2") + " with " + tp + " (the split layers are already 1/" + std::to_string(o.tp) +
             " per rank), or " + n("strategy", "zero3") + " without it";
    if (o.cuda_graph || o.capturable)
      return tp + " with " + n(o.cuda_graph ? "cuda_graph" : "capturable") +
             " is not supported: the TP gradient norm and the TP model's all-reduces are issued from the host. "
             "Drop one of them";
    if (o.optimizer == "lamb")
      return tp + " with " + n("optimizer", "lamb") + " is not supported: LAMB's trust ratio is a per-parameter "
             "norm, and a TP rank holds a shard of each split parameter (its ratio would be the shard's). Use " +
             n("optimizer", "adamw");
  }
  // CUDA graphs (graph_capture.h). What a captured step cannot contain: each reads a host value in
  // the middle of the step, or passes a changing one to a kernel as an argument, which the graph
  // would freeze. Models with dropout are captured (core/graph_rng.h): no model is refused here.
  // The update itself is captured in its device-side form (StepOptions::capturable, step.h): any
  // optimizer (the LR and the step counts in device memory), AMP (the loss scale and the found-inf
  // flag on the device, the skip decided there) and clipping (the norm and coefficient on the
  // device).
  if (o.cuda_graph) {
    if (o.on_nonfinite != OnNonfinite::Off)
      return n("cuda_graph") + " cannot capture " + n("on_nonfinite", nonfinite_name(o.on_nonfinite)) +
             ": its per-step loss check reads the loss on the host in the middle of the step. Add " +
             n("on_nonfinite", "off");
    if (o.strategy == Strategy::Zero3)
      return n("cuda_graph") + " cannot capture " + n("strategy", "zero3") +
             ": its step allocates each unit's gathered parameters before the unit runs and frees them after, and "
             "picks the units to prefetch on the host, which a replayed graph would freeze. Use " +
             n("strategy", "zero1") + " or drop " + n("cuda_graph");
    if (is_zero(o.strategy))
      return n("cuda_graph") + " with " + n("strategy", strategy) +
             " is not supported yet (the sharded step has not been checked for capture): drop " +
             n("strategy", strategy) + " or " + n("cuda_graph");
    if (is_ps)
      return n("cuda_graph") + " cannot capture " + n("strategy", ps) +
             ": the parameter server's push and pull run on the host. Use " + n("strategy", ddp) + " or drop " +
             n("cuda_graph");
    if (o.grad_accum_steps > 1)
      return n("cuda_graph") + " captures one forward and backward per step, and " + n("grad_accum_steps", accum) +
             " runs several (each would need its own static inputs): drop one of them";
  }
  // The capturable update without a graph: the same two strategies have no device-side form.
  if (o.capturable) {
    if (is_zero(o.strategy))
      return n("capturable") + " with " + n("strategy", strategy) +
             " is not supported yet: the sharded update (the clipping norm and LAMB's norms summed across the "
             "shards, the found-inf flag of each shard) has no device-side form in the Step. Drop " +
             n("capturable") + " or use " + n("strategy", ddp);
    if (is_ps)
      return n("capturable") + " cannot run with " + n("strategy", ps) +
             ": the parameter server's push, update and pull run on the host. Use " + n("strategy", ddp) +
             " or drop " + n("capturable");
  }
  if (zero_stage(o.strategy) >= 2 && o.grad_accum_steps > 1)
    return n("grad_accum_steps", accum) + " with " + n("strategy", strategy) + " is not supported: stage " +
           std::to_string(zero_stage(o.strategy)) + " keeps only this rank's shard of each reduced bucket, so "
           "every micro-batch but the last would hold whole local gradients, the memory stage " +
           std::to_string(zero_stage(o.strategy)) + " exists to save. Use " + n("strategy", "zero1") +
           " with accumulation";
  // The parameter server (dist/parameter_server.h): SGD on f32 partitions, on the servers only.
  if (is_ps) {
    if (o.precision != Precision::F32)
      return n("strategy", ps) + " updates f32 parameters on its servers: use " + n("precision", "off") +
             " with it, or " + n("strategy", ddp) + " with " + n("precision");
    if (o.checkpoint)
      return n("strategy", ps) + " does not checkpoint (the optimizer state lives on the servers): drop " +
             n("checkpoint") + ", or use " + n("strategy", ddp);
    if (o.optimizer != "sgd")
      return n("strategy", ps) + " runs SGD on its servers: use " + n("optimizer", "sgd") + " with it, or " +
             n("strategy", ddp) + " for " + o.optimizer;
    // "Turn it off" rather than "drop": a trainer may clip by default (BERT's recipe clips at 1.0).
    if (o.clip_grad_norm > 0)
      return n("strategy", ps) + " does not clip gradients yet: turn clipping off with " + n("clip_grad_norm", "0") +
             ", or use " + n("strategy", ddp);
    if (o.compress != "none")
      return n("strategy", ps) + " pushes f32 gradients to its servers, and " + n("compress", o.compress) +
             " applies to DDP's all-reduce only: drop " + n("compress") + " or use " + n("strategy", ddp);
  }
  return std::nullopt;
}

std::optional<std::string> refusal_on(const StepOptions& o, Device device, const std::string& comm_backend) {
  if (!o.cuda_graph) return std::nullopt;
  auto n = [&](const std::string& option) { return option_name(o.names, option); };
  if (!device.is_cuda())
    return n("cuda_graph") + " needs a GPU, and this run is on the CPU (" +
           (built_with_cuda() ? "no usable GPU is visible" : "this build has no CUDA backend") + "): drop " +
           n("cuda_graph");
  if (comm_backend != "nccl")
    return n("cuda_graph") + ": the gradient all-reduces go over " + comm_backend +
           " (host memory, driven by a CPU thread), which a CUDA graph cannot capture. Give every rank its own "
           "GPU and leave TANDEM_HOST_STAGING unset so that NCCL carries them, or drop " + n("cuda_graph");
  for (const char* var : {"TANDEM_FAULT", "TANDEM_SYNC_CHECK"}) {
    const char* v = std::getenv(var);
    if (v && *v && std::string(v) != "0")
      return n("cuda_graph") + " with " + var + "=" + v +
             ": its hooks act on the host in the middle of the step (a fault drill, a sync after every op), "
             "which a replayed graph cannot do. Unset " + var + " or drop " + n("cuda_graph");
  }
  return std::nullopt;
}

std::optional<std::string> tp_refusal(const StepOptions& o, int world, int64_t heads, int64_t hidden,
                                      int64_t intermediate) {
  if (o.tp <= 1) return std::nullopt;
  const std::string tp = option_name(o.names, "tp", std::to_string(o.tp)), t = std::to_string(o.tp);
  if (world % o.tp != 0)
    return tp + " needs a world size divisible by " + t + " (a grid of " + t + " TP ranks by world / " + t +
           " data-parallel ranks), and this run has " + std::to_string(world) + " ranks: launch a multiple of " +
           t + " ranks or pick a " + option_name(o.names, "tp") + " that divides " + std::to_string(world);
  const std::pair<const char*, int64_t> sizes[] = {
      {"attention heads", heads}, {"hidden size", hidden}, {"FFN width", intermediate}};
  for (const auto& [what, size] : sizes)
    if (size > 0 && size % o.tp != 0)
      return tp + " splits the model's " + what + " (" + std::to_string(size) + ") into " + t +
             " equal parts, and it does not divide: pick a " + option_name(o.names, "tp") + " that divides " +
             std::to_string(size);
  return std::nullopt;
}

void check(const StepOptions& o) {
  if (auto why = refusal(o)) TANDEM_THROW(*why);
}

void check_on(const StepOptions& o, Device device, const std::string& comm_backend) {
  if (auto why = refusal_on(o, device, comm_backend)) TANDEM_THROW(*why);
}

dist::DdpOptions ddp_options(const StepOptions& o) {
  dist::DdpOptions d;
  d.reducer.bucketing.first_bucket_bytes = static_cast<size_t>(o.first_bucket_mb * (1 << 20));
  d.reducer.bucketing.bucket_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
  d.reducer.bucketed = o.bucketed;
  d.reducer.overlap = o.overlap;
  d.reducer.compression = o.compress == "bf16"   ? dist::Compression::BF16
                          : o.compress == "fp16" ? dist::Compression::F16
                                                 : dist::Compression::None;
  // ZeRO-3 regroups these buckets by unit (dist/zero3.h); reduce-scatter from the start, so that no
  // all-reduce bucket is ever allocated.
  if (zero_stage(o.strategy) >= 2) d.reducer.collective = dist::Collective::ReduceScatter;
  d.sync_batchnorm = o.sync_batchnorm;
  return d;
}

}  // namespace tandem::trainer
