// core/check.cpp: formats tandem::Error messages as "[rank R] file:line: message".
#include "core/check.h"

#include <atomic>
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

void throw_error(const char* file, int line, const std::string& what) {
  std::string f(file);
  // Keep the path from the project root (core/..., dist/...) so messages stay short.
  for (const char* top : {"/core/", "/layers/", "/optim/", "/dist/", "/data/", "/apps/", "/tests/"}) {
    auto pos = f.rfind(top);
    if (pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  }
  std::string prefix = g_rank.load() >= 0 ? "[rank " + std::to_string(g_rank.load()) + "] " : "";
  throw Error(prefix + f + ":" + std::to_string(line) + ": " + what);
}
}  // namespace tandem
