// apps/trainer/cli.cpp: flag suggestions, --config/--dump-config and the run's config file (see cli.h).
#include "apps/trainer/cli.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/trainer/exit_status.h"  // defines: kExitUsage

#include "core/check.h"  // defines: TANDEM_CHECK

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
  // A third of the word: "--batch-szie" (2 edits from --batch-size) gets an answer, "--foo" none.
  const size_t limit = std::max<size_t>(2, w.size() / 3);
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

void add_config_flags(CLI::App& app, bool& dump_config) {
  app.set_config("--config", "", "read flags from this TOML/INI file (name = value, e.g. batch-size = 64); flags "
                 "on the command line override it");
  app.add_flag("--dump-config", dump_config,
               "print the effective configuration as a --config file (given options, then the defaults as "
               "comments) and exit")
      ->configurable(false);
}

std::string effective_config(const CLI::App& app, const std::string& program) {
  std::ostringstream out;
  out << "# " << program << " configuration: pass it back with " << program << " --config FILE\n"
      << "# (flags on the command line override it). Options given:\n"
      << app.config_to_str(false, false);
  std::ostringstream defaults;
  for (const CLI::Option* opt : app.get_options({})) {
    if (!opt->get_configurable() || opt->count() > 0 || opt->get_lnames().empty()) continue;
    std::string value = opt->get_default_str();
    if (value.empty() && opt->get_expected_min() == 0) value = "false";  // a flag not given
    if (value.empty()) continue;  // no default (a file name, a sentinel the help explains)
    const bool quote = opt->get_type_size() == 1 && value.find_first_not_of("0123456789.-+e") != std::string::npos &&
                       value != "true" && value != "false" && value.front() != '[';
    defaults << "# " << opt->get_lnames().front() << " = " << (quote ? "\"" + value + "\"" : value) << "\n";
  }
  if (!defaults.str().empty()) out << "# Defaults of the other options:\n" << defaults.str();
  return out.str();
}

int parse(CLI::App& app, int argc, char** argv, bool print, const std::string& program, const bool& dump_config,
          std::string& effective) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's codes (103, 104, 105, 109, 114, ...) mean nothing to a supervisor: one usage status
    // (apps/trainer/exit_status.h); --help and --version stay 0.
    if (!print) return e.get_exit_code() == 0 ? 0 : kExitUsage;
    const int rc = app.exit(e) == 0 ? 0 : kExitUsage;
    // An unknown flag: the closest known one, as git and cargo answer.
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      const std::vector<std::string> known = flag_names(app);
      for (const std::string& extra : app.remaining()) {
        if (extra.size() < 2 || extra[0] != '-' || std::isdigit(static_cast<unsigned char>(extra[1]))) continue;
        const std::string near = closest_flag(extra, known);
        if (!near.empty())
          std::cerr << program << ": " << extra.substr(0, extra.find('=')) << ": did you mean " << near << "?\n";
      }
    }
    return rc;
  }
  effective = effective_config(app, program);
  if (dump_config) {
    if (print) std::cout << effective << std::flush;
    return 0;
  }
  return -1;
}

std::string write_config_file(const std::string& dir, const std::string& run_id, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(dir) / ("config_" + run_id + ".toml");
  const fs::path tmp = fs::path(dir) / (".config_" + run_id + ".toml.tmp");
  {
    std::ofstream f(tmp);
    f << "# run " << run_id << "\n" << text;
    TANDEM_CHECK(f.good(), "could not write ", tmp.string(), ": check that --checkpoint-dir is writable");
  }
  fs::rename(tmp, path);  // atomic on one file system: a reader sees the old file or the whole new one
  return path.string();
}

}  // namespace tandem::trainer
