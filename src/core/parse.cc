#include "outbox/parse.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace outbox {
namespace {

Status Bad(std::string_view what, std::string_view value, const std::string& want) {
  return Status::InvalidArgument(std::string(what) + ": invalid value \"" + std::string(value) +
                                 "\" (" + want + ")");
}

}  // namespace

Result<long long> ParseInteger(std::string_view what, std::string_view value, long long lo,
                               long long hi) {
  const std::string v(value);
  const std::string want = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  // strtoll skips leading blanks and accepts a sign; only digits after an optional '-'.
  if (v.empty() || !(v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))) return Bad(what, value, want);
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0' || n < lo || n > hi) {
    return Bad(what, value, want);
  }
  return n;
}

Result<double> ParseNumber(std::string_view what, std::string_view value, double lo, double hi) {
  const std::string v(value);
  const std::string want = "a number in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (v.empty() || !(v[0] == '-' || v[0] == '.' || (v[0] >= '0' && v[0] <= '9'))) {
    return Bad(what, value, want);
  }
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(d) || d < lo || d > hi) {
    return Bad(what, value, want);
  }
  return d;
}

Result<std::chrono::seconds> ParseSeconds(std::string_view what, std::string_view value,
                                          long long hi_seconds) {
  const std::string want = "seconds, or a whole number with a unit s, m, h or d (\"7d\"), at most " +
                           std::to_string(hi_seconds) + " s";
  if (value.empty()) return Bad(what, value, want);
  long long unit = 1;
  std::string_view digits = value;
  switch (value.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: unit = 0; break;
  }
  if (unit != 0) {
    digits.remove_suffix(1);
  } else {
    unit = 1;
  }
  if (digits.empty() || digits[0] == '-') return Bad(what, value, want);
  auto n = ParseInteger(what, digits, 0, hi_seconds / unit);
  if (!n.ok()) return Bad(what, value, want);
  return std::chrono::seconds(*n * unit);
}

}  // namespace outbox
