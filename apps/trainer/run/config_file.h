// apps/trainer/run/config_file.h: what --config FILE accepts, strictly - tandem's TOML and DeepSpeed's JSON.
//
// CLI11's own reader takes any line it can split and ignores what it does not know, so a typo, a
// snake_case key or a DeepSpeed file used to train with the defaults. This reader runs first (CLI11
// calls it as the app's config formatter, then applies the normalised items) and refuses, naming
// the file, the line or key, and what to write instead:
// - TOML: one `name = value` per line, `# comments`, no [sections] and no dotted keys. A name is a
//   long flag of this program, or one of its aliases, without the dashes; snake_case is folded to
//   kebab-case (batch_size = batch-size). An unknown name gets foreign_names.h's hint or the closest
//   flag, as an unknown flag does; a name given twice is refused.
// - JSON (a file whose first character is '{'): a DeepSpeed config. The keys tandem has are read
//   (deepspeed_keys(): micro-batch, accumulation, ZeRO stage, bf16/fp16, optimizer type and params,
//   the Warmup* schedulers, clipping, steps_per_print); any other key is refused by its path, and a
//   key whose DeepSpeed default differs from tandem's meaning (warmup_type log) must be written out.
// deepspeed_config() is the other direction, for --dump-config=deepspeed.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tandem::trainer {

// The app's config formatter: CLI11's TOML writer, and the strict reader above. `app` must outlive it.
class StrictConfig : public CLI::ConfigTOML {
 public:
  StrictConfig(const CLI::App* app, std::string program) : app_(app), program_(std::move(program)) {}
  // Throws CLI::ConfigError with the sentence a user can act on.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App* app_;
  std::string program_;
};

// The (name, value) pairs of a TOML --config text, checked against `app` (see above) and named by the
// option's first long name. Throws CLI::ConfigError; `file` names the text in messages.
std::vector<std::pair<std::string, std::string>> read_toml_config(const std::string& text, const CLI::App& app,
                                                                  const std::string& program,
                                                                  const std::string& file);

// A DeepSpeed JSON text as TOML lines (`batch-size = 8`), every key read or refused by its path.
// Throws CLI::ConfigError.
std::string deepspeed_to_toml(const std::string& json_text);

// The parsed `app`'s settings as a DeepSpeed JSON (the keys deepspeed_to_toml reads back);
// `left_out` gets the options given that DeepSpeed has no key for ("--model resnet18").
std::string deepspeed_config(const CLI::App& app, std::vector<std::string>& left_out);

}  // namespace tandem::trainer
