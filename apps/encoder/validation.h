// apps/encoder/validation.h: masked-token accuracy and loss on the held-out text.
//
// Every validation reads the whole held-out set (or its first --val-batches batches per rank), in
// order, sharded across ranks without padding (the last N mod ranks sequences go one per rank),
// with the masks of key (seed, kValidationEpoch): the same positions every time, and the ones the
// unigram baseline (data/mlm_baseline.h) was scored on when the whole set is read. The model runs
// in eval mode (no dropout) without autograd; the full logits are computed and only the masked rows
// are scored:
//   accuracy = argmax == label, over masked positions;  loss = mean cross-entropy over them (nats).
// Sums and counts are reduced across ranks in one collective, so every rank returns the same result.
#pragma once
#include <cstdint>

namespace tandem::apps::encoder {

struct Training;
struct EncoderOptions;

struct EvalResult {
  int64_t step = 0;       // optimizer steps done when it ran
  double accuracy = 0;    // masked-token accuracy
  double loss = 0;        // mean cross-entropy at masked positions
  int64_t masked = 0;     // positions scored (all ranks)
  int64_t sequences = 0;  // sequences read (all ranks)
  int64_t nonfinite = 0;  // non-finite logits at the scored positions (all ranks): > 0 = the pass
                          // failed, and accuracy and loss mean nothing (validation_line says so)
  bool failed() const { return nonfinite > 0; }
};

// Collective: every rank must call it. Leaves the model in training mode.
EvalResult evaluate(Training& t, const EncoderOptions& o, int64_t step);

}  // namespace tandem::apps::encoder
