// The metric names that the shipped operations assets use — the alert rules
// (packaging/prometheus/outbox-alerts.yml) and the Grafana dashboard
// (packaging/grafana/outbox-dashboard.json) — and the check that a running
// process exports each of them under that name.
#ifndef OUTBOX_TESTS_OPS_ASSETS_H_
#define OUTBOX_TESTS_OPS_ASSETS_H_

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
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
  std::set<std::string> names;
  const std::regex name(R"(\boutbox_[a-z0-9_]*[a-z0-9])");
  for (const char* f : {"packaging/prometheus/outbox-alerts.yml", "packaging/grafana/outbox-dashboard.json"}) {
    const std::string text = ReadSourceFile(f);
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
      names.insert(it->str());
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
