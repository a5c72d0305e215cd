// apps/trainer/run/flag_suggest.h: the closest known flag to a mistyped one ("--batch-szie: did you
// mean --batch-size?"), for the command line (cli.h) and the --config reader (config_file.h) alike:
// the Levenshtein distance over the app's own flag names, accepted when it is at most a quarter of
// the word (at least 1 edit), so a wild guess gets no misleading suggestion.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tandem::trainer {

// The Levenshtein distance between a and b (insertions, deletions, substitutions, each 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The one of `known` closest to `word` ("" when none is within max(1, |word| / 4) edits). `word`
// may carry "=value", which is ignored.
std::string closest_flag(const std::string& word, const std::vector<std::string>& known);

// Every long and short flag name of `app` ("--batch-size", "-b", ...).
std::vector<std::string> flag_names(const CLI::App& app);

}  // namespace tandem::trainer
