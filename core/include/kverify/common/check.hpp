/// @file check.hpp
/// @brief Error type and the KV_CHECK macro of the kverify core.
///
/// Every failed check throws kverify::Error whose message is the formatted explanation with the
/// offending values, followed by where it was raised (file name and line), e.g.
///   numel 6 vs 8 [kverify compare.cpp:41]
/// The reason comes first because users read it; the condition text stays in the source.
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
[[noreturn]] inline void fail_check(const char* file, int line, const char* /*cond*/, const char* fmt, ...) {
  char msg[768];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/' || *p == '\\') base = p + 1;
  char full[1024];
  std::snprintf(full, sizeof(full), "%s [kverify %s:%d]", msg, base, line);
  throw Error(full);
}
}  // namespace detail

}  // namespace kverify

/// Throw kverify::Error with a printf-formatted message and the file name and line.
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
