// core/ops/batchnorm/cuda_cudnn.cpp: training-mode batch norm through cuDNN's NHWC batch norm
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, CUDNN_BATCHNORM_SPATIAL_PERSISTENT), alone
// (CUDNN_BATCHNORM_OPS_BN), fused with a ReLU, y = relu(bn(x)) (CUDNN_BATCHNORM_OPS_BN_ACTIVATION:
// every conv -> BN -> ReLU, ops::batch_norm_relu), or fused with a residual add and ReLU,
// y = relu(bn(x) + z) (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION: the ResNet block tail,
// ops::batch_norm_add_relu). The three differ only in the ops enum, the activation descriptor and
// the z/dz descriptors, so one forward and one backward serve them (ops::BatchNormTail picks).
//
// Used when BackendConfig::cudnn_batchnorm is on (core/backend.h, core/ops/batchnorm/batchnorm.h); the
// hand-written kernels in batchnorm.cu stay the fallback and the reference. Checked against
// cudnn_ops.h (cuDNN 9.19) and the cuDNN Developer Guide's pages for these functions ("the guide" below):
//  - exponentialAverageFactor is our momentum: "runningMean = runningMean*(1-factor) +
//    newMean*factor"; the running variance is "the sample variance" (unbiased, M/(M-1)), as ours
//    and PyTorch's are.
//  - alpha/beta point to host floats: "float for HALF and FLOAT tensors, double for DOUBLE".
//  - Scale, bias, running and saved statistics are f32 for f32/f16/bf16 data: their descriptor
//    comes from cudnnDeriveBNTensorDescriptor ("must be 'float' for FP16 and FP32 input tensors").
//  - epsilon must be >= CUDNN_BN_MIN_EPSILON (0.0 in cuDNN 9) and the same in forward and backward.
//  - The saved mean / inverse variance are cuDNN's own ("should not be used directly by the
//    user"): only cuDNN's backward reads them (see backward_kernels for the refused case).
//  - The reserve space lives in a tensor the autograd node keeps ("The content in reserveSpace ...
//    must be preserved"); the workspace is freed stream-ordered after each call ("the workspace
//    does not have to remain unchanged between the forward and backward pass").
//  - The fast semi-persistent NHWC kernel needs "NHWC-fully packed" tensors (tandem's are
//    contiguous) "of the type CUDNN_DATA_HALF", C a multiple of 4 for BN_ADD_ACTIVATION, and a
//    non-NULL workspace (BN_ACTIVATION: the same, but for the add). Other problems may run other
//    cuDNN kernels or be refused.
// Eval mode always uses the hand-written kernels (one elementwise pass; nothing for cuDNN to win).
// cuDNN 9 marks this legacy API CUDNN_DEPRECATED (cudnn_ops.h; a warning only when the build
// defines CUDNN_WARN_DEPRECATED). It is still shipped and is the API with the persistent NHWC
// kernels; the graph API's norm nodes need the runtime-fusion engines. The pragmas below keep the
// deprecation out of the build log in this file only.
// A problem cuDNN rejects (CUDNN_STATUS_NOT_SUPPORTED, e.g. a dtype its version lacks, or more
// than INT_MAX rows) makes the forward return false before anything is written; the caller then
// runs the hand-written kernels. Each kind of refusal prints one stderr line the first time
// (with cuDNN's status string) and every one is counted (batchnorm_cudnn_stats), so a run and the
// GPU tests can tell which implementation actually ran; a failure of the call itself other than
// NOT_SUPPORTED throws with cuDNN's error string.
#include <cudnn.h>

#include <atomic>
#include <climits>
#include <cstdio>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/common/cuda/dnn_handle.h"
#include "core/ops/batchnorm/kernels.h"
#include "core/ops/elementwise/kernels.h"
#include "core/storage.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace tandem::kernels {
namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

