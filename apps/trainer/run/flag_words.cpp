// apps/trainer/run/flag_words.cpp: the table of library options and the trainers' flags (see flag_words.h).
#include "apps/trainer/run/flag_words.h"

#include <regex>
#include <string_view>
#include <utility>

namespace tandem::trainer {

namespace {

// Library option (as its messages bracket it) -> the trainers' flag that sets it.
constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
    {"dir", "--checkpoint-dir"},               // CheckpointDirOptions::dir
    {"resume", "--resume"},                    // CheckpointDirOptions::resume
    {"overwrite", "--overwrite-checkpoints"},  // CheckpointDirOptions::overwrite
    {"run_id", "--run-id"},                    // CheckpointDirOptions::run_id
    {"strict", "--strict"},                    // data::LoaderOptions::strict (train_imagenet)
    {"text_field", "--text-field"},            // the text corpus's JSON field (train_encoder)
    {"servers", "--ps-servers"},               // dist::PsOptions::servers
    {"clip_grad_norm", "--clip-grad-norm"},    // optim::clip_grad_norm's max_norm
    {"momentum", "--momentum"},                // optim's SGD momentum
};

}  // namespace

std::string flag_words(const std::string& library_message) {
  // "[option]" or "[option value]": an identifier, then anything up to the closing bracket.
  static const std::regex bracket(R"(\[([a-z_]+)((?: [^\[\]\n]*)?)\])");
  std::string out;
  auto from = library_message.cbegin();
  for (std::sregex_iterator it(library_message.begin(), library_message.end(), bracket), end; it != end; ++it) {
    const std::smatch& m = *it;
    out.append(from, m[0].first);
    from = m[0].second;
    std::string word = m[0].str();
    for (const auto& [option, flag] : kFlags)
      if (m[1].str() == option) word = std::string(flag) + m[2].str();
    out += word;
  }
  out.append(from, library_message.cend());
  return out;
}

}  // namespace tandem::trainer
