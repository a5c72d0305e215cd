// layers/amp_cast.cpp: the per-module AMP cast (see layers/amp_cast.h).
#include "layers/amp_cast.h"

#include "core/autocast.h"
#include "core/ops/copy/copy.h"
#include "layers/layers.h"

namespace tandem {
namespace {

// Re-points t's impl at a cast copy (Module::to does the same), so every handle sees the new dtype.
void cast_in_place(const Tensor& t, DType dtype) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return;
  Tensor c = ops::cast_raw(t, dtype);
  TensorImpl& d = t.impl();
  d.storage = c.storage();
  d.offset = c.storage_offset();
  d.dtype = c.dtype();
}

bool own(const std::string& name) { return name.find('.') == std::string::npos; }

}  // namespace

std::string amp_policy_op(const Module& m) {
  if (dynamic_cast<const BatchNorm2d*>(&m)) return "batch_norm";
  if (dynamic_cast<const LayerNorm*>(&m)) return "layer_norm";
  if (dynamic_cast<const Linear*>(&m)) return "linear";
  if (dynamic_cast<const Conv2d*>(&m)) return "conv2d";
  if (dynamic_cast<const Embedding*>(&m)) return "embedding";
  return "elementwise";
}

void cast_for_amp(Module& model, DType low) {
  TANDEM_CHECK(autocast::is_16bit(low), "cast_for_amp: the AMP dtype must be f16 or bf16, got ", dtype_name(low));
  for (const auto& [prefix, m] : model.named_modules()) {
    const DType d = autocast::parameter_dtype(amp_policy_op(*m), low);
    for (const auto& [name, t] : m->named_parameters())
      if (own(name)) {
        cast_in_place(t, d);
        if (t.grad().defined()) cast_in_place(t.grad(), d);
      }
    for (const auto& [name, t] : m->named_buffers())
      if (own(name)) cast_in_place(t, d);
  }
}

}  // namespace tandem
