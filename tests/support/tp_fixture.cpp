// tests/support/tp_fixture.cpp: the small TP BERT experiment (see tp_fixture.h).
#include "tests/support/tp_fixture.h"

#include <cmath>
#include <cstring>

#include "core/ops/ops.h"
#include "dist/tp/shard.h"
#include "layers/models/bert.h"

namespace tandem::testing::tp_fixture {

using encoder_fixture::MlmBatch;

BertConfig tp_config() {
  BertConfig c = encoder_fixture::tiny_config();
  c.num_attention_heads = 4;
  return c;
}

namespace {
std::unique_ptr<optim::Optimizer> adamw(const Module& m) {
  optim::OptimizerOptions oo;
  oo.lr = kLr;
  return optim::make_optimizer("adamw", m.named_parameters(), oo);
}

Tensor loss_of(Module& model, const MlmBatch& b) {
  if (auto* tp = dynamic_cast<dist::tp::TpBertForMaskedLM*>(&model)) return tp->mlm_loss(b.ids, b.mask, b.types, b.labels);
  return static_cast<models::BertForMaskedLM&>(model).mlm_loss(b.ids, b.mask, b.types, b.labels);
}

NamedTensors on_cpu(const NamedTensors& in) {
  NamedTensors out;
  for (const auto& [k, t] : in) out.emplace_back(k, t.detach().to(Device::cpu()).clone());
  return out;
}
}  // namespace

double adamw_step(Module& model, optim::Optimizer& opt, const MlmBatch& b) {
  opt.zero_grad();
  Tensor loss = loss_of(model, b);
  loss.backward();
  opt.step();
  return loss.item();
}

Reference train_reference(const BertConfig& cfg, const MlmBatch& b, DType dtype, int steps) {
  auto m = std::make_shared<models::BertForMaskedLM>(cfg, 7);
  m->to(dtype);
  auto opt = adamw(*m);
  Reference r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(adamw_step(*m, *opt, b));
  r.params = on_cpu(state_dict(*m));
  r.state = on_cpu(opt->state());
  return r;
}

Trained train_tp(const BertConfig& cfg, const MlmBatch& b, DType dtype, int steps, dist::Communicator& tp) {
  Trained t;
  t.model = std::make_shared<dist::tp::TpBertForMaskedLM>(cfg, tp, 7);
  t.model->to(dtype);
  t.opt = adamw(*t.model);
  for (int s = 0; s < steps; ++s) t.losses.push_back(adamw_step(*t.model, *t.opt, b));
  return t;
}

Gradient reference_gradient(const BertConfig& cfg, const NamedTensors& params, const MlmBatch& b, DType dtype) {
  models::BertForMaskedLM m(cfg, 7, false);
  m.to(dtype);
  load_state_dict(m, params);
  Tensor loss = m.mlm_loss(b.ids, b.mask, b.types, b.labels);
  loss.backward();
  return {loss.item(), on_cpu(grads_of(m))};
}

bool same_bits(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor x = a[i].second.detach().to(Device::cpu()), y = b[i].second.detach().to(Device::cpu());
    if (a[i].first != b[i].first || x.shape() != y.shape() || x.dtype() != y.dtype() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

bool replicas_identical(dist::tp::TpBertForMaskedLM& model, bool grads) {
  dist::Communicator& c = model.comm();
  const dist::tp::TpLayout layout = dist::tp::bert_tp_layout(model.config());
  bool same = true;
  for (const auto& [name, p] : model.named_parameters()) {
    if (layout.count(name)) continue;  // split: each rank holds different values
    Tensor mine = (grads ? p.grad() : p).detach().to(Device::cpu()).clone().view({p.numel()});
    Tensor all = Tensor::empty({c.size() * p.numel()}, mine.dtype());
    c.all_gather(mine, all, "replicas_identical")->wait();
    for (int r = 1; r < c.size(); ++r)
      same = same && std::memcmp(all.data_ptr(), static_cast<char*>(all.data_ptr()) + r * mine.nbytes(),
                                 mine.nbytes()) == 0;
  }
  return same;
}

NamedTensors grads_of(const Module& model) {
  NamedTensors g;
  for (const auto& [name, p] : model.named_parameters()) g.emplace_back(name, p.grad());
  return g;
}

NamedTensors canonical_params(dist::tp::TpBertForMaskedLM& model) {
  return dist::tp::gather_state_dict(state_dict(model), dist::tp::bert_tp_layout(model.config()), model.comm());
}

NamedTensors canonical_grads(dist::tp::TpBertForMaskedLM& model) {
  return dist::tp::gather_state_dict(grads_of(model), dist::tp::bert_tp_layout(model.config()), model.comm());
}

bool key_bias(const std::string& name) { return name.find("attention.self.key.bias") != std::string::npos; }

double key_bias_max(const NamedTensors& params) {
  double m = 0;
  for (const auto& [name, t] : params)
    if (key_bias(name))
      for (double v : t.to_vector_f64()) m = std::max(m, std::fabs(v));
  return m;
}

GridRun::GridRun(dist::Communicator& world, int tp, int zero_stage, DType dtype) {
  grid = std::make_unique<dist::tp::Grid>(world, tp);
  const BertConfig cfg = tp_config();
  if (tp == 1) model = std::make_shared<models::BertForMaskedLM>(cfg, 7);
  else model = std::make_shared<dist::tp::TpBertForMaskedLM>(cfg, grid->tp(), 7);
  model->to(dtype);
  dist::DdpOptions o;
  o.reducer.bucketing = {4096, 16384};  // several buckets: ZeRO's shard boundaries cut through parameters
  if (zero_stage == 2) o.reducer.collective = dist::Collective::ReduceScatter;
  ddp = std::make_unique<dist::DistributedDataParallel>(model, grid->dp(), o);
  optim::OptimizerOptions oo;
  oo.lr = kLr;
  if (zero_stage == 0) {
    opt = optim::make_optimizer("adamw", model->named_parameters(), oo);
  } else {
    zero = std::make_unique<dist::Zero>(*ddp, zero_stage);
    opt = optim::make_optimizer("adamw", zero->segments(), zero->num_params(), oo);
  }
  const int64_t per = kGridBatch / grid->dp_size();
  mine = encoder_fixture::rows(encoder_fixture::full_batch(kGridBatch), grid->dp_rank() * per, per);
}

Tensor GridRun::loss() {
  return ddp->forward_with([&](Module& m) { return loss_of(m, mine); });
}

double GridRun::backward() {
  if (zero) zero->zero_grad(*opt);
  else opt->zero_grad();
  Tensor l = loss();
  l.backward();
  Tensor v = Tensor::full({1}, l.item(), DType::F64);
  grid->dp().all_reduce(v, dist::ReduceOp::Avg)->wait();
  return v.item();
}

void GridRun::update() {
  opt->step();
  if (zero) zero->gather_parameters();
}

NamedTensors GridRun::canonical() {
  if (auto* t = dynamic_cast<dist::tp::TpBertForMaskedLM*>(model.get())) return canonical_params(*t);
  return on_cpu(state_dict(*model));
}

NamedTensors GridRun::grads() {
  if (auto* t = dynamic_cast<dist::tp::TpBertForMaskedLM*>(model.get())) return canonical_grads(*t);
  return on_cpu(grads_of(*model));
}

}  // namespace tandem::testing::tp_fixture
