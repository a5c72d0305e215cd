// core/tensor.cpp: the handle - Tensor's storage, views, raw copies and grad bookkeeping. Members that
// run an op or the autograd engine are in core/tensor_ops.cpp, above the ops they call.
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/context.h"
#endif

namespace tandem {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) TANDEM_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  TANDEM_CHECK(dtype != DType::F64 || device.is_cpu(), "f64 tensors live on the CPU only (they exist for gradient checks)");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  TANDEM_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for a tensor of shape ", shape_str(shape()));
  return impl().shape[static_cast<size_t>(d)];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

Tensor Tensor::view(const Shape& shape_in) const {
  Shape shape = shape_in;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TANDEM_CHECK(infer < 0, "view: only one dimension can be -1 in ", shape_str(shape_in));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TANDEM_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in ", shape_str(shape_in), " for ", str());
    shape[static_cast<size_t>(infer)] = numel() / known;
  }
  TANDEM_CHECK(shape_numel(shape) == numel(), "view: shape ", shape_str(shape_in), " does not match ", str());
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->offset = impl().offset;
  impl2->shape = shape;
  impl2->dtype = impl().dtype;
  return Tensor(std::move(impl2));
}

Tensor Tensor::detach() const { return view(shape()); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  TANDEM_CHECK(src.numel() == numel(), "copy_: source ", src.str(), " and destination ", str(), " differ in size");
  TANDEM_CHECK(src.dtype() == dtype(), "copy_: source ", src.str(), " and destination ", str(),
               " differ in dtype; cast first with .to(dtype)");
  if (nbytes() == 0) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memmove(data_ptr(), src.data_ptr(), nbytes());
    return;
  }
#ifdef TANDEM_WITH_CUDA
  // All copies are ordered on the compute stream of the GPU side; a copy that ends on the host
  // must be complete before the caller reads it, so it synchronises.
  int dev = is_cuda() ? device().index : src.device().index;
  cudaStream_t s = cuda::compute_stream(dev);
  CUDA_CHECK(cudaMemcpyAsync(data_ptr(), src.data_ptr(), nbytes(), cudaMemcpyDefault, s));
  if (device().is_cpu()) CUDA_CHECK(cudaStreamSynchronize(s));
#else
  TANDEM_THROW("copy between ", src.device().str(), " and ", device().str(), " in a CPU-only build");
#endif
}

void Tensor::zero_() {
  if (nbytes() == 0) return;
  if (device().is_cpu()) {
    std::memset(data_ptr(), 0, nbytes());
    return;
  }
#ifdef TANDEM_WITH_CUDA
  CUDA_CHECK(cudaMemsetAsync(data_ptr(), 0, nbytes(), cuda::compute_stream(device().index)));
#endif
}

Tensor& Tensor::set_requires_grad(bool r) {
  TANDEM_CHECK(!r || is_floating(dtype()), "only floating-point tensors can require grad, got ", str());
  TANDEM_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor; detach() it first");
  impl().requires_grad = r;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    TANDEM_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), "set_grad: gradient ",
                 g.str(), " does not match parameter ", str());
  }
  impl().grad = g.impl_ptr();
}

GradReadyHookHandle Tensor::register_grad_ready_hook(GradReadyHook hook) {
  TANDEM_CHECK(is_leaf() && requires_grad(), "grad-ready hooks attach to leaves that require grad, not ", str());
  const uint64_t id = impl().next_hook_id++;
  impl().grad_ready_hooks.emplace_back(id, std::move(hook));
  return GradReadyHookHandle(impl_, id);
}

GradReadyHookHandle& GradReadyHookHandle::operator=(GradReadyHookHandle&& o) noexcept {
  if (this != &o) {
    reset();
    leaf_ = std::move(o.leaf_);
    id_ = o.id_;
    o.leaf_.reset();
  }
  return *this;
}

void GradReadyHookHandle::reset() {
  if (auto leaf = leaf_.lock())
    std::erase_if(leaf->grad_ready_hooks, [&](const auto& h) { return h.first == id_; });
  leaf_.reset();
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TANDEM_CHECK(a.device() == b.device(), op, ": inputs on different devices (", a.str(), " vs ", b.str(),
               "); move them with .to(device)");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  TANDEM_CHECK(a.dtype() == b.dtype(), op, ": inputs of different dtypes (", a.str(), " vs ", b.str(),
               "); cast with .to(dtype)");
}

void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what) {
  TANDEM_CHECK(t.shape() == expected, op, ": ", what, " has shape ", shape_str(t.shape()), ", expected ",
               shape_str(expected));
}

}  // namespace tandem
