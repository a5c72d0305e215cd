// apps/trainer/run/config_file.cpp: the strict --config reader, TOML and DeepSpeed JSON (see config_file.h).
#include "apps/trainer/run/config_file.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "apps/trainer/run/flag_suggest.h"   // defines: closest_flag, flag_names
#include "apps/trainer/run/foreign_names.h"  // defines: foreign_name_hint

namespace tandem::trainer {

namespace {

using json = nlohmann::json;

const char* const kTomlShape =
    "a --config file is TOML: one `name = value` per line with a long flag's name (batch-size = 64, "
    "lr = 0.1, betas = [0.9, 0.98], amp = \"bf16\"), # comments, no [sections]; or a DeepSpeed JSON object";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw CLI::ConfigError(where + ": " + what);
}

// DeepSpeed keys that are one tandem flag with the same meaning and unit.
const std::map<std::string, std::string>& deepspeed_direct() {
  static const std::map<std::string, std::string> m{
      {"train_micro_batch_size_per_gpu", "batch-size"},
      {"gradient_accumulation_steps", "grad-accum-steps"},
      {"zero_optimization.stage", "zero"},
      {"gradient_clipping", "clip-grad-norm"},
      {"steps_per_print", "log-every"},
      {"optimizer.params.lr", "lr"},
      {"optimizer.params.betas", "betas"},
      {"optimizer.params.eps", "eps"},
      {"optimizer.params.weight_decay", "weight-decay"},
      {"optimizer.params.momentum", "momentum"},
      {"scheduler.params.warmup_num_steps", "lr-warmup-steps"},
      {"scheduler.params.total_num_steps", "steps"},
      {"scheduler.params.warmup_max_lr", "lr"},
  };
  return m;
}

// DeepSpeed's scheduler types with a tandem schedule of the same shape (after a linear warmup from
// warmup_min_lr = 0): WarmupLR holds the peak; WarmupDecayLR decays linearly to 0 at total_num_steps.
const std::map<std::string, std::string> kSchedulers{{"WarmupLR", "constant"}, {"WarmupDecayLR", "linear"}};

// Leaves of a JSON object as dotted paths ("optimizer.params.lr"); arrays are leaves.
void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object())
      flatten(*it, path, out);
    else
      out.emplace_back(path, *it);
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> read_toml_config(const std::string& text, const CLI::App& app,
                                                                  const std::string& program,
                                                                  const std::string& file) {
  const std::vector<std::string> known = flag_names(app);
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  std::istringstream in(text);
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    // A line deepspeed_to_toml wrote names its JSON key: the user's file has no such line.
    const size_t ds = line.find("# DeepSpeed ");
    const std::string where = ds != std::string::npos
                                  ? file + ": " + line.substr(ds + 2) + " (read as " + trim(line.substr(0, ds)) + ")"
                                  : file + " line " + std::to_string(number) + " (" + line + ")";
    if (line[0] == '[') refuse(where, "sections are not read, so its keys would be ignored; " + std::string(kTomlShape));
    const size_t eq = line.find('=');
    if (eq == std::string::npos) refuse(where, std::string("not `name = value`; ") + kTomlShape);
    std::string name = trim(line.substr(0, eq));
    if (name.size() >= 2 && (name.front() == '"' || name.front() == '\'') && name.back() == name.front())
      name = name.substr(1, name.size() - 2);
    const std::string value = trim(line.substr(eq + 1).substr(0, line.substr(eq + 1).find('#')));
    if (name.empty() || value.empty()) refuse(where, std::string("a name and a value are needed; ") + kTomlShape);
    if (name.find('.') != std::string::npos)
      refuse(where, std::string("dotted keys are sections in TOML and are not read; ") + kTomlShape);
    std::string folded = name;
    std::replace(folded.begin(), folded.end(), '_', '-');
    const CLI::Option* opt = app.get_option_no_throw("--" + folded);
    if (opt == nullptr || opt->get_lnames().empty()) {
      std::string hint = foreign_name_hint(name, known, program);
      if (hint.empty()) {
        const std::string near = closest_flag("--" + folded, known);
        hint = near.empty() ? "see " + program + " --help for the names (a flag without its dashes)"
                            : "did you mean " + near.substr(near.find_first_not_of('-')) + "?";
      }
      refuse(where, name + " is not a " + program + " option; " + hint);
    }
    if (!opt->get_configurable()) refuse(where, name + " cannot be set in a --config file; pass it as a flag");
    const std::string canonical = opt->get_lnames().front();
    if (!seen.insert(canonical).second)
      refuse(where, canonical + " is set twice (aliases and snake_case count as the same name); keep one");
    out.emplace_back(canonical, value);
  }
  return out;
}

