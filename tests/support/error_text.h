// tests/support/error_text.h: the text of an error, for tests that check what a refusal says.
#pragma once
#include <exception>
#include <functional>
#include <string>

namespace tandem::testing {

// The message of the exception `f` throws (tandem's Error or any std::exception); "" when it
// throws none - so CHECK(error_of(...) == "") reads "no error".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace tandem::testing
