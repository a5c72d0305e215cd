// data/mlm_baseline.h: the unigram baseline that masked-token accuracy and loss are printed beside.
//
// The baseline model ignores the context: it always predicts the most frequent non-special token of
// the TRAINING stream (for English text, "the" or "."), and as a distribution it assigns each
// non-special token its training frequency, add-one smoothed so that every held-out label has a
// finite loss. Both are scored on the held-out masked positions, i.e. exactly the labels the model's
// validation sees when it reads every held-out sequence once with the same key:
//   accuracy = (labels equal to the top token) / (masked positions)
//   loss     = mean over masked positions of -ln p_unigram(label)   (nats, like cross-entropy)
// A model that has learnt anything from context beats both numbers.
#pragma once
#include <cstdint>
#include <vector>

#include "data/text_dataset.h"

namespace tandem::data {

struct UnigramBaseline {
  int64_t token = -1;   // most frequent non-special token of the training stream
  int64_t masked = 0;   // held-out positions scored
  double accuracy = 0;  // fraction of them whose label is `token`
  double loss = 0;      // mean -ln p_unigram(label)
};

// Counts of each id in stream (size vocab_size).
std::vector<int64_t> token_counts(const std::vector<int64_t>& stream, int64_t vocab_size);

// The baseline of a training stream scored on every sequence of held_out masked with key.
UnigramBaseline unigram_baseline(const std::vector<int64_t>& train_stream, const MlmDataset& held_out,
                                 const SampleKey& key);

}  // namespace tandem::data