namespace {

// One DeepSpeed leaf as a TOML line through `line` (flag, value, path); refuses a value tandem cannot
// take; false for a key tandem does not have.
bool deepspeed_leaf(const std::string& path, const json& v,
                    const std::function<void(const std::string&, const std::string&, const std::string&)>& line) {
  const std::string where = "DeepSpeed key " + path;
  if (auto d = deepspeed_direct().find(path); d != deepspeed_direct().end()) {
    const bool numbers = v.is_number() || (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) {
                                             return x.is_number();
                                           }));
    if (!numbers) refuse(where, "is " + v.dump() + "; tandem needs the number written out (\"auto\" is the "
                                "Hugging Face Trainer's fill-in)");
    line(d->second, v.dump(), path);
  } else if (path == "bf16.enabled" || path == "fp16.enabled") {
    if (!v.is_boolean()) refuse(where, "must be true or false");
    if (v.get<bool>()) line("amp", "\"" + path.substr(0, 4) + "\"", path);
  } else if (path == "optimizer.type") {
    std::string t = v.is_string() ? v.get<std::string>() : v.dump();
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    // DeepSpeed's Adam is AdamW unless adam_w_mode is false (ADAM_W_MODE_DEFAULT = True).
    const std::map<std::string, std::string> types{{"adam", "adamw"}, {"adamw", "adamw"}, {"lamb", "lamb"},
                                                   {"sgd", "sgd"}};
    auto it = types.find(t);
    if (it == types.end()) refuse(where, v.dump() + " has no tandem optimizer; tandem has Adam/AdamW, Lamb and SGD");
    line("optimizer", "\"" + it->second + "\"", path);
  } else if (path == "scheduler.type") {
    auto it = v.is_string() ? kSchedulers.find(v.get<std::string>()) : kSchedulers.end();
    if (it == kSchedulers.end())
      refuse(where, v.dump() + " is not read; tandem reads WarmupLR and WarmupDecayLR (for a cosine or step "
                               "decay pass --lr-scheduler as a flag)");
    line("lr-scheduler", "\"" + it->second + "\"", path);
  } else if (path == "scheduler.params.warmup_type") {
    if (v != "linear") refuse(where, "is " + v.dump() + "; tandem warms up linearly only (\"linear\")");
  } else if (path == "scheduler.params.warmup_min_lr") {
    if (!v.is_number() || v.get<double>() != 0)
      refuse(where, "is " + v.dump() + "; tandem's warmup starts at 0 (write 0 or leave the key out)");
  } else if (path == "optimizer.params.adam_w_mode") {
    if (v != true) refuse(where, "false (Adam with L2 in the gradient) has no tandem optimizer; tandem's is AdamW");
  } else {
    return false;
  }
  return true;
}

// The refusal of the keys tandem does not have, naming the ones it reads.
[[noreturn]] void refuse_deepspeed_keys(const std::vector<std::string>& refused) {
  std::string names;
  for (const std::string& r : refused) names += (names.empty() ? "" : ", ") + r;
  std::string read;
  for (const auto& [path, flag] : deepspeed_direct()) read += path + ", ";
  refuse("the --config file", "DeepSpeed key(s) that tandem does not have: " + names + ". Remove them (" +
                                  "train_batch_size: tandem's global batch is --batch-size x --grad-accum-steps "
                                  "x ranks). Read are: " + read + "bf16.enabled, fp16.enabled, optimizer.type, "
                                  "scheduler.type (WarmupLR, WarmupDecayLR), scheduler.params.warmup_type, "
                                  "scheduler.params.warmup_min_lr");
}

