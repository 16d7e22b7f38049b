#include <cstdarg>
#include <cstdio>
#include <string>

#include "kverify/gates/verdict.hpp"

namespace kverify::gates {

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

}  // namespace kverify::gates
