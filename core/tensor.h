// core/tensor.h: the Tensor handle.
//
// A Tensor is a cheap, copyable handle (a shared_ptr) to a TensorImpl: a shape, a dtype, a device
// and a byte offset into refcounted Storage. Tensors are always contiguous (row-major); the only
// views are reshape (same bytes, new shape) and slices along the leading dimension. Image
// activations are NHWC. Copying a Tensor copies the handle, never the data: use clone() for that.
//
// Autograd state lives on the impl: requires_grad, the accumulated .grad of a leaf, the node that
// produced a non-leaf (grad_fn), and the leaf's "gradient ready" hooks. See core/autograd.h.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"

namespace tandem {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);

namespace autograd {
class Node;
class AccumulateGrad;
}  // namespace autograd

class Tensor;
// Called once per backward after a leaf's .grad holds its complete gradient.
using GradReadyHook = std::function<void(Tensor& param)>;
struct TensorImpl;

// Owns one registered grad-ready hook: destroying it (or reset()) removes that hook from its leaf,
// so whoever registers a hook decides how long it lives. It holds the leaf weakly: a handle that
// outlives its leaf does nothing. Movable, not copyable (one owner per hook).
class GradReadyHookHandle {
 public:
  GradReadyHookHandle() = default;
  GradReadyHookHandle(std::weak_ptr<TensorImpl> leaf, uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  GradReadyHookHandle(GradReadyHookHandle&& o) noexcept : leaf_(std::move(o.leaf_)), id_(o.id_) { o.leaf_.reset(); }
  GradReadyHookHandle& operator=(GradReadyHookHandle&& o) noexcept;
  GradReadyHookHandle(const GradReadyHookHandle&) = delete;
  GradReadyHookHandle& operator=(const GradReadyHookHandle&) = delete;
  ~GradReadyHookHandle() { reset(); }
  void reset();  // removes the hook now; a no-op when already removed or the leaf is gone

 private:
  std::weak_ptr<TensorImpl> leaf_;
  uint64_t id_ = 0;  // the hook's id on its leaf
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes from storage->data()
  Shape shape;
  DType dtype = DType::F32;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;                  // leaves only
  std::shared_ptr<autograd::Node> grad_fn;           // non-leaves: the op that produced this
  uint32_t output_nr = 0;                            // which output of grad_fn this is
  std::shared_ptr<autograd::AccumulateGrad> grad_accumulator;  // leaves: created on first use
  std::vector<std::pair<uint64_t, GradReadyHook>> grad_ready_hooks;  // (id, hook), in registration order
  uint64_t next_hook_id = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (all return tensors that do not require grad) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
  // Copies host values (converted to `dtype`) into a new tensor on `device`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
                            Device device = Device::cpu());
  static Tensor from_vector_f64(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F64,
                                Device device = Device::cpu());
  static Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::I64,
                                Device device = Device::cpu());
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  std::string str() const;  // "f32[2, 3] on cpu"

  void* data_ptr() const { return static_cast<char*>(impl().storage->data()) + impl().offset; }
  template <typename T>
  T* data() const {
    TANDEM_CHECK(dtype() == dtype_of<T>::value, "data<", dtype_name(dtype_of<T>::value), ">() called on a ",
                 dtype_name(dtype()), " tensor");
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  size_t storage_offset() const { return impl().offset; }
  // True when both tensors view the same bytes.
  bool shares_storage(const Tensor& o) const { return storage() == o.storage(); }

  // ---- views (share storage; NOT recorded by autograd) ----
  // A new handle with another shape over the same bytes (-1 infers one dimension). Use
  // ops::reshape when the result must be differentiable.
  Tensor view(const Shape& shape) const;
  // Rows [start, end) of the leading dimension. Refuses tensors that require grad while grad mode is
  // on: the slice would silently cut the graph.
  Tensor slice(int64_t start, int64_t end) const;
  // Same data, no autograd history, requires_grad false.
  Tensor detach() const;

  // ---- copies and fills ----
  // to() is recorded by autograd (it calls ops::to_device / ops::cast) and returns *this when
  // nothing changes; clone, copy_, zero_ and fill_ are not recorded.
  Tensor clone() const;
  Tensor to(Device d) const;          // copy to another device
  Tensor to(DType t) const;           // cast
  void copy_(const Tensor& src);      // same shape (numel) and dtype; any devices
  void zero_();
  void fill_(double value);
  // Host copies of the values, converted. Synchronises with the device.
  std::vector<float> to_vector() const;
  std::vector<double> to_vector_f64() const;
  std::vector<int64_t> to_vector_i64() const;
  double item() const;  // numel must be 1

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool r);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g);  // leaves only; g may be a view into a bucket buffer (dist/)
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Backpropagates from this tensor. A scalar gets an implicit gradient of 1.
  void backward(const Tensor& gradient = Tensor()) const;
  // Registers a hook fired once per backward when this leaf's gradient is complete. The hook
  // stays registered while the returned handle lives.
  [[nodiscard]] GradReadyHookHandle register_grad_ready_hook(GradReadyHook hook);
  size_t num_grad_ready_hooks() const { return impl().grad_ready_hooks.size(); }

  TensorImpl& impl() const {
    TANDEM_CHECK(impl_ != nullptr, "operation on an undefined Tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Raises a clear error when two tensors that an op combines disagree.
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what);

}  // namespace tandem
