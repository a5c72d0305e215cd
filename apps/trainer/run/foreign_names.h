// apps/trainer/run/foreign_names.h: the one table of what PyTorch, torchvision, Hugging Face and
// DeepSpeed users call things and what tandem calls them.
//
// The table drives two things, so they cannot drift apart:
// - the hint for an unknown flag or --config key that is another framework's name
//   ("--data-path is torchvision's name; tandem's: --data DIR ..."), tried before the closest-flag
//   suggestion, which would otherwise point a foreign name at a flag that means something else
//   (--max-steps at --run-steps, --opt at --eps, --vocab-file at --vocab-size);
// - the README's "Coming from PyTorch" table (markdown_table(); tests/test_config_files.cpp checks
//   the README holds exactly it).
// A row names a spelling only where tandem's flag means the same thing; a row without spellings is
// documentation only (torchrun, torchvision's --weights NAME, ...).
#pragma once
#include <string>
#include <vector>

namespace tandem::trainer {

struct ForeignName {
  std::string theirs;  // the README's left column (markdown): who calls it what
  std::string ours;    // the README's right column (markdown): tandem's flag and how it differs
  std::string target;  // the tandem flag a hint names ("--data"); "" for a documentation-only row
  std::vector<std::string> spellings;  // foreign names that get the hint, kebab-case without dashes
                                       // ("data-path", "j"); snake_case input is folded to this
  std::string source;  // whose name a spelling is, for the hint ("torchvision", "Hugging Face")
};

// The table, in the README's order.
const std::vector<ForeignName>& foreign_names();

// The row whose spellings hold `word` ("--data_path", "-j", "learning_rate": dashes stripped, '_'
// folded to '-'); nullptr when none does.
const ForeignName* find_foreign_name(const std::string& word);

// The hint for a foreign name in `program`, whose flags are `known`: "--data-path is torchvision's
// name; tandem's: --data DIR (...)", or that `program` has no such flag; "" when `word` is in no row.
std::string foreign_name_hint(const std::string& word, const std::vector<std::string>& known,
                              const std::string& program);

// The README's table: a header and one markdown row per entry.
std::string markdown_table();

}  // namespace tandem::trainer