// What ran, for tests and bench_ops (ops::BatchNormCudnnStats).
std::atomic<int64_t> g_forward{0}, g_forward_fused{0}, g_backward{0}, g_backward_fused{0}, g_fallbacks{0},
    g_forward_relu{0}, g_backward_relu{0};

// Per tail (indexed by ops::BatchNormTail): cuDNN's ops enum, the names in messages and the counters.
struct TailInfo {
  cudnnBatchNormOps_t ops;
  const char* forward_name;
  const char* backward_name;
  std::atomic<int64_t>* forward_calls;
  std::atomic<int64_t>* backward_calls;
};
const TailInfo& tail_info(ops::BatchNormTail tail) {
  static const TailInfo info[3] = {
      {CUDNN_BATCHNORM_OPS_BN, "forward", "backward", &g_forward, &g_backward},
      {CUDNN_BATCHNORM_OPS_BN_ACTIVATION, "forward (BN_ACTIVATION)", "backward (BN_ACTIVATION)", &g_forward_relu,
       &g_backward_relu},
      {CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, "forward (BN_ADD_ACTIVATION)", "backward (BN_ADD_ACTIVATION)",
       &g_forward_fused, &g_backward_fused},
  };
  return info[static_cast<int>(tail)];
}

// One line on stderr the first time each kind of refusal happens (a model repeats its shapes every
// step, so more would flood the log); every refusal is counted. kind: 2 * tail + (0 forward, 1 backward).
void note_fallback(int kind, const char* what, const Tensor& x, const char* why) {
  static std::atomic<bool> said[6] = {};
  g_fallbacks.fetch_add(1);
  if (said[kind].exchange(true)) return;
  std::fprintf(stderr, "tandem: cuDNN batch norm %s refused %s (%s): tandem's kernels run instead (noted once)\n",
               what, x.str().c_str(), why);
}

// Owns a legacy tensor descriptor.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

bool dnn_type(DType t, cudnnDataType_t& out) {
  switch (t) {
    case DType::F32: out = CUDNN_DATA_FLOAT; return true;
    case DType::F16: out = CUDNN_DATA_HALF; return true;
    case DType::BF16: out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
  }
}

// x is [N, H, W, C] or [N, C]: described in NHWC with the real dims (C innermost either way).
// Returns false when the dims do not fit cuDNN's int arguments or the dtype is not one it takes.
bool describe(const Tensor& x, TensorDesc& xd, TensorDesc& pd) {
  cudnnDataType_t t;
  if (!dnn_type(x.dtype(), t)) return false;
  const int64_t n = x.size(0), c = x.size(-1);
  const int64_t h = x.dim() == 4 ? x.size(1) : 1, w = x.dim() == 4 ? x.size(2) : 1;
  if (x.dim() != 2 && x.dim() != 4) return false;
  if (n > INT_MAX || c > INT_MAX || h > INT_MAX || w > INT_MAX || x.numel() > INT_MAX) return false;
  if (cudnnSetTensor4dDescriptor(xd.d, CUDNN_TENSOR_NHWC, t, static_cast<int>(n), static_cast<int>(c),
                                 static_cast<int>(h), static_cast<int>(w)) != CUDNN_STATUS_SUCCESS)
    return false;
  // The per-channel descriptor (1 x C x 1 x 1, f32 for f32/f16/bf16 data): our parameter layout.
  return cudnnDeriveBNTensorDescriptor(pd.d, xd.d, kMode) == CUDNN_STATUS_SUCCESS;
}