// What the keys say together: one 16-bit precision; DeepSpeed's scheduler defaults that tandem does
// not share written out; no scheduler means a constant LR (appended to `toml`).
void check_deepspeed_together(std::map<std::string, json>& got, std::ostringstream& toml) {
  if (got.count("bf16.enabled") && got.count("fp16.enabled") && got["bf16.enabled"] == true &&
      got["fp16.enabled"] == true)
    refuse("the --config file", "bf16.enabled and fp16.enabled are both true; enable one");
  if (got.count("scheduler.type")) {
    // DeepSpeed's defaults that tandem does not share must be written out, not assumed.
    if (got.count("scheduler.params.warmup_num_steps") && !got.count("scheduler.params.warmup_type"))
      refuse("DeepSpeed key scheduler.params.warmup_type", "is missing, and DeepSpeed's default is \"log\"; tandem "
                                                           "warms up linearly: add \"warmup_type\": \"linear\"");
    if (!got.count("scheduler.params.warmup_max_lr"))
      refuse("DeepSpeed key scheduler.params.warmup_max_lr", "is missing, and DeepSpeed's default (0.001) is not "
                                                             "the optimizer's lr: write the peak LR out");
    if (got.count("optimizer.params.lr") && got["optimizer.params.lr"] != got["scheduler.params.warmup_max_lr"])
      refuse("DeepSpeed key scheduler.params.warmup_max_lr", "differs from optimizer.params.lr; tandem has one "
                                                             "peak LR (--lr): make them equal");
  } else {
    // No scheduler in DeepSpeed means a constant LR from the first step.
    toml << "lr-scheduler = \"constant\"  # DeepSpeed: no scheduler\nlr-warmup-steps = 0  # DeepSpeed: no scheduler\n";
  }
}

}  // namespace

std::string deepspeed_to_toml(const std::string& json_text) {
  json ds;
  try {
    ds = json::parse(json_text);
  } catch (const json::exception& e) {
    refuse("the --config file", std::string("it starts with '{' but is not valid JSON (") + e.what() + "); " +
                                    kTomlShape);
  }
  if (!ds.is_object()) refuse("the --config file", std::string("a JSON config must be one object; ") + kTomlShape);
  std::vector<std::pair<std::string, json>> leaves;
  flatten(ds, "", leaves);
  std::ostringstream toml;
  std::vector<std::string> refused;
  std::map<std::string, json> got;  // every leaf, for the cross-checks
  for (const auto& [path, v] : leaves) got[path] = v;
  auto line = [&](const std::string& flag, const std::string& value, const std::string& path) {
    toml << flag << " = " << value << "  # DeepSpeed " << path << "\n";
  };
  for (const auto& [path, v] : leaves) {
    // warmup_max_lr and optimizer.params.lr are one flag (--lr), checked equal below: one line.
    if (path == "scheduler.params.warmup_max_lr" && got.count("optimizer.params.lr")) continue;
    if (!deepspeed_leaf(path, v, line)) refused.push_back(path);
  }
  if (!refused.empty()) refuse_deepspeed_keys(refused);
  check_deepspeed_together(got, toml);
  return toml.str();
}

std::vector<CLI::ConfigItem> StrictConfig::from_config(std::istream& input) const {
  const std::string text((std::istreambuf_iterator<char>(input)), std::istreambuf_iterator<char>());
  std::string file = "the --config file";
  if (const CLI::Option* c = app_->get_config_ptr(); c != nullptr && !c->results().empty())
    file = c->results().front();
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text[first] == '{';
  std::string toml;
  try {
    toml = is_json ? deepspeed_to_toml(text) : text;
  } catch (const CLI::ConfigError& e) {
    throw CLI::ConfigError(file + ": " + e.what());
  }
  std::ostringstream normalised;
  for (const auto& [name, value] : read_toml_config(toml, *app_, program_, file))
    normalised << name << " = " << value << "\n";
  std::istringstream again(normalised.str());
  return CLI::ConfigTOML::from_config(again);
}

namespace {

// An option's value as given, else its default ("" parts dropped); `given` says which.
std::vector<std::string> value_of(const CLI::App& app, const std::string& flag, bool& given) {
  given = false;
  const CLI::Option* o = app.get_option_no_throw(flag);
  if (o == nullptr) return {};
  given = o->count() > 0;
  if (given) return o->results();
  std::string d = o->get_default_str();
  d.erase(std::remove_if(d.begin(), d.end(), [](char c) { return c == '[' || c == ']' || c == '"'; }), d.end());
  std::vector<std::string> out;
  std::istringstream in(d);
  for (std::string part; std::getline(in, part, ',');)
    if (!trim(part).empty()) out.push_back(trim(part));
  return out;
}

}  // namespace

