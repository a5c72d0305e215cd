// layers/norm.cpp: BatchNorm2d (NHWC, PyTorch's buffers; forward_relu for conv -> BN -> ReLU,
// forward_relu_from_stats for the conv-BN fusion, and forward_add_relu for ResNet's block tail) and
// LayerNorm.
#include <typeinfo>

#include "core/graph_capture.h"
#include "core/ops/batchnorm/batchnorm.h"
#include "core/ops/batchnorm/batchnorm_relu.h"
#include "core/ops/copy/copy.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/graph_scalars/increment.h"
#include "core/ops/norm/norm.h"
#include "core/profile.h"
#include "layers/layers.h"

namespace tandem {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : c_(num_features), eps_(eps), momentum_(momentum) {
  TANDEM_CHECK(c_ > 0, "BatchNorm2d(", c_, "): num_features must be positive");
  TANDEM_CHECK(momentum_ >= 0 && momentum_ <= 1, "BatchNorm2d: momentum must be in [0, 1], got ", momentum_);
  weight_ = register_parameter("weight", Tensor::ones({c_}));
  bias_ = register_parameter("bias", Tensor::zeros({c_}));
  running_mean_ = register_buffer("running_mean", Tensor::zeros({c_}));
  running_var_ = register_buffer("running_var", Tensor::ones({c_}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::I64));
}

void BatchNorm2d::reset_parameters(Generator&) {
  weight_.fill_(1.0);
  bias_.zero_();
  running_mean_.zero_();
  running_var_.fill_(1.0);
  num_batches_tracked_.zero_();
  host_batches_ = -1;
}

BatchNorm2d::BatchNorm2d(ShareTensorsOf from)
    : c_(from.other.c_), eps_(from.other.eps_), momentum_(from.other.momentum_) {
  weight_ = register_parameter("weight", from.other.weight_);
  bias_ = register_parameter("bias", from.other.bias_);
  running_mean_ = register_buffer("running_mean", from.other.running_mean_);
  running_var_ = register_buffer("running_var", from.other.running_var_);
  num_batches_tracked_ = register_buffer("num_batches_tracked", from.other.num_batches_tracked_);
  train(from.other.is_training());
}

void BatchNorm2d::check_input(const Tensor& x) const {
  TANDEM_CHECK(x.dim() >= 2 && x.size(-1) == c_, type_name(), "(", c_, "): expects channels-last input [..., ",
               c_, "], got ", x.str());
}

void BatchNorm2d::count_batch() {
  if (num_batches_tracked_.device().is_cpu()) {
    ++*num_batches_tracked_.data<int64_t>();
  } else if (graph_capture::active(num_batches_tracked_.device().index)) {
    // Inside a captured CUDA graph a host-side count would be frozen into the graph as a constant:
    // count on the device instead, so every replay adds one. The host mirror is stale from now on,
    // so a later eager step reads the device value again (once).
    ops::increment_(num_batches_tracked_);
    host_batches_ = -1;
  } else {
    // One sync the first time (the buffer may have been loaded from a checkpoint), then host-side.
    if (host_batches_ < 0) host_batches_ = static_cast<int64_t>(num_batches_tracked_.item());
    ops::fill_(num_batches_tracked_, static_cast<double>(++host_batches_));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  check_input(x);
  if (!is_training())
    return ops::batch_norm(x, weight_, bias_, running_mean_, running_var_, false, momentum_, eps_);
  count_batch();
  return normalize_training(x);
}

std::string BatchNorm2d::range_label() const { return name().empty() ? type_name() : type_name() + " " + name(); }

Tensor BatchNorm2d::forward_relu(const Tensor& x) {
  // Module::operator()'s range, so the timeline still shows this BN (the ReLU is inside it now).
  const std::string label = range_label();
  profile::Range range(label.c_str(), profile::Level::Layer);
  check_input(x);
  if (!is_training())
    return ops::batch_norm_relu(x, weight_, bias_, running_mean_, running_var_, false, momentum_, eps_);
  count_batch();
  return normalize_training_relu(x);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  const std::string label = range_label();  // as forward_relu
  profile::Range range(label.c_str(), profile::Level::Layer);
  check_input(x);
  if (residual.dtype() != x.dtype()) {  // the fused op needs one dtype: let add promote, as before
    Tensor y = ops::add(forward(x), residual);
    ops::relu_(y);
    return y;
  }
  if (!is_training())
    return ops::batch_norm_add_relu(x, residual, weight_, bias_, running_mean_, running_var_, false, momentum_, eps_);
  count_batch();
  return normalize_training_add_relu(x, residual);
}

Tensor BatchNorm2d::forward_relu_from_stats(const ops::ConvGenstats& cs) {
  const std::string label = range_label();
  profile::Range range(label.c_str(), profile::Level::Layer);
  return call([&] {
    check_input(cs.y);
    if (!is_training())
      return ops::batch_norm_relu(cs.y, weight_, bias_, running_mean_, running_var_, false, momentum_, eps_);
    count_batch();
    if (typeid(*this) != typeid(BatchNorm2d)) return normalize_training_relu(cs.y);  // SyncBatchNorm's collective
    ops::BnFinalized fin = ops::bn_finalize(cs.stats, weight_, bias_, running_mean_, running_var_, momentum_, eps_);
    return ops::batch_norm_apply(cs.y, fin, weight_, bias_, /*relu=*/true);
  });
}

bool BatchNorm2d::takes_conv_stats() const { return is_training() && typeid(*this) == typeid(BatchNorm2d); }

ops::BnReluInput BatchNorm2d::relu_prologue(const ops::ConvGenstats& cs) {
  TANDEM_CHECK(takes_conv_stats(), type_name(), "::relu_prologue: needs a BatchNorm2d (not a subclass) in training "
               "mode; call forward_relu instead");
  const std::string label = range_label();
  profile::Range range(label.c_str(), profile::Level::Layer);
  ops::BnReluInput in;
  (void)call([&] {  // post-hooks get an undefined tensor: the BN's output is never made
    check_input(cs.y);
    count_batch();
    in.fin = ops::bn_finalize(cs.stats, weight_, bias_, running_mean_, running_var_, momentum_, eps_);
    return true;
  });
  in.x = cs.y;
  in.weight = weight_;
  in.bias = bias_;
  return in;
}

Tensor BatchNorm2d::normalize_training(const Tensor& x) {
  return ops::batch_norm(x, weight_, bias_, running_mean_, running_var_, true, momentum_, eps_);
}

Tensor BatchNorm2d::normalize_training_relu(const Tensor& x) {
  return ops::batch_norm_relu(x, weight_, bias_, running_mean_, running_var_, true, momentum_, eps_);
}

Tensor BatchNorm2d::normalize_training_add_relu(const Tensor& x, const Tensor& residual) {
  return ops::batch_norm_add_relu(x, residual, weight_, bias_, running_mean_, running_var_, true, momentum_, eps_);
}

std::string BatchNorm2d::extra_repr() const {
  return std::to_string(c_) + ", eps=" + py_float(eps_) + ", momentum=" + py_float(momentum_) +
         ", affine=True, track_running_stats=True";
}

LayerNorm::LayerNorm(int64_t normalized_shape, double eps) : d_(normalized_shape), eps_(eps) {
  TANDEM_CHECK(d_ > 0, "LayerNorm(", d_, "): normalized_shape must be positive");
  weight_ = register_parameter("weight", Tensor::ones({d_}));
  bias_ = register_parameter("bias", Tensor::zeros({d_}));
}

void LayerNorm::reset_parameters(Generator&) {
  weight_.fill_(1.0);
  bias_.zero_();
}

Tensor LayerNorm::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() >= 1 && x.size(-1) == d_, "LayerNorm(", d_, "): the last dim of ", x.str(),
               " must be ", d_);
  return ops::layer_norm(x, weight_, bias_, eps_);
}

std::string LayerNorm::extra_repr() const {
  return "(" + std::to_string(d_) + ",), eps=" + py_float(eps_) + ", elementwise_affine=True";
}

}  // namespace tandem
