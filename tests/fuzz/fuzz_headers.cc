// libFuzzer target: event headers read back from the outbox (jsonb text) by the
// relay, and the round trip through the writer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "headers_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto h = outbox::store_common::ParseHeadersJson(text);
  if (h.ok()) {
    auto again = outbox::store_common::ParseHeadersJson(outbox::store_common::HeadersToJson(*h));
    if (!again.ok()) __builtin_trap();  // what we write, we must read back
  }
  return 0;
}
