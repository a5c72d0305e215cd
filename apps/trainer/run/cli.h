// apps/trainer/run/cli.h: what both trainers' command lines share beyond CLI11 itself - a suggestion
// for a mistyped flag, --config FILE / --dump-config, and the run's configuration file.
//
// - An unknown flag is answered with the closest known one (flag_suggest.h).
// - An unknown flag that is another framework's name gets foreign_names.h's hint instead
//   ("--data-path is torchvision's name; tandem's: --data DIR ...").
// - --config FILE reads flags from a TOML file or a DeepSpeed JSON, strictly (config_file.h: an
//   unknown key is refused with a hint); a flag on the command line overrides the file's value.
//   --dump-config prints the effective configuration in the same format and exits 0: the options
//   given (on the command line or in a --config file) as active lines, every other option's default
//   as a commented line, so the output is a valid --config file that starts the same run and shows
//   what the rest defaults to. --dump-config=deepspeed prints a DeepSpeed JSON instead (the settings
//   DeepSpeed has keys for; the others are listed on stderr).
// - write_config_file() stores that text atomically (a temporary, then rename) in the run's
//   checkpoint folder, named after the run id, so a folder holding several runs keeps each one's.
// Rank 0 prints; other ranks parse silently (the same argv gives the same outcome everywhere).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tandem::trainer {

// Adds --config FILE (read by config_file.h's StrictConfig) and --dump-config[=toml|deepspeed] to
// `app` (call after all other options). `dump_config` is "" unless asked for.
void add_config_flags(CLI::App& app, std::string& dump_config, const std::string& program);

// app.parse(argc, argv) with the shared answers: -1 to go on; otherwise the exit code (0 after
// --help or --dump-config, CLI11's code on a parse error, printed with a suggestion when `print`).
// On success `effective_config` holds the configuration text (see effective_config()).
int parse(CLI::App& app, int argc, char** argv, bool print, const std::string& program,
          const std::string& dump_config, std::string& effective_config);

// The effective configuration of a parsed `app` as a --config file: a header naming `program`,
// the given options, then every other option's default, commented out.
std::string effective_config(const CLI::App& app, const std::string& program);

// Rank 0 of a run with a checkpoint folder: writes `text` to <dir>/config_<run_id>.toml atomically
// and returns the path.
std::string write_config_file(const std::string& dir, const std::string& run_id, const std::string& text);

}  // namespace tandem::trainer
