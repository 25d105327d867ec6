// DescribeConfigs for the mock (topic_configs.h): the table, the request
// parser and the response writer. Kafka's wire format, big-endian; v0 only.
#include "topic_configs.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

namespace outbox::mock_kafka {
namespace {

constexpr std::int8_t kResourceTopic = 2;
constexpr std::int16_t kInvalidRequest = 42;

std::mutex g_mu;
std::map<std::string, std::map<std::string, std::string>> g_configs;  // GUARDED_BY(g_mu)

// Kafka's defaults for what a topic is asked about here.
const std::map<std::string, std::string>& Defaults() {
  static const std::map<std::string, std::string> kDefaults = {
      {"cleanup.policy", "delete"},
      {"retention.bytes", "-1"},
      {"retention.ms", "604800000"},
      {"segment.ms", "604800000"}};
  return kDefaults;
}

class In {
 public:
  explicit In(const std::string& b) : b_(b) {}
  bool I8(std::int8_t& v) {
    if (at_ + 1 > b_.size()) return false;
    v = static_cast<std::int8_t>(b_[at_++]);
    return true;
  }
  bool I16(std::int16_t& v) {
    if (at_ + 2 > b_.size()) return false;
    v = static_cast<std::int16_t>((Byte(0) << 8) | Byte(1));
    at_ += 2;
    return true;
  }
  bool I32(std::int32_t& v) {
    if (at_ + 4 > b_.size()) return false;
    v = static_cast<std::int32_t>((static_cast<std::uint32_t>(Byte(0)) << 24) |
                                  (static_cast<std::uint32_t>(Byte(1)) << 16) |
                                  (static_cast<std::uint32_t>(Byte(2)) << 8) | Byte(3));
    at_ += 4;
    return true;
  }
  // A nullable string: `null` says it was null (length -1).
  bool Str(std::string& s, bool* null = nullptr) {
    std::int16_t n = 0;
    if (!I16(n)) return false;
    if (null) *null = n < 0;
    if (n < 0) return true;
    if (at_ + static_cast<std::size_t>(n) > b_.size()) return false;
    s = b_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  std::size_t at() const { return at_; }

 private:
  std::uint32_t Byte(std::size_t i) const { return static_cast<unsigned char>(b_[at_ + i]); }
  const std::string& b_;
  std::size_t at_ = 0;
};

void I8(std::string& out, std::int8_t v) { out += static_cast<char>(v); }
void I16(std::string& out, std::int16_t v) {
  const auto u = static_cast<std::uint16_t>(v);
  out += static_cast<char>(u >> 8);
  out += static_cast<char>(u & 0xff);
}
void I32(std::string& out, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((u >> shift) & 0xff);
}
void Str(std::string& out, const std::string& s) {
  I16(out, static_cast<std::int16_t>(s.size()));
  out += s;
}
void NullStr(std::string& out) { I16(out, -1); }

std::string Frame(const std::string& body) {
  std::string out;
  I32(out, static_cast<std::int32_t>(body.size()));
  return out + body;
}

}  // namespace

void SetTopicConfig(const std::string& topic, const std::string& name, const std::string& value) {
  std::lock_guard<std::mutex> l(g_mu);
  g_configs[topic][name] = value;
}

std::optional<std::string> AnswerDescribeConfigs(const std::string& request) {
  In in(request);
  std::int32_t size = 0, correlation = 0, resources = 0;
  std::int16_t api = 0, version = 0;
  std::string client;
  if (!in.I32(size) || static_cast<std::size_t>(size) + 4 != request.size() || !in.I16(api) ||
      api != kDescribeConfigs || !in.I16(version) || version != 0 || !in.I32(correlation) ||
      !in.Str(client) || !in.I32(resources) || resources < 0) {
    return std::nullopt;
  }
  std::string body;
  I32(body, correlation);
  I32(body, 0);  // throttle_time_ms
  I32(body, resources);
  for (std::int32_t r = 0; r < resources; ++r) {
    std::int8_t type = 0;
    std::string name;
    std::int32_t names = 0;
    if (!in.I8(type) || !in.Str(name) || !in.I32(names)) return std::nullopt;
    std::vector<std::string> asked;
    for (std::int32_t i = 0; i < names; ++i) {
      std::string n;
      if (!in.Str(n)) return std::nullopt;
      asked.push_back(n);
    }
    if (type != kResourceTopic) {  // broker and other resources: not modelled
      I16(body, kInvalidRequest);
      Str(body, "outbox-mock-kafka answers DescribeConfigs for topics only");
      I8(body, type);
      Str(body, name);
      I32(body, 0);
      continue;
    }
    std::map<std::string, std::pair<std::string, bool>> values;  // name -> (value, is default)
    for (const auto& [k, v] : Defaults()) values[k] = {v, true};
    {
      std::lock_guard<std::mutex> l(g_mu);
      if (auto it = g_configs.find(name); it != g_configs.end()) {
        for (const auto& [k, v] : it->second) values[k] = {v, false};
      }
    }
    std::vector<std::pair<std::string, std::pair<std::string, bool>>> entries;
    for (const auto& kv : values) {
      if (names < 0 || std::find(asked.begin(), asked.end(), kv.first) != asked.end()) {
        entries.push_back(kv);
      }
    }
    I16(body, 0);  // error_code
    NullStr(body);
    I8(body, type);
    Str(body, name);
    I32(body, static_cast<std::int32_t>(entries.size()));
    for (const auto& [k, v] : entries) {
      Str(body, k);
      Str(body, v.first);
      I8(body, 0);                   // read_only
      I8(body, v.second ? 1 : 0);    // is_default
      I8(body, 0);                   // is_sensitive
    }
  }
  return Frame(body);
}

std::optional<std::string> WithDescribeConfigs(const std::string& response, std::int16_t version) {
  if (version < 0 || version > 2) return std::nullopt;
  In in(response);
  std::int32_t size = 0, correlation = 0, count = 0;
  std::int16_t error = 0;
  if (!in.I32(size) || static_cast<std::size_t>(size) + 4 != response.size() ||
      !in.I32(correlation) || !in.I16(error) || error != 0 || !in.I32(count) || count < 0) {
    return std::nullopt;
  }
  const std::size_t entries_end = in.at() + static_cast<std::size_t>(count) * 6;
  if (entries_end + (version >= 1 ? 4 : 0) != response.size()) return std::nullopt;
  for (std::int32_t i = 0; i < count; ++i) {
    std::int16_t key = 0, lo = 0, hi = 0;
    if (!in.I16(key) || !in.I16(lo) || !in.I16(hi)) return std::nullopt;
    if (key == kDescribeConfigs) return std::nullopt;
  }
  std::string body;
  I32(body, correlation);
  I16(body, error);
  I32(body, count + 1);
  body.append(response, 14, entries_end - 14);
  I16(body, kDescribeConfigs);
  I16(body, 0);  // min version
  I16(body, 0);  // max version
  body.append(response, entries_end, std::string::npos);  // throttle_time_ms (v1+)
  return Frame(body);
}

}  // namespace outbox::mock_kafka
