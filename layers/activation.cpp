// layers/activation.cpp: ReLU, GELU and Dropout (stateless wrappers over core/ops).
#include "core/ops/dropout/dropout.h"
#include "core/ops/elementwise/elementwise.h"
#include "layers/layers.h"

namespace tandem {

ReLU::ReLU() : StatelessModule([](const Tensor& x) { return ops::relu(x); }, "ReLU") {}

GELU::GELU() : StatelessModule([](const Tensor& x) { return ops::gelu(x); }, "GELU", "approximate='none'") {}

Dropout::Dropout(double p, Generator* gen) : p_(p), gen_(gen) {
  TANDEM_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
  TANDEM_CHECK(gen != nullptr, "Dropout needs a generator for its masks (pass &default_generator())");
}

Tensor Dropout::forward(const Tensor& x) {
  return ops::dropout(x, static_cast<float>(p_), is_training(), *gen_);
}

std::string Dropout::extra_repr() const { return "p=" + py_float(p_) + ", inplace=False"; }

}  // namespace tandem
