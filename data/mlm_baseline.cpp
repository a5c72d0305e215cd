// data/mlm_baseline.cpp: unigram counts and their score on the held-out masked positions.
#include "data/mlm_baseline.h"

#include <cmath>

#include "core/check.h"

namespace tandem::data {

std::vector<int64_t> token_counts(const std::vector<int64_t>& stream, int64_t vocab_size) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  for (int64_t id : stream) {
    TANDEM_CHECK(id >= 0 && id < vocab_size, "unigram: token id ", id, " is outside the vocab of ", vocab_size,
                 "; the stream was tokenized with another vocab");
    ++counts[static_cast<size_t>(id)];
  }
  return counts;
}

UnigramBaseline unigram_baseline(const std::vector<int64_t>& train_stream, const MlmDataset& held_out,
                                 const SampleKey& key) {
  const int64_t V = held_out.vocab_size();
  const SpecialIds& sp = held_out.special();
  std::vector<int64_t> counts = token_counts(train_stream, V);
  UnigramBaseline out;
  int64_t total = 0, ordinary = 0;
  for (int64_t id = 0; id < V; ++id) {
    if (sp.is_special(id)) continue;
    ++ordinary;
    total += counts[static_cast<size_t>(id)];
    // Ties go to the smaller id, so the choice does not depend on anything but the counts.
    if (out.token < 0 || counts[static_cast<size_t>(id)] > counts[static_cast<size_t>(out.token)]) out.token = id;
  }
  TANDEM_CHECK(total > 0, "unigram: the training stream holds no ordinary token");
  const double denom = static_cast<double>(total + ordinary);  // add-one smoothing over ordinary tokens
  const int64_t L = held_out.seq_len();
  std::vector<int64_t> ids(static_cast<size_t>(L)), attn(ids.size()), labels(ids.size());
  int64_t correct = 0;
  double nll = 0;
  for (int64_t i = 0; i < held_out.size(); ++i) {
    held_out.get(i, key, ids.data(), attn.data(), labels.data());
    for (int64_t y : labels) {
      if (y == kIgnoreIndex) continue;
      ++out.masked;
      correct += y == out.token;
      nll -= std::log(static_cast<double>(counts[static_cast<size_t>(y)] + 1) / denom);
    }
  }
  TANDEM_CHECK(out.masked > 0, "unigram: the held-out set has no masked position; it needs some text");
  out.accuracy = static_cast<double>(correct) / static_cast<double>(out.masked);
  out.loss = nll / static_cast<double>(out.masked);
  return out;
}

}  // namespace tandem::data
