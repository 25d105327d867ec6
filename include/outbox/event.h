// Event: what a service hands to the outbox, and the contract it must meet.
//
// An event is validated before anything is written (ValidateEvent); a violation
// is an InvalidArgument Status whose message names the offending field, so the
// caller can fix its code, and the caller's transaction is left untouched.
//
// Thread-safety: plain values.
#ifndef OUTBOX_EVENT_H_
#define OUTBOX_EVENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
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
// Every event of a batch; the error names the first bad one: "event[3]: ...".
Status ValidateEvents(std::span<const Event> events, const EventLimits& limits = {});

// True when `s` is well-formed UTF-8 without NUL bytes (what PostgreSQL text accepts).
bool IsValidText(std::string_view s);

// An event as a store hands it to a transport (store.h, transport.h).
// Identifies one claim of one row; the fencing credential for later transitions.
struct Ticket {
  std::int64_t seq = 0;    // row id: monotonically increasing in enqueue order
  std::int64_t token = 0;  // lease token of the claim that returned the row
};

struct ClaimedEvent {
  Ticket ticket;
  std::string event_id;  // UUID text, assigned at enqueue, stable across re-publish
  Event event;
  int attempts = 0;  // including this claim
  std::chrono::system_clock::time_point created_at;  // enqueue time, database clock
  std::chrono::microseconds age_at_claim{0};  // now() - created_at at claim, database clock
};

}  // namespace outbox

#endif  // OUTBOX_EVENT_H_
