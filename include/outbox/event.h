// Event: what a service hands to the outbox, and the contract it must meet.
//
// An event is validated before anything is written (ValidateEvent); a violation
// is an InvalidArgument Status whose message names the offending field, so the
// caller can fix its code, and the caller's transaction is left untouched.
//
// Thread-safety: plain values.
#ifndef OUTBOX_EVENT_H_
#define OUTBOX_EVENT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "outbox/status.h"

namespace outbox {

struct Header {
  std::string name;   // [A-Za-z0-9._-], 1..kMaxHeaderNameBytes; "outbox-" is reserved
  std::string value;  // valid UTF-8, no NUL (stored as JSON text)
};

struct Event {
  // Routing and ordering: events of one (aggregate_type, aggregate_id) are
  // published in commit order. aggregate_type names the topic by default, so it
  // is restricted to Kafka's topic alphabet [A-Za-z0-9._-].
  std::string aggregate_type;
  std::string aggregate_id;  // the seed's objectId; becomes the Kafka message key
  std::string event_type;    // e.g. "LessonCompleted"
  std::string payload;       // bytes; JSON is the common case, not required
  std::vector<Header> headers;  // e.g. W3C "traceparent"
  // When set, a second enqueue with the same key writes nothing and reports
  // "already enqueued" (while the first row is still in the table).
  std::optional<std::string> dedup_key;
};

struct EventLimits {
  // What the relay will send: payload + aggregate_id (the key) + header names
  // and values. The relay's producer admits this much plus its own headers
  // (kafka.h: kDefaultMessageMaxBytes); an event above it would be accepted here
  // and then fail forever at publish, so it is rejected at the source. The SQL
  // enqueue() applies the same limit (setting outbox.max_event_bytes).
  std::size_t max_event_bytes = 1'000'000;
  std::size_t max_payload_bytes = 1'000'000;
  std::size_t max_field_bytes = 255;         // aggregate type/id, event type, dedup key
  std::size_t max_headers = 64;
  std::size_t max_header_value_bytes = 8192;
};

inline constexpr std::size_t kMaxHeaderNameBytes = 128;
inline constexpr char kReservedHeaderPrefix[] = "outbox-";

// OK, or InvalidArgument naming the first field that breaks the contract.
Status ValidateEvent(const Event& event, const EventLimits& limits = {});

// True when `s` is well-formed UTF-8 without NUL bytes (what PostgreSQL text accepts).
bool IsValidText(std::string_view s);

}  // namespace outbox

#endif  // OUTBOX_EVENT_H_
