// core/check.cpp: formats tandem::Error messages as "[rank R] file:line: message".
#include "core/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/out_of_memory.h"  // defines: OutOfMemory (thrown here with the same prefix)

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

void throw_out_of_memory(const char* file, int line, const std::string& what) {
  throw OutOfMemory(located(file, line, what));
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  char b[32];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return b;
}
}  // namespace tandem
