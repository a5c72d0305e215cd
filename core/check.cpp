// core/check.cpp: formats tandem::Error messages as "[rank R] file:line: message".
#include "core/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>


namespace tandem {
namespace {
std::atomic<int> g_rank{-1};
}

bool sync_check_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_SYNC_CHECK");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void set_error_rank(int rank) { g_rank.store(rank); }
int error_rank() { return g_rank.load(); }

namespace {
// "[rank R] core/x.cpp:12: what": the path from the project root, so messages stay short.
std::string located(const char* file, int line, const std::string& what) {
  std::string f(file);
  for (const char* top : {"/core/", "/layers/", "/checkpoint/", "/optim/", "/dist/", "/data/", "/apps/", "/tests/"}) {
    auto pos = f.rfind(top);
    if (pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  }
  std::string prefix = g_rank.load() >= 0 ? "[rank " + std::to_string(g_rank.load()) + "] " : "";
  return prefix + f + ":" + std::to_string(line) + ": " + what;
}
}  // namespace

void throw_error(const char* file, int line, const std::string& what) { throw Error(located(file, line, what)); }

}  // namespace tandem
