// apps/encoder/report.cpp: progress, validation and done lines, and the --metrics JSON (see report.h).
#include "apps/encoder/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/encoder/setup.h"  // defines: Training
#include "apps/trainer/run/report_json.h"  // defines: mib, step_record_times, comm_and_memory_metrics, write_json_file
#include "apps/trainer/run/run_flags.h"  // defines: lr_rule, start_run_records
#include "core/storage.h"        // defines: memory_stats
#include "core/threads.h"        // defines: configured_cpu_threads, describe
#include "dist/transport/bootstrap.h"      // defines: comm_for (its backend name)
#include "checkpoint/checkpoint.h"   // defines: kTandemVersion

namespace tandem::apps::encoder {

using json = nlohmann::json;

namespace {

using trainer::mib;

json eval_json(const EvalResult& e) {
  // A pass that met non-finite logits has no accuracy: null, with the count beside it.
  return json{{"step", e.step},
              {"masked_token_accuracy", e.failed() ? json(nullptr) : json(e.accuracy)},
              {"loss", e.failed() ? json(nullptr) : json(e.loss)},
              {"masked", e.masked},
              {"sequences", e.sequences},
              {"nonfinite_logits", e.nonfinite}};
}

}  // namespace

std::string progress_line(int64_t step, int64_t total, double lr, const Interval& iv, int world, Device dev) {
  MemoryStats m = memory_stats(dev);
  char mfu[32] = "n/a";
  if (iv.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * iv.mfu);
  char b[640];
  std::snprintf(b, sizeof b,
                "step %lld/%lld | loss %.4f | lr %.3g | %.1f seq/s (%.1f/rank) %.0f tok/s (%.0f/rank) | MFU %s | "
                "%.1f ms/step: data %.1f compute %.1f exposed-comm %.1f (overlap %.0f%%) | mem %s peak %s",
                (long long)step, (long long)total, iv.loss, lr, iv.sequences_per_s, iv.sequences_per_s / world,
                iv.tokens_per_s, iv.tokens_per_s / world, mfu, iv.step_ms(),
                iv.data_ms / std::max<int64_t>(iv.steps, 1), iv.compute_ms(), iv.exposed_ms, 100 * iv.overlap,
                mib(m.current_bytes).c_str(), mib(m.peak_bytes).c_str());
  std::string line = b;
  if (iv.loss_scale > 0) {
    std::snprintf(b, sizeof b, " | loss scale %g", iv.loss_scale);
    line += b;
  }
  if (iv.skipped_steps > 0) line += " | skipped " + std::to_string(iv.skipped_steps) + " step(s) (non-finite gradients)";
  return line;
}

std::string validation_line(const EvalResult& r, const Training& t) {
  const data::UnigramBaseline& u = t.corpus.baseline;
  char b[400];
  if (r.failed()) {
    std::snprintf(b, sizeof b, "validation step %lld: FAILED: %lld non-finite logits (NaN/inf) at %lld masked tokens, "
                  "so no accuracy", (long long)r.step, (long long)r.nonfinite, (long long)r.masked);
    return b;
  }
  std::snprintf(b, sizeof b,
                "validation step %lld: masked-token accuracy %.2f%% (unigram baseline %.2f%%) | loss %.4f "
                "(baseline %.4f) | %lld masked tokens in %lld held-out sequences",
                (long long)r.step, 100 * r.accuracy, 100 * u.accuracy, r.loss, u.loss, (long long)r.masked,
                (long long)r.sequences);
  return b;
}

void print_start(const EncoderOptions& o, const Training& t) {
  if (t.world->rank != 0) return;
  const Corpus& c = t.corpus;
  if (o.synthetic)
    std::printf("corpus: synthetic, %lld training tokens, vocab %lld\n", (long long)c.train->stream().size(),
                (long long)c.vocab_size);
  else
    std::printf("corpus: %lld files, %.2f MB, %lld training / %lld held-out documents, %zu / %zu tokens, vocab %lld "
                "(%s), tokenized in %.2f s\n",
                (long long)c.files, c.bytes / 1e6, (long long)c.train_documents, (long long)c.held_out_documents,
                c.train->stream().size(), c.held_out ? c.held_out->stream().size() : size_t{0},
                (long long)c.vocab_size, o.vocab.c_str(), c.tokenize_s);
  if (!o.synthetic && c.held_out_documents == 0)
    std::printf("warning: nothing is held out, so this run has no validation: %lld document(s), and every "
                "--held-out-every %d-th is held out. %s\n", (long long)c.train_documents, o.held_out_every,
                o.line_by_line ? "Pass more text or a smaller --held-out-every."
                               : "With one document per line pass --line-by-line (else documents are paragraphs "
                                 "split at blank lines), or lower --held-out-every.");
  if (c.held_out)
    std::printf("unigram baseline (always the most frequent token, %s): masked-token accuracy %.2f%%, loss %.4f "
                "on %lld held-out masked tokens\n",
                c.baseline_text.c_str(), 100 * c.baseline.accuracy, c.baseline.loss, (long long)c.baseline.masked);
  std::printf("%s on %d rank(s) (%s, %s), %lld params, seq %lld, batch %lld/rank (%lld sequences, %lld tokens "
              "global), %lld steps (%lld sequences/epoch), %s lr %.3g warmup %lld, %.4g GFLOP/token, MFU's peak %.4g "
              "TFLOP/s/rank (%s)\n",
              o.model.c_str(), t.world->size, t.dev.str().c_str(), dist::comm_for(t.dev).backend(),
              (long long)t.parameters, (long long)o.seq_len, (long long)o.batch,
              (long long)t.global_batch, (long long)(t.global_batch * o.seq_len), (long long)t.total_steps,
              (long long)c.train->size(), t.step->optimizer_name(), t.sched.base_lr, (long long)o.warmup_steps, t.flops_per_token / 1e9,
              t.peak.flops / 1e12, t.peak.source.empty() ? "unknown" : t.peak.source.c_str());
  if (t.dev.is_cpu()) std::printf("CPU: %s\n", describe(configured_cpu_threads()).c_str());  // core/threads.h
  // The LR rule in words, as train_imagenet prints it (options.h).
  std::printf("%s", trainer::lr_rule(o.lr_scaling, o.lr, t.dp_size, t.sched.base_lr).c_str());  // DP ranks
  std::printf("; %s decay after %lld warmup steps", o.lr_schedule.c_str(), (long long)o.warmup_steps);
  if (o.step.grad_accum_steps > 1)
    std::printf("; %d micro-batches of %lld per step (global batch %lld)", o.step.grad_accum_steps, (long long)o.batch,
                (long long)t.global_batch);
  const std::string strategy =
      o.strategy == "ps" ? "parameter server (" + std::to_string(o.step.ps_servers) + " server(s))"
                         : "ZeRO stage " + std::to_string(o.zero);
  std::printf("\nprecision %s, %s, TP %d x DP %d; %s\n", o.amp == "off" ? "f32" : o.amp.c_str(), strategy.c_str(),
              o.tp, t.dp_size, t.memory.ledger().str().c_str());
  std::fflush(stdout);
}

void start_records(const EncoderOptions& o, Training& t) {
  t.log = trainer::start_run_records(o, t.folder, t.world->rank == 0);
  if (!t.log.enabled()) return;
  t.log.write(trainer::start_record(o, t, "train_encoder", "tokens", {{"seq_len", o.seq_len}}));
}

void log_step(Training& t, const trainer::Position& pos, const Interval& iv, const trainer::Eta& eta) {
  if (!t.log.enabled()) return;
  const MemoryStats m = memory_stats(t.dev);
  const auto opt = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  json r{{"event", "step"}, {"step", pos.step}, {"epoch", trainer::epoch_number(pos)}, {"samples", pos.samples},
         {"loss", iv.loss}, {"lr", t.step->lr()}, {"items_per_s", iv.sequences_per_s}, {"tokens_per_s", iv.tokens_per_s},
         {"mfu", opt(iv.mfu)}, {"loss_scale", opt(iv.loss_scale)},
         {"grad_norm", iv.grad_norm > 0 ? json(iv.grad_norm) : json(nullptr)}, {"skipped_steps", iv.skipped_steps},
         {"elapsed_s", eta.elapsed_s}, {"eta_s", eta.eta_s >= 0 ? json(eta.eta_s) : json(nullptr)}};
  const double data_ms = iv.data_ms / std::max<int64_t>(iv.steps, 1);
  r.update(trainer::step_record_times({iv.step_ms(), data_ms, iv.compute_ms(), iv.exposed_ms, nullptr}, iv.overlap, m));
  t.log.write(r);
}

void log_validation(Training& t, const EvalResult& e, int64_t samples, int64_t epoch) {
  if (!t.log.enabled()) return;
  const auto val = [&](double x) { return e.failed() ? json(nullptr) : json(x); };
  t.log.write({{"event", "val"}, {"step", e.step}, {"epoch", epoch}, {"samples", samples},
               {"masked_acc", val(e.accuracy)}, {"loss", val(e.loss)}, {"masked", e.masked},
               {"baseline_acc", t.corpus.baseline.accuracy}, {"nonfinite_logits", e.nonfinite}});
}

void report(const EncoderOptions& o, Training& t, const trainer::RunClock& clock, const RunRecord& rec, int64_t step) {
  const int world = t.world->size;
  const int64_t run_steps = step - t.start_at.step;
  const double train_s = clock.train_s();
  // RunClock counts "images"; here one sample is one sequence.
  const double seq_s = clock.steady_images_per_s(step, run_steps, t.global_batch);
  const double tok_s = seq_s * o.seq_len;
  const double mfu = encoder::mfu(tok_s / world, t.flops_per_token, t.peak.flops);
  if (!o.trace.empty()) dist::write_trace(o.trace, dist::comm_for(Device::cpu()));
  const dist::TimelineSummary comm = t.step->timeline().summary();
  const MemoryStats mem = memory_stats(t.dev);
  t.memory.measure_peak();
  if (t.world->rank != 0) return;
  std::printf("done: %lld steps, init %.2f s, train %.2f s, steady %.1f seq/s (%.1f/rank), %.0f tok/s (%.0f/rank), "
              "MFU %.1f%%, wall %.2f s, %s\n",
              (long long)run_steps, clock.init_or_zero_s(), train_s, seq_s, seq_s / world, tok_s, tok_s / world,
              100 * mfu, clock.wall_s(), comm.str().c_str());
  if (rec.last.skipped_steps > 0)
    std::printf("skipped steps: %lld (non-finite gradients under --amp %s)\n", (long long)rec.last.skipped_steps,
                o.amp.c_str());
  std::printf("%s\n", t.memory.ledger().str().c_str());
  t.log.write({{"event", "end"},
               {"summary", {{"steps", step}, {"steps_this_run", run_steps}, {"init_s", clock.init_or_zero_s()},
                            {"train_s", train_s}, {"wall_s", clock.wall_s()}, {"tokens_per_s", tok_s}, {"mfu", mfu},
                            {"skipped_steps", rec.last.skipped_steps}}}});
  if (o.metrics.empty()) return;
  const Interval& last = rec.last;
  const data::UnigramBaseline& u = t.corpus.baseline;
  json evals = json::array();
  for (const EvalResult& e : rec.evals) evals.push_back(eval_json(e));
  json j{
      {"app", "train_encoder"},
      {"parameters", t.parameters},
      {"tp", o.tp},
      {"vocab_size", t.corpus.vocab_size},
      {"data", o.synthetic ? json("synthetic") : json(o.data)},
      {"vocab", o.vocab},
      {"seq_len", o.seq_len},
      {"optimizer", o.optimizer},
      {"lr", t.sched.base_lr},
      {"grad_accum_steps", o.step.grad_accum_steps},
      {"warmup_steps", o.warmup_steps},
      {"weight_decay", o.wd},
      {"clip", o.step.clip_grad_norm},
      {"zero", o.zero},
      {"strategy", o.strategy},
      {"ps_servers", o.strategy == "ps" ? o.step.ps_servers : 0},
      {"skipped_steps", last.skipped_steps},
      {"dropout", o.dropout},
      {"train_sequences", t.corpus.train->size()},
      {"sequences_per_s", seq_s},
      {"sequences_per_s_per_rank", seq_s / world},
      {"tokens_per_s", tok_s},
      {"tokens_per_s_per_rank", tok_s / world},
      {"flops_per_token", t.flops_per_token},
      {"peak_flops_per_rank", t.peak.flops},
      {"peak_source", t.peak.source},
      {"mfu", mfu},
      {"last_interval_ms_per_step",
       {{"total", last.step_ms()}, {"data", last.data_ms / std::max<int64_t>(last.steps, 1)},
        {"compute", last.compute_ms()}, {"exposed_comm", last.exposed_ms}, {"overlap", last.overlap}}},
      {"baseline", {{"token", u.token}, {"token_text", t.corpus.baseline_text}, {"masked_token_accuracy", u.accuracy}, {"loss", u.loss}, {"masked", u.masked}}},
      {"final", {{"train_loss", last.loss}, {"grad_norm", last.grad_norm}}},  // grad_norm: before clipping, -1 without
      {"validations", evals}};
  j.update(trainer::shared_metrics(o, t, clock, rec, {step, run_steps, clock.init_or_zero_s(), train_s, clock.wall_s()},
                                   dist::comm_for(t.dev).backend(), kTandemVersion));
  j.update(trainer::gpu_paths_metrics());
  j.update(trainer::comm_and_memory_metrics(comm, mem));
  if (!rec.evals.empty()) j["final"]["val"] = eval_json(rec.evals.back());
  trainer::write_json_file(o.metrics, j);
}

}  // namespace tandem::apps::encoder
