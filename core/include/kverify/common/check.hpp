/// @file check.hpp
/// @brief Error type and the KV_CHECK macro of the kverify core.
///
/// Every failed check throws kverify::Error whose message carries the file, the line, the
/// condition and a formatted explanation with the offending values, e.g.
///   core/src/compare.cpp:41: check failed: a.numel() == b.numel() (numel 6 vs 8)
#pragma once

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kverify {

/// Raised by the core for invalid arguments (wrong dtype, shape mismatch, missing CUDA support).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void fail_check(const char* file, int line, const char* cond, const char* fmt, ...) {
  char msg[768];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  char full[1024];
  std::snprintf(full, sizeof(full), "%s:%d: check failed: %s (%s)", file, line, cond, msg);
  throw Error(full);
}
}  // namespace detail

}  // namespace kverify

/// Throw kverify::Error with file, line, the condition text and a printf-formatted message.
#define KV_CHECK(cond, ...)                                                     \
  do {                                                                          \
    if (!(cond)) ::kverify::detail::fail_check(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

/// Marks functions callable from host and device code when compiled by nvcc.
#if defined(__CUDACC__)
#define KV_HD __host__ __device__ __forceinline__
#else
#define KV_HD inline
#endif
