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

}  // namespace outbox::store_common
