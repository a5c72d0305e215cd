// core/backend.h: the backend settings the ops read, as one value applied by one scope.
//
// What the CUDA ops choose between (the CPU path ignores them, but for fused_grad_accumulation,
// which the autograd engine reads on every backend, and cpu_onednn, the CPU's one choice):
//   deterministic         conv: skip the cuDNN engines marked NONDETERMINISTIC (split reductions with
//                         atomics, mostly backward filter), so two runs with the same inputs give the
//                         same bits; slower. Default off, as PyTorch's cudnn.deterministic.
//   cudnn_batchnorm       training-mode BatchNorm (and the fused BN + add + ReLU ResNet block tail)
//                         through cuDNN's NHWC kernels (on) or tandem's own (off: the parity
//                         reference; core/ops/batchnorm/batchnorm.h says why cuDNN is the default).
//   conv_bias_fusion      conv + bias as one cuDNN graph where an engine takes it, else the plain
//                         conv and a broadcast add (core/ops/conv/conv.h). Default on.
//   fused_grad_accumulation  where two gradients of one tensor meet in backward (a ResNet block's
//                         input feeds its first conv and its shortcut), the backward that comes
//                         second adds into the pending gradient inside its own kernel (conv dgrad
//                         with cuDNN's beta = 1) instead of the engine's separate add pass
//                         (core/autograd.h, pending_gradient). Default on; off: the engine's add.
//                         The same bits on the CPU either way; on the GPU one rounding fewer.
//   conv_bn_fusion        ResNet-style conv-BN fusion through cuDNN's graph API (core/ops/conv_bn/
//                         conv_bn.h): the BN batch statistics generated in the conv's epilogue,
//                         bn_finalize as one graph, and the BN + ReLU applied as the next conv loads
//                         its input, forward and backward. Default off: never run on a GPU, unmeasured
//                         (apps/scripts/gpu_session.sh measures it against the unfused path).
//   allow_tf32            f32 GEMMs and convs may use TF32 tensor cores (10-bit mantissa products,
//                         f32 accumulation). Default on, as PyTorch's cudnn.allow_tf32; these models
//                         train fine with it (core/ops/matmul/matmul.h).
//   cpu_onednn            CPU conv2d (f32, bf16) through oneDNN where the build has it and oneDNN
//                         takes the problem, else the im2col + OpenBLAS reference (cpu_onednn.h). Default
//                         on: faster where measured (apps/results/2026-11-28-cpu-2core/); off forces the
//                         reference, which the parity tests compare against. f64 always runs the reference.
//   cpu_onednn_sgemm      with cpu_onednn: f32 GEMMs on 1 thread through oneDNN's dnnl_sgemm
//                         (core/ops/matmul/cpu.cpp; 1.09x OpenBLAS on bert_small's step). Default OFF: in
//                         train_encoder under load, 5 of 50 runs ended in glibc's "corrupted size vs.
//                         prev_size" with it and 0 of 50 without (apps/results/2026-11-28-cpu-2core/gemm/
//                         README.md); on only for the parity tests and bench_ops until that is understood.
//   conv_workspace_limit  the largest workspace one conv plan may ask for; engines needing more are
//                         skipped. 1 GiB: enough for the fast implicit-GEMM and Winograd engines on
//                         ImageNet shapes, while FFT engines that ask for several GiB would take the
//                         memory the activations need (workspaces come from the same pool).
// A conv plan is built with the settings in force when its shape is first met, and they are part
// of its cache key, so a change builds new plans rather than reusing old ones.
//
// Like torch.backends.cudnn.*, the settings are process-wide: an op has no other way to learn
// them (they are not among its inputs). Unlike them, they are never set one by one: a
// BackendScope applies a whole BackendConfig and puts the previous one back when it ends, as
// torch.backends.cudnn.flags(...) does as a context manager. The training step (apps/trainer/
// step.h) holds one for its lifetime; tests and benchmarks hold one around what they compare.
// Reads are lock-free (each field is an atomic); scopes nest on one thread (the inner one ends first).
#pragma once
#include <cstdint>

namespace tandem {

struct BackendConfig {
  bool deterministic = false;
  bool cudnn_batchnorm = true;
  bool conv_bias_fusion = true;
  bool conv_bn_fusion = false;
  bool allow_tf32 = true;
  bool fused_grad_accumulation = true;
  bool cpu_onednn = true;
  bool cpu_onednn_sgemm = false;
  int64_t conv_workspace_limit = int64_t{1} << 30;  // bytes
  bool operator==(const BackendConfig&) const = default;
};

// The settings in force now (the defaults above until a BackendScope changes them).
BackendConfig backend();

class BackendScope {
 public:
  // Applies `config` (throws for a negative workspace limit, changing nothing).
  explicit BackendScope(const BackendConfig& config);
  // One setting for this scope, the others as they are now:
  //   BackendScope s(&BackendConfig::cudnn_batchnorm, false);
  template <class T>
  BackendScope(T BackendConfig::*field, T value) : BackendScope(with(field, value)) {}
  ~BackendScope();  // puts back the settings in force when this scope began
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

  const BackendConfig& previous() const { return previous_; }

 private:
  template <class T>
  static BackendConfig with(T BackendConfig::*field, T value) {
    BackendConfig c = backend();
    c.*field = value;
    return c;
  }
  BackendConfig previous_;
};

}  // namespace tandem
