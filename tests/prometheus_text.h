// Reading one figure out of Prometheus text (a /metrics answer), for tests and
// benchmarks. Header-only.
#ifndef OUTBOX_TESTS_PROMETHEUS_TEXT_H_
#define OUTBOX_TESTS_PROMETHEUS_TEXT_H_

#include <cstdlib>
#include <string>
#include <vector>

namespace outbox::testing {

// The sum of the samples that `query` names, or -1 when none does. `query` is a
// metric name ("outbox_relay_claims_total") or a name with labels
// ("outbox_relay_rows_failed_total{reason=\"fatal\"}"): a sample matches when
// its name is that name and its labels include each label given, whatever
// others it has (transport="kafka", ...).
inline double PrometheusSample(const std::string& body, const std::string& query) {
  const auto brace = query.find('{');
  const std::string name = query.substr(0, brace);
  std::vector<std::string> wanted;
  if (brace != std::string::npos) {
    const std::string labels = query.substr(brace + 1, query.rfind('}') - brace - 1);
    for (std::size_t at = 0; at < labels.size();) {
      const auto close = labels.find('"', labels.find('"', at) + 1);  // a value's closing quote
      wanted.push_back(labels.substr(at, close + 1 - at));
      at = close + 2;  // past the quote and the comma
    }
  }
  double sum = 0;
  bool found = false;
  for (std::size_t pos = 0; pos < body.size();) {
    std::size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    const std::string line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const std::string labels = next == '{' ? line.substr(name.size(), line.find('}') - name.size() + 1) : "";
    bool all = true;
    for (const std::string& w : wanted) {
      if (labels.find("{" + w) == std::string::npos && labels.find("," + w) == std::string::npos) all = false;
    }
    if (!all) continue;
    sum += std::atof(line.c_str() + line.rfind(' ') + 1);
    found = true;
  }
  return found ? sum : -1;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_PROMETHEUS_TEXT_H_
