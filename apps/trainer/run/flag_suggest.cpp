// apps/trainer/run/flag_suggest.cpp: the closest-flag suggestion (see flag_suggest.h).
#include "apps/trainer/run/flag_suggest.h"

#include <algorithm>

namespace tandem::trainer {

size_t edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic programme at a time: row[j] = distance(a[0, i), b[0, j)).
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_flag(const std::string& word, const std::vector<std::string>& known) {
  const std::string w = word.substr(0, word.find('='));
  // A quarter of the word: "--batch-szie" (2 edits from --batch-size) gets an answer; "--opt" (2 from
  // --eps) and "--max-steps" (3 from --run-steps) none - a near spelling of another meaning misleads.
  const size_t limit = std::max<size_t>(1, w.size() / 4);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& k : known) {
    const size_t d = edit_distance(w, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options({})) {
    for (const std::string& l : opt->get_lnames()) out.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) out.push_back("-" + s);
  }
  return out;
}

}  // namespace tandem::trainer
