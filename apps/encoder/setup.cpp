// apps/encoder/setup.cpp: builds a Training (see setup.h for why the order is fixed).
#include "apps/encoder/setup.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>

#include "apps/encoder/hf_state_dict.h"  // defines: from_hf_state_dict (--weights)
#include "apps/trainer/run/run_folder.h"      // defines: UsageError
#include "apps/trainer/run/start_weights.h"  // defines: load_start_weights
#include "core/host_cache.h"  // defines: keep_freed_heap
#include "core/device.h"                 // defines: built_with_cuda
#include "core/profile.h"                // defines: enable_trace
#include "core/random.h"                 // defines: manual_seed, Generator
#include "core/threads.h"  // defines: configure_cpu_threads
#include "data/text_corpus.h"            // defines: build_token_streams
#include "dist/tp/bert.h"                // defines: TpBertForMaskedLM
#include "dist/tp/shard.h"               // defines: bert_tp_layout

namespace tandem::apps::encoder {

const dist::World& init_world(const EncoderOptions& o) {
  host_cache::keep_freed_heap();  // a step's temporaries reuse mapped memory (core/host_cache.h)
  dist::InitOptions io;
  io.use_gpu = o.device != "cpu";
  const dist::World& w = dist::init(io);
  // CPU kernels: cores / ranks-on-this-node threads each (core/threads.h), so ranks never oversubscribe.
  if (w.device.is_cpu()) configure_cpu_threads(w.local_size);
  TANDEM_CHECK(o.device != "cuda" || w.device.is_cuda(), "--device cuda but no GPU is visible (",
               built_with_cuda() ? "built with CUDA" : "this build has no CUDA backend", "): use --device cpu");
  return w;
}

namespace {

// Uniform ids in [5, vocab): the special tokens sit at 0..4 as in make_vocab's vocabularies.
std::vector<int64_t> random_stream(int64_t tokens, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty({tokens}, DType::I64);
  randint_(t, vocab - 5, g);
  std::vector<int64_t> v = t.to_vector_i64();
  for (int64_t& x : v) x += 5;
  return v;
}

}  // namespace

Corpus make_corpus(const EncoderOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Corpus c;
  data::MlmOptions mo;
  mo.seq_len = o.seq_len;
  mo.mask_prob = o.mask_prob;
  data::SpecialIds special;
  std::vector<int64_t> train, held_out;
  std::optional<data::WordPiece> tok;  // the vocabulary, to name the baseline token
  if (o.synthetic) {
    c.vocab_size = o.vocab_size;
    special.pad = 0, special.unk = 1, special.cls = 2, special.sep = 3, special.mask = 4;
    train = random_stream(o.synthetic_tokens, c.vocab_size, o.seed + 1);
    held_out = random_stream(std::max<int64_t>(o.synthetic_tokens / o.held_out_every, 1), c.vocab_size, o.seed + 2);
  } else {
    tok = data::WordPiece::from_file(o.vocab);
    data::TokenStreams s =
        data::build_token_streams(o.data, *tok, data::TextCorpusOptions{o.held_out_every, o.line_by_line, o.text_field});
    c.vocab_size = tok->vocab().size();
    special = tok->special();
    c.files = s.files, c.bytes = s.bytes, c.train_documents = s.train_documents;
    c.held_out_documents = s.held_out_documents;
    train = std::move(s.train), held_out = std::move(s.held_out);
  }
  c.train = std::make_shared<data::MlmDataset>(train, special, c.vocab_size, mo);
  if (!held_out.empty()) {
    auto h = std::make_shared<data::MlmDataset>(std::move(held_out), special, c.vocab_size, mo);
    c.baseline = data::unigram_baseline(train, *h, data::SampleKey{o.seed, kValidationEpoch});
    c.baseline_text = tok && c.baseline.token >= 0 ? "'" + tok->vocab().token(c.baseline.token) + "'"
                                                   : "id " + std::to_string(c.baseline.token);
    c.held_out = h;
  }
  c.tokenize_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

namespace {

// The config --model names for `vocab` tokens, with --dropout.
BertConfig model_config(const EncoderOptions& o, int64_t vocab) {
  TANDEM_CHECK(models::is_bert_name(o.model), "--model ", o.model, " is not an encoder: use bert_tiny, bert_mini, "
               "bert_small, bert_medium, bert_base or bert_large");
  BertConfig c = models::bert_config(o.model, vocab);
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = o.dropout;
  return c;
}

}  // namespace

std::shared_ptr<models::BertForMaskedLM> make_model(const EncoderOptions& o, int64_t vocab, const std::string& resume) {
  // A checkpoint overwrites every tensor: skip drawing the init.
  return std::make_shared<models::BertForMaskedLM>(model_config(o, vocab), o.seed, resume.empty());
}

namespace {

// Shuffled, sharded training batches; the held-out set in order, every sequence once.
void make_loaders(const EncoderOptions& o, Training& t) {
  data::TextLoaderOptions lo;
  lo.batch_size = o.batch * o.step.grad_accum_steps;  // a whole step: its micro-batches are sliced in the loop
  lo.seed = o.seed;
  lo.rank = t.dp_rank;  // --tp: every rank of a TP group reads the same batch
  lo.world_size = t.dp_size;
  lo.device = t.dev;
  t.train = std::make_unique<data::TextLoader>(t.corpus.train, lo);
  TANDEM_CHECK(t.train->batches_per_epoch() > 0, "the training text packs into ", t.corpus.train->size(),
               " sequences of ", o.seq_len, " tokens, fewer than one global batch (", o.batch * o.step.grad_accum_steps, " x ",
               t.dp_size, " data-parallel ranks): lower --batch-size or --seq-len, or use more text");
  if (t.corpus.held_out) {
    data::TextLoaderOptions vo = lo;
    vo.shuffle = false, vo.pad_shards = false, vo.drop_last = false;
    t.val = std::make_unique<data::TextLoader>(t.corpus.held_out, vo);
  } else if (t.world->rank == 0) {
    // Said once, at start-up: the run would otherwise end without a validation line and no reason.
    std::printf("note: nothing is held out for validation (--held-out-every %d over %lld document(s) leaves no "
                "document), so there will be no validation; lower --held-out-every or add text\n",
                o.held_out_every, static_cast<long long>(t.corpus.train_documents));
  }
}

// BERT's schedule by default: linear warmup from 0, then linear decay to --min-lr at --steps, in
// steps of the fresh start's global batch (position.h); --lr-scheduler picks another decay (the
// names train_imagenet takes; step's milestones are steps here, as the run is counted in steps).
// --lr-scaling linear multiplies --lr by the data-parallel ranks (the world size without --tp), as
// in train_imagenet.
optim::LrScheduleOptions make_schedule(const EncoderOptions& o, int world) {
  optim::LrScheduleOptions s;
  s.base_lr = o.lr_scaling == "linear" ? o.lr * world : o.lr;
  s.warmup_steps = o.warmup_steps;
  s.warmup_start_factor = 0.0;
  s.decay = optim::lr_decay_from_name(o.lr_schedule == "linear" ? "poly" : o.lr_schedule);
  s.power = o.lr_schedule == "linear" ? 1.0 : o.lr_power;
  s.milestones = o.lr_milestones;
  s.gamma = o.lr_gamma;
  s.total_steps = o.steps;
  s.min_lr = o.min_lr;
  return s;
}

// The checkpoint's extra.<key> ("" when absent, or on a fresh start).
std::string extra(const Training& t, const std::string& key) {
  auto it = t.start.extra.find(key);
  return it == t.start.extra.end() ? "" : it->second;
}

// The run's length in samples and where this invocation stops (apps/trainer/run/position.h).
void plan_steps(const EncoderOptions& o, Training& t) {
  const std::string unit = extra(t, "schedule_global_batch");
  t.fresh_global_batch = !unit.empty()              ? std::stoll(unit)
                         : t.start.global_batch > 0 ? t.start.global_batch
                                                    : t.global_batch;
  trainer::RunLength& len = t.length;
  len.global_batch = t.global_batch;
  len.steps_per_epoch = t.train->batches_per_epoch();
  len.unit_batch = t.fresh_global_batch;
  len.total_samples = o.steps * len.unit_batch;
  const trainer::Position& at = t.start_at;
  t.total_steps = at.step + len.steps_left(at, 0);
  t.end_step = o.run_steps > 0 ? std::min(t.total_steps, at.step + o.run_steps) : t.total_steps;
  // --steps keeps its samples, not its count, on another global batch: say what it means now.
  if (t.world->rank == 0 && !extra(t, "total_steps").empty() && t.global_batch != t.fresh_global_batch)
    std::printf("note: --steps %lld counts steps of the first run's global batch of %lld (%lld samples); at this "
                "run's global batch of %lld the run ends at step %lld, after the same samples\n",
                (long long)o.steps, (long long)t.fresh_global_batch, (long long)len.total_samples,
                (long long)t.global_batch, (long long)t.total_steps);
  // Only a changed --steps changes the schedule; another world size or --batch does not.
  if (const std::string was = extra(t, "total_steps");
      t.world->rank == 0 && !was.empty() && was != std::to_string(o.steps))
    std::printf("warning: the checkpoint's run was %s steps long, this one is %lld: the LR schedule changes\n",
                was.c_str(), (long long)o.steps);
}

}  // namespace

namespace {

// The model over this run's ranks, whole; or under --tp > 1, after the refusal of a T that cannot
// split this run (every rank alike: exit 2), the grid and this rank's shards over its TP group (the
// same init, drawn shard by shard: dist/tp/bert.h). Init skipped when a checkpoint overwrites it.
std::shared_ptr<models::MaskedLM> make_placed_model(const EncoderOptions& o, Training& t, const std::string& resume) {
  if (o.tp == 1) return make_model(o, t.corpus.vocab_size, resume);
  const BertConfig c = model_config(o, t.corpus.vocab_size);
  if (auto why = trainer::tp_refusal(t.step_opts, t.world->size, c.num_attention_heads, c.hidden_size,
                                     c.intermediate_size))
    throw trainer::UsageError(*why);
  t.grid = std::make_unique<dist::tp::Grid>(dist::comm_for(t.dev), o.tp);
  t.dp_rank = t.grid->dp_rank(), t.dp_size = t.grid->dp_size(), t.tp_rank = t.grid->tp_rank();
  return std::make_shared<dist::tp::TpBertForMaskedLM>(c, t.grid->tp(), o.seed, dist::tp::TpBertOptions{},
                                                       resume.empty());
}

// Elements of the canonical parameters TP would split (dist/tp/shard.h's layout of this config),
// counted from this rank's tensors whole or split: a shard scaled back to its full size.
int64_t split_params(const Training& t) {
  const dist::tp::TpLayout layout = dist::tp::bert_tp_layout(t.config);
  int64_t n = 0;
  for (const auto& [name, p] : t.model->named_parameters()) {
    const auto it = layout.find(name);
    if (it != layout.end()) n += p.numel() / p.size(it->second.dim) * it->second.full;
  }
  return n;
}

// --memory-budget-mib (apps/trainer/run/memory.h): refuses on every rank alike (exit 2) a run whose
// predicted bytes per rank exceed it, naming the ZeRO stages and TP sizes whose prediction fits.
void check_budget(const EncoderOptions& o, Training& t) {
  const double budget = o.memory_budget_mib * (1 << 20);
  const double bytes = trainer::agreed_max(dist::comm_for(Device::cpu()), trainer::budgeted_bytes(t.memory.ledger()));
  if (bytes <= budget) return;
  const dist::LedgerOptions lo = t.step->ledger_options();
  const int world = t.world->size;
  const int64_t split = split_params(t), replicated = t.parameters - split;
  auto name = [](int tp, int zero) {
    return tp > 1 ? "--tp " + std::to_string(tp) + (zero > 0 ? " --zero " + std::to_string(zero) : "")
                  : "--zero " + std::to_string(zero);
  };
  std::vector<trainer::Layout> others;
  for (int zero = 1; zero <= 3; ++zero)
    if (o.tp > 1 || zero != o.zero)
      others.push_back({name(1, zero), trainer::budgeted_bytes(trainer::predict_layout(lo, zero, world, t.parameters))});
  const int zero = std::min(o.zero, 2);  // TP composes with ZeRO-1/2
  for (int tp = 2; tp <= world; tp *= 2) {
    trainer::StepOptions so = t.step_opts;  // this run's, at another TP size
    so.tp = tp;
    if (tp == o.tp || trainer::tp_refusal(so, world, t.config.num_attention_heads, t.config.hidden_size,
                                          t.config.intermediate_size))
      continue;
    const int64_t per_rank = replicated + (split + tp - 1) / tp;
    others.push_back({name(tp, zero), trainer::budgeted_bytes(trainer::predict_layout(lo, zero, world / tp, per_rank))});
  }
  char budget_name[64];
  std::snprintf(budget_name, sizeof budget_name, "--memory-budget-mib %g", o.memory_budget_mib);
  throw trainer::UsageError(trainer::budget_refusal(bytes, t.memory.ledger(), budget,
                                                    (o.strategy == "ps" ? "--strategy ps" : name(o.tp, o.zero)) +
                                                        " on " + std::to_string(world) + " ranks",
                                                    budget_name, std::move(others)));
}

}  // namespace

Training set_up(const EncoderOptions& o, const dist::World& w, Corpus corpus, trainer::RunFolder folder,
                const RestoreCheckpoint& restore_checkpoint) {
  Training t;
  t.world = &w;
  t.step_opts = step_options(o);
  t.dp_rank = w.rank, t.dp_size = w.size;
  t.dev = w.device;
  t.corpus = std::move(corpus);
  t.folder = std::move(folder);
  const std::string resume = t.folder.resume_path();
  t.resumed_from = resume;
  t.model = make_placed_model(o, t, resume);
  t.model->to(t.dev);
  t.config = t.model->config();
  t.parameters = t.model->canonical_parameters();
  t.global_batch = o.batch * o.step.grad_accum_steps * t.dp_size;  // TP ranks share their group's batch
  manual_seed(o.seed);
  // The checkpoint (or --weights: Hugging Face's names through from_hf_state_dict) goes in after
  // --amp's cast and before DDP's broadcast; the Step calls back here. A checkpoint's EMA entries
  // are the EMA's, not the Step's (apps/trainer/step/ema.h).
  NamedTensors ema_state;
  auto restore = [&](Module& m) {
    if (!o.weights.empty()) trainer::load_start_weights(o.weights, m, o.weights_skip, from_hf_state_dict, w.rank == 0);
    if (resume.empty()) return NamedTensors{};
    Restored r = restore_checkpoint(resume, o, t);  // into t.model, which is m
    ema_state = trainer::ModelEma::take_state(r.optimizer);
    t.start = r.state;
    t.start_at = trainer::resume_position(r.state, t.global_batch);  // restores the default generator (dropout)
    if (w.rank == 0) {
      std::printf("resumed from %s at step %lld", resume.c_str(), (long long)t.start_at.step);
      if (t.start.global_batch > 0 && t.start.global_batch != t.global_batch)
        std::printf(" (%lld sequences in all, a global batch of %lld then, %lld now)", (long long)t.start_at.samples,
                    (long long)t.start.global_batch, (long long)t.global_batch);
      std::printf("\n");
    }
    return std::move(r.optimizer);
  };
  // DDP or ZeRO over the data-parallel ranks (the grid's DP group under --tp, else the world), TP
  // over the grid's TP group; the non-finite verdict and AMP's overflow flag are agreed over the
  // whole world, TP included.
  dist::Communicator& data = t.grid ? t.grid->dp() : dist::comm_for(t.dev);
  const trainer::TpParts tp =
      t.grid ? trainer::TpParts{&t.grid->tp(), dist::tp::bert_tp_layout(t.config)} : trainer::TpParts{};
  t.step = std::make_unique<trainer::Step>(t.model, trainer::StepComms(data, dist::comm_for(Device::cpu())),
                                           t.step_opts, restore, tp);
  t.step->set_steps_done(t.start_at.step);
  // --model-ema: from the run's starting weights, or the checkpoint's average; before the memory
  // ledger's plan(), with the file's copy freed (apps/trainer/step/ema.h).
  if (o.model_ema) {
    t.ema = std::make_unique<trainer::ModelEma>(*t.model, o.model_ema_decay);
    if (!ema_state.empty())  // canonical in the file: --tp keeps this rank's shards
      t.ema->load_state(t.model->local_state_dict(std::move(ema_state)), "checkpoint '" + resume + "'");
    else if (!resume.empty() && w.rank == 0)
      std::printf("note: the checkpoint has no EMA of the weights: --model-ema starts its average from them\n");
  } else if (!ema_state.empty() && w.rank == 0) {
    std::printf("note: the checkpoint holds an EMA of the weights; without --model-ema it is not kept\n");
  }
  ema_state.clear();
  t.step->set_ema(t.ema.get());  // the Step updates it after every applied step
  make_loaders(o, t);
  t.sched = make_schedule(o, t.dp_size);  // --lr-scaling linear: x the data-parallel ranks
  plan_steps(o, t);
  const int64_t run_steps = std::max<int64_t>(t.end_step - t.start_at.step, 0);
  t.bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : std::min<int64_t>(10, run_steps / 4);
  t.flops_per_token = train_flops_per_token(t.config, t.parameters, o.seq_len);
  t.peak = peak_flops(t.dev, o.peak_tflops, w.local_size,
                      matmul_precision(o.amp, t.step->options().backend.allow_tf32));  // the matmuls' dtype
  // Token batches are not subtracted (small; as the ledger always did here).
  t.memory.plan(*t.step, t.dev, 0, trainer::ranks_sharing(t.dev, w.local_rank, w.local_size));
  if (w.local_rank == 0 && !t.memory.warning().empty()) std::fprintf(stderr, "%s\n", t.memory.warning().c_str());
  if (o.memory_budget_mib > 0) check_budget(o, t);  // before the first step allocates the optimizer state
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  return t;
}

}  // namespace tandem::apps::encoder
