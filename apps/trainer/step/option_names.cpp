// apps/trainer/step/option_names.cpp: the library's own words for its options (see option_names.h).
#include "apps/trainer/step/option_names.h"

namespace tandem::trainer {

std::string library_option_name(const std::string& option, const std::string& value) {
  if (option == "lr") return "the learning rate";
  return "StepOptions::" + option + (value.empty() ? "" : " = " + value);
}

std::string option_name(const OptionNames& names, const std::string& option, const std::string& value) {
  return names ? names(option, value) : library_option_name(option, value);
}

}  // namespace tandem::trainer