// Owns a ReLU activation descriptor (the fused ops), or holds none.
struct Activation {
  cudnnActivationDescriptor_t d = nullptr;
  explicit Activation(bool relu) {
    if (!relu) return;
    CUDNN_CHECK(cudnnCreateActivationDescriptor(&d));
    CUDNN_CHECK(cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  }
  ~Activation() {
    if (d) cudnnDestroyActivationDescriptor(d);
  }
  Activation(const Activation&) = delete;
  Activation& operator=(const Activation&) = delete;
};

// A parameter pointer, or a temporary filled with `value` when the tensor is undefined (cuDNN
// always needs a scale, and returns both parameter gradients).
void* param_or(const Tensor& t, Tensor& tmp, int64_t C, double value, const Device& dev) {
  if (t.defined()) return t.data_ptr();
  tmp = Tensor::full({C}, value, DType::F32, dev);
  return tmp.data_ptr();
}

// The backward without cuDNN, after a cuDNN forward whose backward cuDNN then refuses: the ReLU's
// gradient, dy where y > 0 or y is NaN (fused ops; fn::ReluBackward, PyTorch's rule; into dz for
// AddRelu, whose add passes it on unchanged to both inputs), then the kernels' backward with the
// batch statistics recomputed from x. cuDNN's saved statistics are not reused:
// "The intermediate results stored in resultSaveMean and resultSaveInvVariance buffers should not be
// used directly by the user. Depending on the batch normalization mode, the results stored in
// resultSaveInvVariance may vary." (cuDNN Developer Guide, cudnnBatchNormalizationForwardTraining).
// Costs one extra statistics pass and an x-sized scratch, on a path that should never be taken.
void backward_kernels(ops::BatchNormTail tail, const Tensor& dy, const Tensor& x, const Tensor& y,
                      const Tensor& weight, double eps, Tensor& dx, Tensor& dz, Tensor& dweight, Tensor& dbias) {
  const int64_t C = x.size(-1), M = x.numel() / C;
  Tensor dbn = dy;
  if (tail != ops::BatchNormTail::None) {
    if (tail == ops::BatchNormTail::AddRelu && !dz.defined()) dz = Tensor::empty(x.shape(), x.dtype(), x.device());
    dbn = tail == ops::BatchNormTail::AddRelu ? dz : Tensor::empty(x.shape(), x.dtype(), x.device());
    binary_cuda(binary_op<fn::ReluBackward>(), dy, y, dbn, 1.0f, 1.0f);
  }
  Tensor mean = Tensor::empty({C}, DType::F32, x.device()), invstd = Tensor::empty({C}, DType::F32, x.device());
  Tensor scratch = Tensor::empty({M, C}, x.dtype(), x.device()), no_rm, no_rv;
  Tensor x2 = x.view({M, C});
  batchnorm_forward_cuda(x2, Tensor(), Tensor(), no_rm, no_rv, true, 0.0, eps, scratch, mean, invstd);
  Tensor dx2 = dx.defined() ? dx.view({M, C}) : Tensor();
  batchnorm_backward_cuda(dbn.view({M, C}), x2, weight, mean, invstd, true, dx2, dweight, dbias);
}

}  // namespace

