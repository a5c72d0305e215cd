// apps/trainer/run/cli.cpp: --config/--dump-config and the run's config file (see cli.h).
#include "apps/trainer/run/cli.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/trainer/run/config_file.h"    // defines: StrictConfig, deepspeed_config
#include "apps/trainer/run/exit_status.h"    // defines: kExitUsage
#include "apps/trainer/run/flag_suggest.h"  // defines: closest_flag, flag_names
#include "apps/trainer/run/foreign_names.h"  // defines: foreign_name_hint
#include "core/check.h"                  // defines: TANDEM_CHECK

namespace tandem::trainer {


void add_config_flags(CLI::App& app, std::string& dump_config, const std::string& program) {
  app.set_config("--config", "", "read flags from this file: TOML (name = value with a long flag's name, e.g. "
                 "batch-size = 64; snake_case works) or a DeepSpeed JSON; an unknown name is refused. Flags on "
                 "the command line override it");
  app.config_formatter(std::make_shared<StrictConfig>(&app, program));
  app.add_flag("--dump-config{toml}", dump_config,
               "print the effective configuration as a --config file (given options, then the defaults as "
               "comments) and exit; --dump-config=deepspeed prints a DeepSpeed JSON of what DeepSpeed has keys for")
      ->check(CLI::IsMember({"toml", "deepspeed"}))
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

int parse(CLI::App& app, int argc, char** argv, bool print, const std::string& program,
          const std::string& dump_config, std::string& effective) {
  try {
    // torchvision's --amp is a bare switch; tandem's takes the 16-bit type. CLI11 takes a required
    // value unseen, so "--amp --zero 1" read --zero as the type: refuse a bare --amp first.
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--amp" && (i + 1 == argc || argv[i + 1][0] == '-') && app.get_option_no_throw("--amp"))
        throw CLI::ValidationError("--amp", "needs the 16-bit type: --amp bf16 or --amp fp16 (torchvision's bare "
                                            "--amp is fp16 autocast with a loss scaler: --amp fp16)");
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's codes (103, 104, 105, 109, 114, ...) mean nothing to a supervisor: one usage status
    // (apps/trainer/run/exit_status.h); --help and --version stay 0.
    if (!print) return e.get_exit_code() == 0 ? 0 : kExitUsage;
    const int rc = app.exit(e) == 0 ? 0 : kExitUsage;
    // An unknown flag: the closest known one, as git and cargo answer.
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      const std::vector<std::string> known = flag_names(app);
      for (const std::string& extra : app.remaining()) {
        if (extra.size() < 2 || extra[0] != '-' || std::isdigit(static_cast<unsigned char>(extra[1]))) continue;
        // Another framework's name first: the closest spelling may mean something else.
        const std::string foreign = foreign_name_hint(extra, known, program);
        const std::string near = foreign.empty() ? closest_flag(extra, known) : "";
        if (!foreign.empty())
          std::cerr << program << ": " << foreign << "\n";
        else if (!near.empty())
          std::cerr << program << ": " << extra.substr(0, extra.find('=')) << ": did you mean " << near << "?\n";
      }
    }
    return rc;
  }
  effective = effective_config(app, program);
  if (dump_config == "deepspeed") {
    std::vector<std::string> left_out;
    const std::string ds = deepspeed_config(app, left_out);
    if (print) {
      std::cout << ds << std::flush;
      for (const std::string& l : left_out)
        std::cerr << program << ": " << l << " has no DeepSpeed key; pass it as a flag beside --config\n";
    }
    return 0;
  }
  if (!dump_config.empty()) {
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
