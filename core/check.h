// core/check.h: the one place where errors are raised.
//
// Every failure in tandem becomes a tandem::Error carrying file:line, the rank that saw it (set by
// dist::init, -1 before) and a sentence a user can act on. The library-specific macros
// (CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK, NCCL_CHECK, MPI_CHECK) decode the status code into its
// name and add the caller's hint. Those macros are only usable in files that include the library's
// header; this file does not include any of them, so CPU-only code can use TANDEM_CHECK freely.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The rank that is reported in every error message. dist::init sets it; -1 means "not distributed".
void set_error_rank(int rank);
int error_rank();

[[noreturn]] void throw_error(const char* file, int line, const std::string& what);

namespace detail {
// Builds a message from any streamable pieces: TANDEM_CHECK(x > 0, "x must be positive, got ", x).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}
}  // namespace detail
}  // namespace tandem

#define TANDEM_THROW(...) ::tandem::throw_error(__FILE__, __LINE__, ::tandem::detail::cat(__VA_ARGS__))

// TANDEM_CHECK(cond, "what was wrong", value, " and what to do")
#define TANDEM_CHECK(cond, ...)                                                                   \
  do {                                                                                            \
    if (!(cond)) [[unlikely]]                                                                     \
      ::tandem::throw_error(__FILE__, __LINE__,                                                   \
                            ::tandem::detail::cat("check failed (" #cond "): ", __VA_ARGS__));   \
  } while (0)

#define CUDA_CHECK(expr, ...)                                                                     \
  do {                                                                                            \
    cudaError_t _e = (expr);                                                                      \
    if (_e != cudaSuccess) [[unlikely]]                                                           \
      ::tandem::throw_error(__FILE__, __LINE__,                                                   \
                            ::tandem::detail::cat(#expr " failed: ", cudaGetErrorName(_e), " (", \
                                                  cudaGetErrorString(_e), "). " __VA_OPT__(, )    \
                                                      __VA_ARGS__));                              \
  } while (0)

namespace tandem {
// TANDEM_SYNC_CHECK=1 (read once): after every kernel launch and every CUDA op, synchronise the
// compute stream and check for a fault, so an illegal address is reported at the launch that made
// it, with file:line, instead of at some later sync or as a "rank did not reach collective" timeout.
// Slow (no overlap at all); for locating faults only. Off by default.
bool sync_check_enabled();
// Synchronises the current device's compute stream and throws naming `file:line` on a fault
// (core/cuda/context.cpp; CUDA builds only).
void sync_check_after(const char* file, int line);
}  // namespace tandem

// After every kernel launch: catches bad launch configurations immediately, where they happen
// (and, with TANDEM_SYNC_CHECK=1, faults inside the kernel too).
#define CUDA_CHECK_LAUNCH(...)                                                               \
  do {                                                                                       \
    CUDA_CHECK(cudaGetLastError() __VA_OPT__(, ) __VA_ARGS__);                               \
    if (::tandem::sync_check_enabled()) ::tandem::sync_check_after(__FILE__, __LINE__);      \
  } while (0)

// A CUDA library call's status: anything but `ok` throws "<text> failed: <describe(status)>. <advice>".
// The callers pass #expr as `text`, so the message shows the call as written.
#define TANDEM_STATUS_CHECK(expr, text, ok, describe, ...)                                        \
  do {                                                                                            \
    const auto _s = (expr);                                                                       \
    if (_s != (ok)) [[unlikely]]                                                                  \
      ::tandem::throw_error(__FILE__, __LINE__,                                                   \
                            ::tandem::detail::cat(text " failed: ", describe(_s), ". "            \
                                                  __VA_OPT__(, ) __VA_ARGS__));                   \
  } while (0)

#define CUBLAS_CHECK(expr, ...) \
  TANDEM_STATUS_CHECK(expr, #expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusName __VA_OPT__(, ) __VA_ARGS__)
#define CUDNN_CHECK(expr, ...) \
  TANDEM_STATUS_CHECK(expr, #expr, CUDNN_STATUS_SUCCESS, cudnnGetErrorString __VA_OPT__(, ) __VA_ARGS__)
#define NCCL_CHECK(expr, ...) TANDEM_STATUS_CHECK(expr, #expr, ncclSuccess, ncclGetErrorString __VA_OPT__(, ) __VA_ARGS__)

#define MPI_CHECK(expr, ...)                                                                      \
  do {                                                                                            \
    int _m = (expr);                                                                              \
    if (_m != MPI_SUCCESS) [[unlikely]] {                                                         \
      char _buf[MPI_MAX_ERROR_STRING];                                                            \
      int _len = 0;                                                                               \
      MPI_Error_string(_m, _buf, &_len);                                                          \
      ::tandem::throw_error(__FILE__, __LINE__,                                                   \
                            ::tandem::detail::cat(#expr " failed: ", std::string(_buf, _len),     \
                                                  ". " __VA_OPT__(, ) __VA_ARGS__));              \
    }                                                                                             \
  } while (0)