std::string deepspeed_config(const CLI::App& app, std::vector<std::string>& left_out) {
  json ds = json::object();
  std::set<std::string> used;  // flags written into `ds`
  auto number = [&](const std::string& flag, bool integer, json& into) -> bool {
    bool given = false;
    const std::vector<std::string> v = value_of(app, "--" + flag, given);
    if (v.size() != 1) return false;
    used.insert(flag);
    into = integer ? json(std::stoll(v[0])) : json(std::stod(v[0]));
    return true;
  };
  number("batch-size", true, ds["train_micro_batch_size_per_gpu"]);
  number("grad-accum-steps", true, ds["gradient_accumulation_steps"]);
  if (!number("zero", true, ds["zero_optimization"]["stage"])) ds.erase("zero_optimization");
  number("clip-grad-norm", false, ds["gradient_clipping"]);
  number("log-every", true, ds["steps_per_print"]);
  bool given = false;
  const std::vector<std::string> amp = value_of(app, "--amp", given);
  used.insert("amp");
  if (!amp.empty() && amp[0] != "off") ds[amp[0]]["enabled"] = true;
  const std::vector<std::string> opt = value_of(app, "--optimizer", given);
  used.insert("optimizer");
  const std::string type = opt.empty() ? "adamw" : opt[0];
  json& o = ds["optimizer"];
  o["type"] = type == "sgd" ? "SGD" : type == "lamb" ? "Lamb" : "AdamW";
  number("lr", false, o["params"]["lr"]);
  number("weight-decay", false, o["params"]["weight_decay"]);
  if (type == "sgd") {
    if (!number("momentum", false, o["params"]["momentum"])) o["params"].erase("momentum");
  } else {
    const std::vector<std::string> betas = value_of(app, "--betas", given);
    used.insert("betas");
    if (betas.size() == 2) o["params"]["betas"] = {std::stod(betas[0]), std::stod(betas[1])};
    const std::vector<std::string> eps = value_of(app, "--eps", given);
    used.insert("eps");
    if (eps.size() == 1 && std::stod(eps[0]) > 0) o["params"]["eps"] = std::stod(eps[0]);
  }
  // The schedule: WarmupLR (constant) or WarmupDecayLR (linear to 0 at --steps); others stay flags.
  const std::vector<std::string> sched = value_of(app, "--lr-scheduler", given);
  const std::string s = sched.empty() ? "" : sched[0];
  json warm;
  bool warm_given = false;
  const std::vector<std::string> w = value_of(app, "--lr-warmup-steps", warm_given);
  // -1: the trainer's own default warmup (a share of the run), which DeepSpeed cannot say.
  const int64_t warmup = w.size() == 1 ? std::stoll(w[0]) : 0;
  const bool has_steps = value_of(app, "--steps", given).size() == 1 && given;
  if (warmup >= 0 && (s == "constant" || (s == "linear" && has_steps))) {
    json& p = ds["scheduler"]["params"];
    ds["scheduler"]["type"] = s == "constant" ? "WarmupLR" : "WarmupDecayLR";
    p["warmup_num_steps"] = warmup, p["warmup_type"] = "linear", p["warmup_min_lr"] = 0;
    p["warmup_max_lr"] = o["params"]["lr"];
    if (s == "linear") number("steps", true, p["total_num_steps"]);
    used.insert("lr-scheduler"), used.insert("lr-warmup-steps");
  } else {
    // Read back, a JSON without a scheduler means a constant LR: say so even for the defaults.
    left_out.push_back("--lr-scheduler " + s + " (with its warmup; DeepSpeed's WarmupLR/WarmupDecayLR cannot say it)");
    used.insert("lr-scheduler"), used.insert("lr-warmup-steps");
  }
  // What DeepSpeed has no key for, among the options given.
  for (const CLI::Option* opt_ptr : app.get_options({})) {
    if (opt_ptr->count() == 0 || !opt_ptr->get_configurable() || opt_ptr->get_lnames().empty()) continue;
    const std::string name = opt_ptr->get_lnames().front();
    if (used.count(name)) continue;
    std::string v;
    for (const std::string& r : opt_ptr->results()) v += (v.empty() ? " " : ",") + r;
    left_out.push_back("--" + name + v);
  }
  return ds.dump(2) + "\n";
}

}  // namespace tandem::trainer
