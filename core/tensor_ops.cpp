// core/tensor_ops.cpp: the Tensor members that run an op or the autograd engine - fills, casts,
// device moves, host reads, backward (declared in core/tensor.h). They live here, above the ops they
// call, so that tensor.cpp (the handle) includes nothing built on Tensor: no include cycle.
#include "core/tensor.h"

#include <cstring>

#include "core/autograd.h"
#include "core/ops/copy/copy.h"

namespace tandem {

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

namespace {
template <typename Src>
Tensor host_values(const std::vector<Src>& v, const Shape& shape, DType dtype, Device device) {
  TANDEM_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), "from_vector: ", v.size(),
               " values do not fill shape ", shape_str(shape));
  Tensor host = Tensor::empty(shape, dtype_of<Src>::value, Device::cpu());
  if (!v.empty()) std::memcpy(host.data_ptr(), v.data(), v.size() * sizeof(Src));
  Tensor typed = dtype == host.dtype() ? host : ops::cast_raw(host, dtype);
  return device.is_cpu() ? typed : typed.to(device);
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape, DType dtype, Device device) {
  return host_values(v, shape, dtype, device);
}
Tensor Tensor::from_vector_f64(const std::vector<double>& v, const Shape& shape, DType dtype, Device device) {
  if (dtype != DType::F64 && !device.is_cpu()) return host_values(v, shape, DType::F64, Device::cpu()).to(dtype).to(device);
  return host_values(v, shape, dtype, device);
}
Tensor Tensor::from_vector_i64(const std::vector<int64_t>& v, const Shape& shape, DType dtype, Device device) {
  return host_values(v, shape, dtype, device);
}

Tensor Tensor::slice(int64_t start, int64_t end) const {
  TANDEM_CHECK(dim() >= 1, "slice on a 0-d tensor");
  TANDEM_CHECK(!(requires_grad() && autograd::grad_mode_enabled()),
               "slice() is not differentiable; call it under NoGradGuard or on a detached tensor");
  int64_t n = size(0);
  TANDEM_CHECK(0 <= start && start <= end && end <= n, "slice [", start, ", ", end, ") out of range for ", str());
  int64_t row = n ? numel() / n : 0;
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->offset = impl().offset + static_cast<size_t>(start * row) * dtype_size(dtype());
  impl2->shape = shape();
  impl2->shape[0] = end - start;
  impl2->dtype = dtype();
  return Tensor(std::move(impl2));
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  return ops::to_device(*this, d);
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  return ops::cast(*this, t);
}

void Tensor::fill_(double value) { ops::fill_(*this, value); }

std::vector<float> Tensor::to_vector() const {
  Tensor h = device().is_cpu() ? *this : to(Device::cpu());
  if (h.dtype() != DType::F32) h = ops::cast_raw(h, DType::F32);
  const float* p = h.data<float>();
  return std::vector<float>(p, p + h.numel());
}

std::vector<double> Tensor::to_vector_f64() const {
  Tensor h = device().is_cpu() ? *this : to(Device::cpu());
  if (h.dtype() != DType::F64) h = ops::cast_raw(h, DType::F64);
  const double* p = h.data<double>();
  return std::vector<double>(p, p + h.numel());
}

std::vector<int64_t> Tensor::to_vector_i64() const {
  Tensor h = device().is_cpu() ? *this : to(Device::cpu());
  if (h.dtype() != DType::I64) h = ops::cast_raw(h, DType::I64);
  const int64_t* p = h.data<int64_t>();
  return std::vector<int64_t>(p, p + h.numel());
}

double Tensor::item() const {
  TANDEM_CHECK(numel() == 1, "item() needs a one-element tensor, got ", str());
  return to_vector_f64()[0];
}

void Tensor::backward(const Tensor& gradient) const {
  autograd::backward({*this}, {gradient});
}

}  // namespace tandem
