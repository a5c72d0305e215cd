// tests/support/encoder_fixture.cpp: the small BERT and its batch (see encoder_fixture.h).
#include "tests/support/encoder_fixture.h"

#include <vector>

#include "core/random.h"

namespace tandem::testing::encoder_fixture {

BertConfig tiny_config() {
  BertConfig c = models::bert_config("bert_tiny", kVocab);
  c.num_hidden_layers = 2, c.hidden_size = 32, c.num_attention_heads = 2, c.intermediate_size = 64;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  return c;
}

MlmBatch full_batch(int64_t n) {
  Generator g(11);
  Tensor ids = Tensor::empty({n, kSeq}, DType::I64);
  randint_(ids, kVocab - 5, g);
  std::vector<int64_t> v = ids.to_vector_i64(), mask(n * kSeq, 1), types(n * kSeq, 0), labels(n * kSeq, -100);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pad = (i % 2) ? 1 + i % 3 : 0;  // 0..3 padded positions at the end
    for (int64_t j = 0; j < kSeq; ++j) {
      int64_t& id = v[i * kSeq + j];
      id += 5;  // past the special tokens 0..4
      if (j >= kSeq - pad) id = 0, mask[i * kSeq + j] = 0;
      if (j >= kSeq / 2) types[i * kSeq + j] = 1;
    }
    for (int64_t k = 0; k < kMasked; ++k) {  // positions 1 + 3k: inside every sequence's tokens
      const int64_t j = 1 + 3 * k;
      labels[i * kSeq + j] = v[i * kSeq + j];
      v[i * kSeq + j] = 4;  // [MASK]
    }
  }
  auto mk = [&](const std::vector<int64_t>& x) { return Tensor::from_vector_i64(x, {n, kSeq}); };
  return {mk(v), mk(mask), mk(types), mk(labels)};
}

MlmBatch rows(const MlmBatch& b, int64_t from, int64_t count) {
  return {b.ids.slice(from, from + count), b.mask.slice(from, from + count), b.types.slice(from, from + count),
          b.labels.slice(from, from + count)};
}

}  // namespace tandem::testing::encoder_fixture
