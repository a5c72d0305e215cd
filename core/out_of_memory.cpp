// core/out_of_memory.cpp: OutOfMemory thrown with every Error's prefix, and byte counts as messages
// print them (see out_of_memory.h; available_memory lives with the allocators, core/storage.cpp).
#include "core/out_of_memory.h"

#include <cstdio>

namespace tandem {

void throw_out_of_memory(const char* file, int line, const std::string& what) {
  // throw_error writes the "[rank R] file:line: " prefix (core/check.cpp); the message is kept, the
  // type becomes the one a program catches to name its batch-size flag.
  try {
    throw_error(file, line, what);
  } catch (const Error& e) {
    throw OutOfMemory(e.what());
  }
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
