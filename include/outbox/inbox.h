// Inbox: turns at-least-once delivery into an effect that happens once.
//
// This header is neutral of database and broker. It holds the message as the
// consumer sees it, how a handler ends, and the InboxStore interface: the
// database side of the inbox. The engine that drives it (consumer.h) sees only
// InboxStore and InboxSource; the implementations live with their store or
// broker (postgres_inbox.h, kafka.h).
//
// An InboxStore, for each message: in one transaction on the consumer's own
// database, insert a stamp (consumer, dedup key); if it is new, run the effect
// with that same open transaction, so the effect and the stamp commit or roll
// back together. A duplicate (stamp already there) changes nothing but a
// counter. Only after the commit may the broker offset be committed.
#ifndef OUTBOX_INBOX_H_
#define OUTBOX_INBOX_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "outbox/status.h"

namespace outbox {

// A message as consumed from the broker.
struct InboundMessage {
  std::string topic;
  int partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string payload;
  // The broker's value was NULL (a tombstone), not an empty value. `payload` is
  // then empty; forwarding keeps the NULL.
  bool payload_is_null = false;
  // Header values are bytes, as the broker carries them; nothing says they are
  // UTF-8.
  std::map<std::string, std::string> headers;
  std::chrono::system_clock::time_point timestamp;

  const std::string* Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

// How a handler (or the dedup-key function) ended.
enum class ErrorClass {
  kNone,       // applied
  kPermanent,  // contract violation, undecodable payload, missing object id: dead-letter now
  kTransient,  // try again later (retry topics); unknown exceptions count as this
};

struct HandlerResult {
  ErrorClass error = ErrorClass::kNone;
  std::string message;
  static HandlerResult Ok() { return {}; }
  static HandlerResult Permanent(std::string m) { return {ErrorClass::kPermanent, std::move(m)}; }
  static HandlerResult Transient(std::string m) { return {ErrorClass::kTransient, std::move(m)}; }
};

// The stamp's key for a message: the event id header, or a stable business
// identity (e.g. "LessonCompleted:<user>:<lesson>"). Never a per-publish value.
// An error, an empty key, a key that is not valid UTF-8 text, or a thrown
// exception makes the message a permanent failure (dead-letter).
// Called on the consumer's thread.
using DedupKeyFn = std::function<Result<std::string>(const InboundMessage& msg)>;

// The event id the relay puts in the `outbox-event-id` header.
DedupKeyFn DedupByEventId();

enum class Outcome { kApplied, kDuplicate, kPermanent, kTransient };
std::string_view OutcomeName(Outcome o);

struct MessageOutcome {
  Outcome outcome = Outcome::kTransient;
  std::string error;  // for kPermanent / kTransient; may span lines
};

// The database side of the inbox.
//
// Thread-safety: not safe for concurrent use (one session); a consumer engine
// owns its use. Ownership: created by an Open* function of a store
// (OpenPostgresInbox); must outlive every Consumer that borrows it.
class InboxStore {
 public:
  virtual ~InboxStore() = default;

  // Creates or upgrades the inbox schema (stamp table). Idempotent.
  virtual Status Migrate() = 0;

  // Applies `messages`, keyed by `keys` (same index; REQUIRES: every key is
  // non-empty valid UTF-8 text — the engine checks that before). Returns one
  // outcome per message once every applied effect is committed.
  //
  // Per-message isolation: a message whose effect fails, or whose effect cannot
  // be committed (a deferred constraint, a serialization failure at COMMIT), gets
  // its own kPermanent / kTransient outcome; the others still apply. An error
  // Status means the database could not be used at all (connection lost,
  // schema missing) and nothing took effect: the caller must not commit those
  // offsets and tries again later.
  virtual Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> messages,
                                                    std::span<const std::string> keys) = 0;

  // Deletes at most `batch` stamps of this consumer older than `horizon`.
  // The horizon must exceed the longest time after which anything can deliver
  // the event again (docs/inbox.md, "Stamp retention").
  virtual Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) = 0;
};

}  // namespace outbox

#endif  // OUTBOX_INBOX_H_
