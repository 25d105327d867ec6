// Event headers as stored in the outbox (a jsonb object of strings) and read
// back by the relay. Shared by the stores (internal); fuzzed (tests/fuzz).
#ifndef OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_
#define OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_

#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"

namespace outbox::store_common {

// Parses `{"name":"value",...}`; anything else is an Internal error.
Result<std::vector<Header>> ParseHeadersJson(const std::string& json_text);

// The inverse, as enqueue writes it.
std::string HeadersToJson(const std::vector<Header>& headers);

}  // namespace outbox::store_common

#endif  // OUTBOX_SRC_STORE_COMMON_HEADERS_JSON_H_
