// layers/linear.cpp: Linear and Embedding.
#include <cmath>

#include "core/ops/embedding/embedding.h"
#include "core/ops/matmul/matmul.h"
#include "layers/init.h"
#include "layers/layers.h"

namespace tandem {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen)
    : in_(in_features), out_(out_features) {
  TANDEM_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features,
               "): feature counts must be positive");
  weight_ = register_parameter("weight", Tensor::empty({out_, in_}));
  if (bias) bias_ = register_parameter("bias", Tensor::empty({out_}));
  if (gen) reset_parameters(*gen);
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight_, in_, init::gain_leaky_relu(std::sqrt(5.0)), gen);
  if (bias_.defined()) init::default_bias_(bias_, in_, gen);
}

Tensor Linear::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear(in_features=", in_, "): input ", x.str(),
               " has the wrong last dimension; flatten the input or fix in_features");
  return ops::linear(x, weight_, bias_);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_.defined() ? "True" : "False");
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen)
    : num_(num_embeddings), dim_(embedding_dim) {
  TANDEM_CHECK(num_ > 0 && dim_ > 0, "Embedding(", num_, ", ", dim_, "): sizes must be positive");
  weight_ = register_parameter("weight", Tensor::empty({num_, dim_}));
  if (gen) reset_parameters(*gen);
}

void Embedding::reset_parameters(Generator& gen) { normal_(weight_, 0.0, 1.0, gen); }

Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(indices, weight_); }

std::string Embedding::extra_repr() const { return std::to_string(num_) + ", " + std::to_string(dim_); }

}  // namespace tandem
