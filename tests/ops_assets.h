// The metric names that the shipped operations assets use — the alert rules
// (packaging/prometheus/outbox-alerts.yml) and the Grafana dashboard
// (packaging/grafana/outbox-dashboard.json) — and the check that a running
// process exports each of them under that name.
#ifndef OUTBOX_TESTS_OPS_ASSETS_H_
#define OUTBOX_TESTS_OPS_ASSETS_H_

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace outbox::testing {

inline std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(OUTBOX_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << "cannot read " << relative;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every outbox_* name the alert rules and the dashboard mention, with a
// histogram's _bucket/_sum/_count suffix kept (those are sample names too).
inline std::set<std::string> MetricNamesInShippedAssets() {
  // Tokens "outbox_[a-z0-9_]*" not preceded by a word character. (Scanned by
  // hand: std::regex trips GCC 12's -Wmaybe-uninitialized in optimized builds.)
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  std::set<std::string> names;
  for (const char* f : {"packaging/prometheus/outbox-alerts.yml", "packaging/grafana/outbox-dashboard.json"}) {
    const std::string text = ReadSourceFile(f);
    for (std::size_t at = text.find("outbox_"); at != std::string::npos; at = text.find("outbox_", at + 1)) {
      if (at > 0 && word(text[at - 1])) continue;
      std::size_t end = at + 7;
      while (end < text.size() && ((text[end] >= 'a' && text[end] <= 'z') ||
                                   (text[end] >= '0' && text[end] <= '9') || text[end] == '_')) {
        ++end;
      }
      std::string name = text.substr(at, end - at);
      while (!name.empty() && name.back() == '_') name.pop_back();
      if (name.size() > 7) names.insert(name);
    }
  }
  return names;
}

// The sample names in a Prometheus text exposition.
inline std::set<std::string> ExportedSampleNames(const std::string& body) {
  std::set<std::string> names;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return names;
}

// The asset names with `prefix` (or without it, when `exclude`) that `body`
// does not export.
inline std::set<std::string> MissingFromExport(const std::string& body, const std::string& prefix,
                                               bool exclude) {
  const std::set<std::string> exported = ExportedSampleNames(body);
  std::set<std::string> missing;
  for (const std::string& n : MetricNamesInShippedAssets()) {
    if ((n.rfind(prefix, 0) == 0) == exclude) continue;
    if (!exported.count(n)) missing.insert(n);
  }
  return missing;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_OPS_ASSETS_H_
