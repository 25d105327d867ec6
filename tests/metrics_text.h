// Checks on the Prometheus text a registry renders (include/outbox/metrics.h).
#ifndef OUTBOX_TESTS_METRICS_TEXT_H_
#define OUTBOX_TESTS_METRICS_TEXT_H_

#include <gtest/gtest.h>

#include <charconv>
#include <cstdlib>
#include <regex>
#include <string>

namespace outbox::testing {

// Every histogram bucket bound in `text` (its `le` labels but +Inf) is the
// shortest decimal that reads back as the same double, as the Prometheus
// clients print it: `0.0025`, never `0.0025000000000000001`. Returns how many
// bounds it checked.
inline int ExpectShortestBucketBounds(const std::string& text) {
  static const std::regex kBound(R"re(_bucket\{(?:[^}]*,)?le="([^"]*)"\})re");
  int checked = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kBound); it != std::sregex_iterator(); ++it) {
    const std::string le = (*it)[1];
    if (le == "+Inf") continue;
    const double v = std::strtod(le.c_str(), nullptr);
    char shortest[64];
    const auto r = std::to_chars(shortest, shortest + sizeof shortest, v);
    EXPECT_EQ(le, std::string(shortest, r.ptr)) << "in " << it->str();
    ++checked;
  }
  return checked;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_METRICS_TEXT_H_
