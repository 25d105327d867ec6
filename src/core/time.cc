#include "outbox/time.h"

#include <cstdio>
#include <ctime>

namespace outbox {

std::string FormatRfc3339(std::chrono::system_clock::time_point tp, int digits) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(tp.time_since_epoch()).count();
  const auto secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  const long long frac = us % 1'000'000;
  if (digits == 3) {
    n += std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), ".%03lld", frac / 1000);
  } else if (digits == 6) {
    n += std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), ".%06lld", frac);
  }
  std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), "Z");
  return buf;
}

}  // namespace outbox