bool batchnorm_forward_train_cudnn(ops::BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                                   const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum,
                                   double eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& reserve) {
  const bool fused = tail != ops::BatchNormTail::None, add = tail == ops::BatchNormTail::AddRelu;
  TANDEM_CHECK(add == z.defined(), "batch_norm forward (cuDNN): a residual z goes with the add tail only");
  const TailInfo& info = tail_info(tail);
  const char* what = info.forward_name;
  const int kind = 2 * static_cast<int>(tail);
  TensorDesc xd, pd;
  if (eps < CUDNN_BN_MIN_EPSILON || !describe(x, xd, pd)) {
    note_fallback(kind, what, x, "a dtype, rank or size it does not describe");
    return false;
  }
  const cudnnBatchNormOps_t ops = info.ops;
  Activation act(fused);
  cudnnTensorDescriptor_t zd = add ? xd.d : nullptr;  // z has x's shape and dtype
  cudnnHandle_t h = cuda::dnn_handle();
  size_t ws_bytes = 0, rs_bytes = 0;
  // The size queries have no side effects: any status but success means "not this problem".
  cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, kMode, ops, xd.d, zd, xd.d, pd.d,
                                                                              act.d, &ws_bytes);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, ops, act.d, xd.d, &rs_bytes);
  if (st != CUDNN_STATUS_SUCCESS) {
    note_fallback(kind, what, x, cudnnGetErrorString(st));
    return false;
  }
  // "If workspace is NULL and workSpaceSizeInBytes of zero is passed in, this API will function
  // exactly like the non-extended function cudnnBatchNormalizationForwardTraining()" (cuDNN
  // Developer Guide, cudnnBatchNormalizationForwardTrainingEx), and that function has no add and no
  // activation. Whether cuDNN would then ignore z and the ReLU or refuse is not documented: the safe
  // reading is to run the composition. (The plain BN is the same op either way.)
  if (fused && ws_bytes == 0) {
    note_fallback(kind, what, x, "no workspace asked for, so no fused NHWC kernel");
    return false;
  }
  const int64_t C = x.size(-1);
  Tensor ones, zeros;
  void* scale = param_or(weight, ones, C, 1.0, x.device());
  void* shift = param_or(bias, zeros, C, 0.0, x.device());
  // The workspace is freed (stream-ordered) right after the enqueue; the reserve space must live
  // until the backward, so it is a tensor the autograd node keeps.
  Storage workspace(ws_bytes, x.device());
  reserve = Tensor::empty({static_cast<int64_t>((rs_bytes + 7) / 8)}, DType::I64, x.device());  // raw bytes
  rs_bytes = static_cast<size_t>(reserve.numel()) * 8;
  const float one = 1.0f, zero = 0.0f;
  st = cudnnBatchNormalizationForwardTrainingEx(
      h, kMode, ops, &one, &zero, xd.d, x.data_ptr(), zd, add ? z.data_ptr() : nullptr, xd.d, y.data_ptr(), pd.d,
      scale, shift, momentum, running_mean.defined() ? running_mean.data_ptr() : nullptr,
      running_var.defined() ? running_var.data_ptr() : nullptr, eps, save_mean.data_ptr(), save_invstd.data_ptr(),
      act.d, workspace.data(), ws_bytes, rs_bytes ? reserve.data_ptr() : nullptr, rs_bytes);
  if (st == CUDNN_STATUS_NOT_SUPPORTED) {  // refused before anything was written
    reserve = Tensor();
    note_fallback(kind, what, x, cudnnGetErrorString(st));
    return false;
  }
  CUDNN_CHECK(st, "batch_norm ", what, " (cuDNN NHWC) on ", x.str(),
              ": BackendConfig::cudnn_batchnorm = false (core/backend.h) uses tandem's kernels");
  info.forward_calls->fetch_add(1);
  return true;
}

