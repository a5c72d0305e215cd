// data/text_dataset.cpp: packing and MLM masking of one sequence.
#include "data/text_dataset.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "data/transforms.h"

namespace tandem::data {

MlmDataset::MlmDataset(std::vector<int64_t> stream, SpecialIds special, int64_t vocab_size, MlmOptions opt)
    : stream_(std::move(stream)), special_(special), vocab_size_(vocab_size), opt_(opt) {
  TANDEM_CHECK(opt_.seq_len >= 3, "mlm: seq_len must be >= 3 ([CLS], a token, [SEP]), got ", opt_.seq_len);
  TANDEM_CHECK(!stream_.empty(), "mlm: the token stream is empty; the corpus (or its held-out split) has no ",
               "text: add documents, or lower held_out_every if the held-out split is the empty one");
  TANDEM_CHECK(special_.pad >= 0 && special_.unk >= 0 && special_.cls >= 0 && special_.sep >= 0 && special_.mask >= 0,
               "mlm: special token ids are unset; build them with SpecialIds::from(vocab)");
  TANDEM_CHECK(opt_.mask_prob > 0 && opt_.mask_prob <= 1, "mlm: mask_prob must be in (0, 1], got ", opt_.mask_prob);
  TANDEM_CHECK(opt_.mask_token_prob >= 0 && opt_.random_token_prob >= 0 &&
                   opt_.mask_token_prob + opt_.random_token_prob <= 1,
               "mlm: mask_token_prob + random_token_prob must be a probability, got ", opt_.mask_token_prob, " + ",
               opt_.random_token_prob);
  int64_t specials_below = 0;
  for (int64_t id : {special_.pad, special_.unk, special_.cls, special_.sep, special_.mask})
    specials_below += id < vocab_size_;
  TANDEM_CHECK(vocab_size_ - specials_below > 0, "mlm: the vocab (", vocab_size_,
               " tokens) has no ordinary token to draw random replacements from");
  const int64_t body = opt_.seq_len - 2;
  num_sequences_ = (static_cast<int64_t>(stream_.size()) + body - 1) / body;
}

void MlmDataset::packed(int64_t index, int64_t* ids, int64_t* attention_mask) const {
  TANDEM_CHECK(index >= 0 && index < num_sequences_, "mlm: sequence ", index, " is outside [0, ", num_sequences_, ")");
  const int64_t body = opt_.seq_len - 2;
  const int64_t begin = index * body;
  const int64_t n = std::min<int64_t>(body, static_cast<int64_t>(stream_.size()) - begin);
  ids[0] = special_.cls;
  std::copy_n(stream_.begin() + begin, n, ids + 1);
  ids[n + 1] = special_.sep;
  std::fill(ids + n + 2, ids + opt_.seq_len, special_.pad);
  std::fill(attention_mask, attention_mask + n + 2, 1);
  std::fill(attention_mask + n + 2, attention_mask + opt_.seq_len, 0);
}

int64_t MlmDataset::get(int64_t index, const SampleKey& key, int64_t* input_ids, int64_t* attention_mask,
                        int64_t* labels) const {
  packed(index, input_ids, attention_mask);
  std::fill(labels, labels + opt_.seq_len, kIgnoreIndex);
  std::vector<int64_t> candidates;
  for (int64_t p = 0; p < opt_.seq_len; ++p)
    if (!special_.is_special(input_ids[p])) candidates.push_back(p);
  if (candidates.empty()) return 0;
  const auto n = static_cast<int64_t>(candidates.size());
  const int64_t k = std::clamp<int64_t>(std::llround(opt_.mask_prob * static_cast<double>(n)), 1, n);
  SampleRng rng(key.seed, key.epoch, index);
  // Partial Fisher-Yates: candidates[0, k) become a uniform k-subset.
  for (int64_t i = 0; i < k; ++i) std::swap(candidates[i], candidates[rng.randint(i, n)]);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t p = candidates[i];
    labels[p] = input_ids[p];
    const double u = rng.uniform();
    if (u < opt_.mask_token_prob) {
      input_ids[p] = special_.mask;
    } else if (u < opt_.mask_token_prob + opt_.random_token_prob) {
      int64_t t;
      do t = rng.randint(0, vocab_size_); while (special_.is_special(t));  // specials are few: ends fast
      input_ids[p] = t;
    }
  }
  return k;
}

}  // namespace tandem::data
