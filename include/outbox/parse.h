// Strict parsing of numbers and durations from flags, config files and the
// environment: a value is either read exactly as written or rejected with an
// error naming where it came from — never misread ("abc" is not 0, "7d" is not
// 7 seconds, "nan" is not a number).
//
// Thread-safety: pure functions.
#ifndef OUTBOX_PARSE_H_
#define OUTBOX_PARSE_H_

#include <chrono>
#include <string>
#include <string_view>

#include "outbox/status.h"

namespace outbox {

// A base-10 integer in [lo, hi], the whole string. `what` names the flag or key
// in the error ("--batch", "config key relay.workers").
Result<long long> ParseInteger(std::string_view what, std::string_view value, long long lo,
                               long long hi);

// A finite decimal number in [lo, hi] (NaN and infinities are rejected).
Result<double> ParseNumber(std::string_view what, std::string_view value, double lo, double hi);

// A duration in seconds: an integer with an optional unit, s (default), m, h or d
// ("90", "90s", "15m", "12h", "7d"); in [0, hi_seconds].
Result<std::chrono::seconds> ParseSeconds(std::string_view what, std::string_view value,
                                          long long hi_seconds);

}  // namespace outbox

#endif  // OUTBOX_PARSE_H_