void batchnorm_backward_train_cudnn(ops::BatchNormTail tail, const Tensor& dy, const Tensor& x, const Tensor& y,
                                    const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& reserve, double eps, Tensor& dx,
                                    Tensor& dz, Tensor& dweight, Tensor& dbias) {
  // cuDNN reads dy with x's descriptor ("Dimensions or data types mismatch for any pair of xDesc,
  // dyDesc, dxDesc" is BAD_PARAM); a mismatch would be a bug upstream, not something to convert.
  TANDEM_CHECK(dy.dtype() == x.dtype() && dy.shape() == x.shape(), "batch_norm backward: the gradient ", dy.str(),
               " must have the input's shape and dtype ", x.str());
  const bool fused = tail != ops::BatchNormTail::None, add = tail == ops::BatchNormTail::AddRelu;
  TANDEM_CHECK(!fused || (y.defined() && y.shape() == x.shape()),
               "batch_norm backward (cuDNN): a fused ReLU needs the forward's output y");
  const TailInfo& info = tail_info(tail);
  const char* what = info.backward_name;
  const int kind = 2 * static_cast<int>(tail) + 1;
  const char* refused = nullptr;  // why cuDNN did not run, when it did not
  TensorDesc xd, pd;
  const cudnnBatchNormOps_t ops = info.ops;
  Activation act(fused);
  cudnnTensorDescriptor_t yd = nullptr, dzd = nullptr;
  size_t ws_bytes = 0;
  if (!describe(x, xd, pd)) {  // cannot happen after a cuDNN forward on this x; kept for safety
    refused = "a dtype, rank or size it does not describe";
  } else {
    yd = fused ? xd.d : nullptr, dzd = add ? xd.d : nullptr;
    cudnnStatus_t st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(cuda::dnn_handle(), kMode, ops, xd.d, yd,
                                                                         xd.d, dzd, xd.d, pd.d, act.d, &ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) refused = cudnnGetErrorString(st);
    // As in the forward: NULL/0 means "exactly like the non-extended function", which has no ReLU.
    else if (fused && ws_bytes == 0) refused = "no workspace asked for, so no fused NHWC kernel";
  }
  if (!refused) {
    const int64_t C = x.size(-1);
    // cuDNN writes dx, dscale and dbias unconditionally: scratch tensors stand in for unwanted ones.
    // dz is written like dx (a fresh tensor; autograd sums the gradients of z's uses itself).
    Tensor ones, zeros, dx_tmp, dw_tmp, db_tmp;
    void* scale = param_or(weight, ones, C, 1.0, x.device());
    // "bnBiasData ... This parameter is used only when activation should be performed."
    void* shift = fused ? param_or(bias, zeros, C, 0.0, x.device()) : nullptr;
    if (add && !dz.defined()) dz = Tensor::empty(x.shape(), x.dtype(), x.device());
    void* dxp = dx.defined() ? dx.data_ptr() : (dx_tmp = Tensor::empty(x.shape(), x.dtype(), x.device())).data_ptr();
    void* dwp = dweight.defined() ? dweight.data_ptr() : (dw_tmp = Tensor::empty({C}, DType::F32, x.device())).data_ptr();
    void* dbp = dbias.defined() ? dbias.data_ptr() : (db_tmp = Tensor::empty({C}, DType::F32, x.device())).data_ptr();
    Storage workspace(ws_bytes, x.device());
    const float one = 1.0f, zero = 0.0f;  // dx, dscale, dbias = 1 * result + 0 * prior: overwritten
    const size_t rs_bytes = static_cast<size_t>(reserve.numel()) * 8;
    cudnnStatus_t st = cudnnBatchNormalizationBackwardEx(
        cuda::dnn_handle(), kMode, ops, &one, &zero, &one, &zero, xd.d, x.data_ptr(), yd,
        fused ? y.data_ptr() : nullptr, xd.d, dy.data_ptr(), dzd, add ? dz.data_ptr() : nullptr, xd.d, dxp, pd.d,
        scale, shift, dwp, dbp, eps, save_mean.data_ptr(), save_invstd.data_ptr(), act.d, workspace.data(), ws_bytes,
        rs_bytes ? reserve.data_ptr() : nullptr, rs_bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      info.backward_calls->fetch_add(1);
      return;
    }
    if (st != CUDNN_STATUS_NOT_SUPPORTED)
      CUDNN_CHECK(st, "batch_norm ", what, " (cuDNN NHWC) on ", x.str(),
                  ": BackendConfig::cudnn_batchnorm = false (core/backend.h) uses tandem's kernels");
    refused = cudnnGetErrorString(st);
  }
  note_fallback(kind, what, x, refused);
  backward_kernels(tail, dy, x, y, weight, eps, dx, dz, dweight, dbias);
}

ops::BatchNormCudnnStats batchnorm_cudnn_stats() {
  return {g_forward.load(),   g_forward_fused.load(), g_backward.load(),     g_backward_fused.load(),
          g_fallbacks.load(), g_forward_relu.load(),  g_backward_relu.load()};
}

}  // namespace tandem::kernels

#pragma GCC diagnostic pop
