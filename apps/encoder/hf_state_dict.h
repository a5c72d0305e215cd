// apps/encoder/hf_state_dict.h: a Hugging Face BertForMaskedLM state dict -> the tensors tandem's
// BertForMaskedLM loads.
//
// tandem's names are HF's named_parameters() (layers/models/bert.h). HF's state_dict() lists a few
// more entries, which are accepted here and checked, never silently dropped:
//   cls.predictions.decoder.weight  the tied decoder: must equal bert.embeddings.word_embeddings.weight
//   cls.predictions.decoder.bias    an alias of cls.predictions.bias: must equal it
//   bert.embeddings.position_ids    a buffer older transformers versions saved: must be 0, 1, 2, ...
// A decoder that differs from its tied tensor (a model trained with tie_word_embeddings=False) is an
// error, since tandem always ties. Entries starting with "optimizer." (a tandem training
// checkpoint) are dropped too, so a checkpoint reads like a plain state dict.
// to_hf_state_dict is the other direction: tandem's tensors plus the two decoder aliases, the
// names HF's BertForMaskedLM.load_state_dict(strict=True) expects (position_ids is not persistent
// in transformers >= 4.31, so it is not added).
#pragma once
#include "checkpoint/state_dict.h"

namespace tandem::apps::encoder {

// The entries of `sd` that tandem's BertForMaskedLM holds; throws naming an alias that disagrees.
NamedTensors from_hf_state_dict(const NamedTensors& sd);

// tandem's BertForMaskedLM tensors -> HF's state_dict() names (the tied decoder's aliases added).
NamedTensors to_hf_state_dict(const NamedTensors& sd);

}  // namespace tandem::apps::encoder
