// apps/encoder/setup.cpp: builds a Training (see setup.h for why the order is fixed).
#include "apps/encoder/setup.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "apps/encoder/checkpointing.h"  // defines: restore_checkpoint
#include "core/device.h"                 // defines: built_with_cuda
#include "core/profile.h"                // defines: enable_trace
#include "core/random.h"                 // defines: manual_seed, Generator
#include "data/text_corpus.h"            // defines: build_token_streams

namespace tandem::apps::encoder {

bool env_rank0() {
  for (const char* v : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* r = std::getenv(v)) return std::string(r) == "0";
  return true;
}

const dist::World& init_world(const EncoderOptions& o) {
  dist::InitOptions io;
  io.use_gpu = o.device != "cpu";
  const dist::World& w = dist::init(io);
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
  if (o.synthetic) {
    c.vocab_size = o.vocab_size;
    special.pad = 0, special.unk = 1, special.cls = 2, special.sep = 3, special.mask = 4;
    train = random_stream(o.synthetic_tokens, c.vocab_size, o.seed + 1);
    held_out = random_stream(std::max<int64_t>(o.synthetic_tokens / o.held_out_every, 1), c.vocab_size, o.seed + 2);
  } else {
    data::WordPiece tok = data::WordPiece::from_file(o.vocab);
    data::TokenStreams s = data::build_token_streams(o.data, tok, data::TextCorpusOptions{o.held_out_every});
    c.vocab_size = tok.vocab().size();
    special = tok.special();
    c.files = s.files, c.bytes = s.bytes, c.train_documents = s.train_documents;
    c.held_out_documents = s.held_out_documents;
    train = std::move(s.train), held_out = std::move(s.held_out);
  }
  c.train = std::make_shared<data::MlmDataset>(train, special, c.vocab_size, mo);
  if (!held_out.empty()) {
    auto h = std::make_shared<data::MlmDataset>(std::move(held_out), special, c.vocab_size, mo);
    c.baseline = data::unigram_baseline(train, *h, data::SampleKey{o.seed, kValidationEpoch});
    c.held_out = h;
  }
  c.tokenize_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

std::shared_ptr<models::BertForMaskedLM> make_model(const EncoderOptions& o, int64_t vocab, const std::string& resume) {
  TANDEM_CHECK(models::is_bert_name(o.model), "--model ", o.model, " is not an encoder: use bert_tiny, bert_mini, "
               "bert_small, bert_medium, bert_base or bert_large");
  // A checkpoint overwrites every tensor: skip drawing the init.
  return std::make_shared<models::BertForMaskedLM>(models::bert_config(o.model, vocab), o.seed, resume.empty());
}

namespace {

// Shuffled, sharded training batches; the held-out set in order, every sequence once.
void make_loaders(const EncoderOptions& o, Training& t) {
  data::TextLoaderOptions lo;
  lo.batch_size = o.batch;
  lo.seed = o.seed;
  lo.rank = t.world->rank;
  lo.world_size = t.world->size;
  lo.device = t.dev;
  t.train = std::make_unique<data::TextLoader>(t.corpus.train, lo);
  TANDEM_CHECK(t.train->batches_per_epoch() > 0, "the training text packs into ", t.corpus.train->size(),
               " sequences of ", o.seq_len, " tokens, fewer than one global batch (", o.batch, " x ", t.world->size,
               " ranks): lower --batch or --seq-len, or use more text");
  if (t.corpus.held_out) {
    data::TextLoaderOptions vo = lo;
    vo.shuffle = false, vo.pad_shards = false, vo.drop_last = false;
    t.val = std::make_unique<data::TextLoader>(t.corpus.held_out, vo);
  }
}

// BERT's schedule: linear warmup from 0, then linear decay to --min-lr at --steps.
optim::LrScheduleOptions make_schedule(const EncoderOptions& o) {
  optim::LrScheduleOptions s;
  s.base_lr = o.lr;
  s.warmup_steps = o.warmup_steps;
  s.warmup_start_factor = 0.0;
  s.decay = optim::LrDecay::Poly;
  s.power = 1.0;
  s.total_steps = o.steps;
  s.min_lr = o.min_lr;
  return s;
}

}  // namespace

Training set_up(const EncoderOptions& o, const dist::World& w, Corpus corpus,
                std::shared_ptr<models::BertForMaskedLM> model, const std::string& resume) {
  Training t;
  t.world = &w;
  t.dev = w.device;
  t.corpus = std::move(corpus);
  t.global_batch = o.batch * w.size;
  t.resumed_from = resume;
  t.model = std::move(model);
  t.model->to(t.dev);
  manual_seed(o.seed);
  // The checkpoint goes in after --amp's cast and before DDP's broadcast; the Step calls back here.
  auto restore = [&](Module& m) {
    if (resume.empty()) return NamedTensors{};
    Restored r = restore_checkpoint(resume, m, o, w);
    t.start = r.state;
    return std::move(r.optimizer);
  };
  t.step = std::make_unique<trainer::Step>(t.model, dist::comm_for(t.dev), step_options(o), restore);
  t.step->set_steps_done(t.start.step);
  make_loaders(o, t);
  t.sched = make_schedule(o);
  t.end_step = o.run_steps > 0 ? std::min(o.steps, t.start.step + o.run_steps) : o.steps;
  if (auto it = t.start.extra.find("total_steps");
      w.rank == 0 && it != t.start.extra.end() && it->second != std::to_string(o.steps))
    std::printf("warning: the checkpoint's run was %s steps long, this one is %lld: the LR schedule changes\n",
                it->second.c_str(), (long long)o.steps);
  const int64_t run_steps = std::max<int64_t>(t.end_step - t.start.step, 0);
  t.bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : std::min<int64_t>(10, run_steps / 4);
  t.flops_per_token = train_flops_per_token(t.model->config(), t.model->num_parameters(), o.seq_len);
  t.peak = peak_flops(t.dev, o.peak_tflops, w.local_size,
                      matmul_precision(o.amp, t.step->options().backend.allow_tf32));  // the matmuls' dtype
  t.memory.plan(*t.step, t.dev, 0);  // token batches are not subtracted (small; as the ledger always did here)
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  return t;
}

}  // namespace tandem::apps::encoder
