// tests/support/app_run.h: running tandem's app binaries from an end-to-end test.
//
// app("train_imagenet") is the binary's path under TANDEM_TEST_BINARY_DIR (tests/CMakeLists.txt
// sets it; "." otherwise). run_command() runs a shell command and returns its exit status and its
// merged output, so a failing test can print what the app said. Header-only: a test that includes it
// needs nothing else linked.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tandem::testing {

inline std::string app(const std::string& name) {
  const char* d = std::getenv("TANDEM_TEST_BINARY_DIR");
  return std::string(d ? d : ".") + "/apps/" + name;
}

struct CommandResult {
  int status = -1;     // the exit code, or 128 + the signal that ended it
  std::string output;  // stdout and stderr as the command wrote them (add 2>&1 to merge them)
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) r.output.append(buf, n);
  const int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace tandem::testing
