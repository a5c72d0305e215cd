// layers/layers.h: the building blocks of the models, with torch.nn's names, parameters and reprs.
//
// Every layer takes NHWC image activations [N, H, W, C] (or [N, F] / [..., F] for Linear, LayerNorm
// and friends) and registers its parameters and buffers under exactly PyTorch's names, so a
// state dict lines up with torchvision's one name at a time.
//
// Initialisation: a layer with parameters draws its PyTorch default init in its constructor from
// `gen` (default: the process-wide generator). Pass gen = nullptr to leave Linear/Conv2d/Embedding
// weights UNINITIALISED (contents unspecified) for a caller that applies its own scheme right after
// - models do this and then run one pass of layers/init.h in module order, so building VGG-16 costs
// one draw per value and never touches 550 MB twice. Norm layers always start at weight 1, bias 0.
// reset_parameters(gen) re-draws the defaults at any time.
//
// Layout notes that matter to checkpoints:
//   - Conv2d stores its weight OHWI [out, kh, kw, in/groups] (what cuDNN wants next to NHWC, see
//     core/ops/conv/conv.h). PyTorch's parameter name "weight" is kept; checkpoints convert OHWI <-> OIHW
//     on save/load, nothing else ever sees OIHW.
//   - Flatten of a 4-D NHWC tensor emits PyTorch's NCHW flatten order (C, H, W), so the Linear
//     after it (VGG's classifier.0, AlexNet's classifier.1) has bit-for-bit torchvision's weight
//     layout [out, C*H*W] and needs no conversion. It costs one small transpose copy.
// Leaves out: in-place ReLU/Dropout (PyTorch's inplace=True is a memory trick, not semantics),
// non-square kernels, padding modes other than zeros.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/conv/conv.h"
#include "core/ops/conv_bn/conv_bn.h"
#include "core/ops/pool/pool.h"
#include "core/random.h"
#include "layers/module.h"

namespace tandem {

// ---- containers ----

// Runs its children in order; children are named "0", "1", ... like torch.nn.Sequential. The
// children are Module's list itself (any module may replace an entry).
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> mods);
  // Appends a module under the next index name; returns it for chaining.
  ModulePtr add(ModulePtr m);
  size_t size() const { return num_children(); }
  const ModulePtr& operator[](size_t i) const { return child_at(i); }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
};

// A module without parameters or state whose forward is one function of its input (Flatten,
// ReLU, GELU): the subclass names the function, its type name and what PyTorch's repr shows.
class StatelessModule : public Module {
 public:
  using Fn = Tensor (*)(const Tensor&);
  Tensor forward(const Tensor& x) override { return fn_(x); }
  std::string type_name() const override { return name_; }
  std::string extra_repr() const override { return repr_; }

 protected:
  StatelessModule(Fn fn, std::string name, std::string repr = "")
      : fn_(fn), name_(std::move(name)), repr_(std::move(repr)) {}

 private:
  Fn fn_;
  std::string name_, repr_;
};

// [N, d1, d2, ...] -> [N, d1*d2*...] (torch.nn.Flatten(start_dim=1)). A 4-D input is taken as NHWC
// and flattened in (C, H, W) order to match PyTorch's NCHW flatten (see the header comment).
class Flatten : public StatelessModule {
 public:
  Flatten();
};

// ---- linear maps ----

// y = x W^T + b, W [out, in]. Default init (PyTorch's reset_parameters): W ~ kaiming_uniform(a=sqrt(5)),
// i.e. U(-1/sqrt(in), 1/sqrt(in)), and b ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = &default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when bias = false
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

// Defaults are torch.nn.Conv2d's.
struct Conv2dOptions {
  int stride = 1;
  int padding = 0;
  int dilation = 1;
  int groups = 1;
  bool bias = true;
};

// Square-kernel 2-D convolution on NHWC input. Weight OHWI [out, k, k, in/groups] (see above).
// Default init as PyTorch: kaiming_uniform(a=sqrt(5)) with fan_in = in/groups * k * k, and bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, Conv2dOptions opt = {},
         Generator* gen = &default_generator());
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op, ops::conv2d_bias_relu (one cuDNN graph forward on the GPU, the
  // ReLU mask and the bias gradient in one backward pass). Same values and gradients as the
  // composition. Runs this module's forward hooks and profiling range, as operator() does.
  Tensor forward_relu(const Tensor& x);
  // forward(x) with its per-channel batch statistics for the BatchNorm2d that follows
  // (ops::conv2d_genstats; BatchNorm2d::forward_relu_from_stats), hooks and range as operator().
  ops::ConvGenstats forward_genstats(const Tensor& x);
  // The same with the previous BN + ReLU applied in this conv's prologue (ops::
  // conv2d_bn_relu_genstats; `in` from BatchNorm2d::relu_prologue): relu(bn(in.x)) is never
  // written on the GPU. Hooks and range as operator().
  ops::ConvGenstats forward_genstats(const ops::BnReluInput& in);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int kernel_size() const { return k_; }
  const Conv2dOptions& options() const { return opt_; }
  int64_t fan_in() const { return in_ / opt_.groups * k_ * k_; }
  int64_t fan_out() const { return out_ / opt_.groups * k_ * k_; }

 private:
  ops::Conv2dParams params(const Tensor& x) const;  // checks x's shape; opt_ as the op's parameters
  int64_t in_, out_;
  int k_;
  Conv2dOptions opt_;
  Tensor weight_, bias_;
};

// Token lookup: indices [...] -> [..., dim]. Default init N(0, 1) as torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen = &default_generator());
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

// ---- normalisation ----

