// RFC 3339 time stamps, UTC, as every part of outbox writes them (logs,
// message headers). Thread-safe.
#ifndef OUTBOX_TIME_H_
#define OUTBOX_TIME_H_

#include <chrono>
#include <string>

namespace outbox {

// "2026-11-30T16:09:53Z" (digits 0), ".464Z" (3), ".464546Z" (6).
// REQUIRES: digits is 0, 3 or 6; a time after 1970.
std::string FormatRfc3339(std::chrono::system_clock::time_point tp, int digits);

}  // namespace outbox

#endif  // OUTBOX_TIME_H_
