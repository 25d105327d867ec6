#include "outbox/event.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace outbox {
namespace {

bool IsTopicChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

Status CheckText(std::string_view field, const std::string& value, std::size_t max_bytes,
                 bool required) {
  if (required && value.empty()) {
    return Status::InvalidArgument(std::string(field) + " is required and must not be empty");
  }
  if (value.size() > max_bytes) {
    return Status::InvalidArgument(std::string(field) + " is " + std::to_string(value.size()) +
                                   " bytes; the limit is " + std::to_string(max_bytes));
  }
  if (!IsValidText(value)) {
    return Status::InvalidArgument(std::string(field) +
                                   " must be valid UTF-8 text without NUL bytes");
  }
  return Status::Ok();
}

}  // namespace

bool IsValidText(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    // Reject overlong forms, surrogates and code points beyond Unicode.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

Status ValidateEvent(const Event& event, const EventLimits& limits) {
  OUTBOX_RETURN_IF_ERROR(
      CheckText("aggregate_type", event.aggregate_type, limits.max_field_bytes, true));
  for (char c : event.aggregate_type) {
    if (!IsTopicChar(c)) {
      return Status::InvalidArgument(
          "aggregate_type may only contain [A-Za-z0-9._-] (it names the Kafka topic); got \"" +
          event.aggregate_type + "\"");
    }
  }
  OUTBOX_RETURN_IF_ERROR(
      CheckText("aggregate_id", event.aggregate_id, limits.max_field_bytes, true));
  OUTBOX_RETURN_IF_ERROR(CheckText("event_type", event.event_type, limits.max_field_bytes, true));
  if (event.payload.size() > limits.max_payload_bytes) {
    return Status::InvalidArgument("payload is " + std::to_string(event.payload.size()) +
                                   " bytes; the limit is " +
                                   std::to_string(limits.max_payload_bytes) +
                                   " (EventLimits::max_payload_bytes)");
  }
  std::size_t size = event.payload.size() + event.aggregate_id.size();
  for (const Header& h : event.headers) size += h.name.size() + h.value.size();
  if (size > limits.max_event_bytes) {
    return Status::InvalidArgument(
        "event is " + std::to_string(size) + " bytes (payload " +
        std::to_string(event.payload.size()) + " + aggregate_id " +
        std::to_string(event.aggregate_id.size()) + " + headers " +
        std::to_string(size - event.payload.size() - event.aggregate_id.size()) +
        "); the limit is " + std::to_string(limits.max_event_bytes) +
        " (EventLimits::max_event_bytes)");
  }
  if (event.dedup_key) {
    OUTBOX_RETURN_IF_ERROR(CheckText("dedup_key", *event.dedup_key, limits.max_field_bytes, true));
  }
  if (event.headers.size() > limits.max_headers) {
    return Status::InvalidArgument("headers: " + std::to_string(event.headers.size()) +
                                   " headers; the limit is " +
                                   std::to_string(limits.max_headers));
  }
  for (std::size_t i = 0; i < event.headers.size(); ++i) {
    const Header& h = event.headers[i];
    const std::string where = "headers[" + std::to_string(i) + "]";
    if (h.name.empty() || h.name.size() > kMaxHeaderNameBytes) {
      return Status::InvalidArgument(where + ".name must be 1.." +
                                     std::to_string(kMaxHeaderNameBytes) + " bytes");
    }
    for (char c : h.name) {
      if (!IsTopicChar(c)) {
        return Status::InvalidArgument(where + ".name \"" + h.name +
                                       "\" may only contain [A-Za-z0-9._-]");
      }
    }
    if (h.name.rfind(kReservedHeaderPrefix, 0) == 0) {
      return Status::InvalidArgument(where + ".name \"" + h.name + "\": the prefix \"" +
                                     kReservedHeaderPrefix + "\" is reserved for the relay");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (event.headers[j].name == h.name) {
        return Status::InvalidArgument(where + ".name \"" + h.name + "\" appears twice");
      }
    }
    OUTBOX_RETURN_IF_ERROR(CheckText(where + ".value (" + h.name + ")", h.value,
                                     limits.max_header_value_bytes, false));
  }
  return Status::Ok();
}

Status ValidateEvents(std::span<const Event> events, const EventLimits& limits) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    Status st = ValidateEvent(events[i], limits);
    if (!st.ok()) {
      return Status::InvalidArgument("event[" + std::to_string(i) + "]: " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace outbox
