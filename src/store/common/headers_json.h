// Event headers as stored in the outbox (a jsonb object of strings) and read
// back by the relay. Shared by the stores (internal); fuzzed (tests/fuzz).
#ifndef OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_
#define OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"

namespace outbox::store_common {

// Parses `{"name":"value",...}`; anything else is an Internal error.
Result<std::vector<Header>> ParseHeadersJson(const std::string& json_text);

// The inverse, as enqueue writes it.
std::string HeadersToJson(const std::vector<Header>& headers);

// A consumed message's headers (bytes, not necessarily text) as one blob, as
// the inboxes' parked queues keep them: per header, 4-byte big-endian lengths
// and the bytes of name and value.
std::string EncodeInboxHeaders(const std::map<std::string, std::string>& headers);
Result<std::map<std::string, std::string>> DecodeInboxHeaders(std::string_view in);

}  // namespace outbox::store_common

#endif  // OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_