// Batch norm over the channel (last) dim of NHWC input. Parameters weight (1), bias (0); buffers
// running_mean (0), running_var (1), num_batches_tracked (i64 scalar, shape []) - PyTorch's names.
// momentum is PyTorch's (weight of the new batch). num_batches_tracked is informational (it would
// only matter for momentum=None, which is not offered); on a GPU it is counted on the host and
// written with an async fill so training never syncs for it, except inside a CUDA graph capture,
// where it is incremented on the device so that every replay counts (layers/norm.cpp).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual): the ResNet block tail (bn2/bn3, the shortcut, the final ReLU) as
  // one op, ops::batch_norm_add_relu, which cuDNN fuses on the GPU in training mode (one pass, and
  // neither the normalised tensor nor the sum is written) and tandem's kernels on the CPU (f32/f64).
  // Same values and gradients as the composition. Counts the batch and adds the profiling range like
  // operator().
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  // relu(forward(x)): every conv -> BN -> ReLU (ResNet's stem and inner stages, VGG-BN) as one op,
  // ops::batch_norm_relu (cuDNN's BN_ACTIVATION on the GPU in training mode, tandem's fused kernels
  // on the CPU: no separate ReLU pass either way). Same values and gradients as the composition; counts the batch and adds the
  // profiling range like operator().
  Tensor forward_relu(const Tensor& x);
  // relu(forward(cs.y)) from the statistics the conv produced with cs.y (Conv2d::forward_genstats;
  // conv-BN fusion, BackendConfig::conv_bn_fusion): in training mode ops::bn_finalize (running
  // stats updated as batch_norm does) then ops::batch_norm_apply, with batch_norm's values and
  // gradients. Eval mode and subclasses (SyncBatchNorm: its statistics need a collective) run
  // relu(forward(cs.y)) instead. Counts the batch; hooks and range as operator().
  Tensor forward_relu_from_stats(const ops::ConvGenstats& cs);
  // Whether relu_prologue may stand for forward_relu: training mode, and this class itself
  // (SyncBatchNorm's statistics need a collective that the conv's sums do not include).
  bool takes_conv_stats() const;
  // relu(forward(cs.y)) left for the next conv to apply (Conv2d::forward_genstats(BnReluInput)):
  // bn_finalize of cs's statistics (running stats updated, the batch counted, as forward_relu
  // does) and the terms the conv's prologue needs. Refused unless takes_conv_stats(). Hooks and
  // range as operator(); the BN's gradients flow through the conv's node.
  ops::BnReluInput relu_prologue(const ops::ConvGenstats& cs);
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;  // weight 1, bias 0, running stats reset
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }

 protected:
  // Registers `other`'s tensors (the same TensorImpls, not copies) under the same names: how
  // dist::SyncBatchNorm takes over a BatchNorm2d without breaking optimizers that hold them.
  struct ShareTensorsOf {
    const BatchNorm2d& other;
  };
  explicit BatchNorm2d(ShareTensorsOf from);
  // Training-mode normalisation with batch statistics, updating the running stats in place. The
  // one step SyncBatchNorm (dist/) replaces, with statistics over every rank's batch.
  virtual Tensor normalize_training(const Tensor& x);
  // The same followed by + residual and ReLU (forward_add_relu in training mode). SyncBatchNorm
  // overrides it: its statistics need a collective, so it runs its own BN, then add and ReLU.
  virtual Tensor normalize_training_add_relu(const Tensor& x, const Tensor& residual);
  // The same followed by ReLU (forward_relu in training mode); SyncBatchNorm overrides it likewise.
  virtual Tensor normalize_training_relu(const Tensor& x);
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;

 private:
  int64_t c_;
  double eps_, momentum_;
  int64_t host_batches_ = -1;  // GPU only: host mirror of num_batches_tracked, read once (-1: unread)
  void check_input(const Tensor& x) const;
  void count_batch();  // training mode: num_batches_tracked += 1
  std::string range_label() const;  // the profiling range Module::operator() would open
};

// Layer norm over the last dim (transformers). weight 1, bias 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t d_;
  double eps_;
  Tensor weight_, bias_;
};

// ---- activations and regularisation ----

class ReLU : public StatelessModule {
 public:
  ReLU();
};

// Exact (erf) GELU, PyTorch's default approximate='none'.
class GELU : public StatelessModule {
 public:
  GELU();
};

// Inverted dropout in training mode, identity in eval. Masks come from `gen` (default: the
// process-wide generator); the generator must outlive the module.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = &default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  // For a parent that fuses this dropout into a larger op (ops::bias_dropout_add): the same p and
  // generator, so the fused op draws the masks this module would.
  double p() const { return p_; }
  Generator& generator() const { return *gen_; }

 private:
  double p_;
  Generator* gen_;
};

// ---- pooling (NHWC) ----

// MaxPool2d and AvgPool2d: a square window over core/ops/pool's parameters, checked as PyTorch
// checks them. stride defaults to kernel_size (PyTorch's stride=None).
class Pool2d : public Module {
 protected:
  Pool2d(int kernel_size, int stride, int padding, bool ceil_mode, bool count_include_pad);
  // "kernel_size=K, stride=S, padding=P": how both reprs start.
  std::string window_repr() const;
  ops::Pool2dParams p_;
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(int kernel_size, int stride = 0, int padding = 0, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
};

class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(int kernel_size, int stride = 0, int padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
};

// [N, H, W, C] -> [N, out_h, out_w, C]. (1, 1) takes the global-average fast path.
class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int out_h, int out_w);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

 private:
  int oh_, ow_;
};

// Python's repr of a float as PyTorch's extra_repr prints it ("1e-05", "0.1", "0.5").
std::string py_float(double v);

}  // namespace tandem
