#include "headers_json.h"

#include <nlohmann/json.hpp>

namespace outbox::store_common {

Result<std::vector<Header>> ParseHeadersJson(const std::string& json_text) {
  std::vector<Header> out;
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Internal("headers column is not a JSON object: " + json_text.substr(0, 200));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      return Status::Internal("header \"" + it.key() + "\" is not a string");
    }
    out.push_back(Header{it.key(), it.value().get<std::string>()});
  }
  return out;
}

std::string HeadersToJson(const std::vector<Header>& headers) {
  nlohmann::json j = nlohmann::json::object();
  for (const Header& h : headers) j[h.name] = h.value;
  // Invalid UTF-8 never reaches here (ValidateEvent), but do not throw if it does.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
void PutLength(std::string& out, std::size_t n) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
}
}  // namespace

std::string EncodeInboxHeaders(const std::map<std::string, std::string>& headers) {
  std::string out;
  for (const auto& [k, v] : headers) {
    PutLength(out, k.size());
    out += k;
    PutLength(out, v.size());
    out += v;
  }
  return out;
}

Result<std::map<std::string, std::string>> DecodeInboxHeaders(std::string_view in) {
  std::map<std::string, std::string> out;
  auto take = [&](std::string& field) -> bool {
    if (in.size() < 4) return false;
    std::size_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(in[static_cast<std::size_t>(i)]);
    in.remove_prefix(4);
    if (in.size() < n) return false;
    field.assign(in.substr(0, n));
    in.remove_prefix(n);
    return true;
  };
  while (!in.empty()) {
    std::string k, v;
    if (!take(k) || !take(v)) return Status::Internal("inbox_parked.headers: malformed");
    out[std::move(k)] = std::move(v);
  }
  return out;
}

}  // namespace outbox::store_common
