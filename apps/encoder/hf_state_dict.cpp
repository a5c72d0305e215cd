// apps/encoder/hf_state_dict.cpp: accepts and checks HF's alias entries (see hf_state_dict.h).
#include "apps/encoder/hf_state_dict.h"

#include <cstring>
#include <map>

#include "core/check.h"

namespace tandem::apps::encoder {

namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());  // tensors are always contiguous
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

NamedTensors from_hf_state_dict(const NamedTensors& sd) {
  std::map<std::string, Tensor> by_name(sd.begin(), sd.end());
  // alias -> the tensor it must equal
  const std::map<std::string, std::string> aliases{
      {"cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"},
      {"cls.predictions.decoder.bias", "cls.predictions.bias"}};
  NamedTensors out;
  for (const auto& [name, t] : sd) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    if (auto a = aliases.find(name); a != aliases.end()) {
      auto target = by_name.find(a->second);
      TANDEM_CHECK(target != by_name.end(), "the state dict has ", name, " but not ", a->second,
                   ", which tandem ties it to: save the whole BertForMaskedLM state dict");
      TANDEM_CHECK(same_values(t, target->second), name, " differs from ", a->second, ": tandem's BertForMaskedLM "
                   "always ties the decoder (weight = word embeddings, bias = cls.predictions.bias, HF's "
                   "tie_word_embeddings=True); a model trained untied cannot be loaded");
      continue;
    }
    if (name == "bert.embeddings.position_ids") {
      std::vector<int64_t> ids = t.to(Device::cpu()).to_vector_i64();
      for (size_t i = 0; i < ids.size(); ++i)
        TANDEM_CHECK(ids[i] == static_cast<int64_t>(i), "bert.embeddings.position_ids is not 0, 1, 2, ... (entry ",
                     i, " is ", ids[i], "): tandem always uses absolute positions from 0");
      continue;
    }
    out.emplace_back(name, t);
  }
  return out;
}

NamedTensors to_hf_state_dict(const NamedTensors& sd) {
  NamedTensors out = sd;
  const Tensor* words = nullptr;
  const Tensor* bias = nullptr;
  for (const auto& [name, t] : sd) {
    if (name == "bert.embeddings.word_embeddings.weight") words = &t;
    if (name == "cls.predictions.bias") bias = &t;
  }
  TANDEM_CHECK(words != nullptr && bias != nullptr, "not a BertForMaskedLM state dict: it lacks "
               "bert.embeddings.word_embeddings.weight or cls.predictions.bias");
  // HF's order: the decoder follows the transform, as its state_dict() lists it.
  out.emplace_back("cls.predictions.decoder.weight", *words);
  out.emplace_back("cls.predictions.decoder.bias", *bias);
  return out;
}

}  // namespace tandem::apps::encoder
