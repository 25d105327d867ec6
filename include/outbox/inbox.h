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
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/status.h"

namespace outbox {

// A message as consumed from the broker.
struct InboundMessage {
  std::string topic;
  int partition = 0;
  std::int64_t offset = 0;
  std::string key;
  // The broker's key was NULL (no key), not an empty key. `key` is then empty;
  // handlers see NULL (sql: $4 IS NULL) and forwarding keeps the NULL.
  bool key_is_null = false;
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
  // The event id, from either envelope: outbox-event-id, else the CloudEvents
  // id of the message's binding (ce_id on Kafka, cloudEvents:id on AMQP,
  // ce-id on HTTP; cloudevents.h); nullptr when there is none. (Dedup by it:
  // DedupByEventId, which keys a CloudEvents id with its source.)
  const std::string* EventId() const {
    for (const char* name : {"outbox-event-id", "ce_id", "cloudEvents:id", "ce-id"}) {
      if (const std::string* id = Header(name); id && !id->empty()) return id;
    }
    return nullptr;
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
  // The class a failed SQL statement gives its message by default, from its
  // SQLSTATE: the data is wrong — class 22 (data exception: text that is not
  // in the database's encoding, a number out of range) or 23 (integrity: a
  // unique, check or foreign-key constraint) — is kPermanent: the same data
  // fails the same way again; anything else (a lost connection, a deadlock, a
  // timeout, a missing table) is kTransient. The sink handlers' statements are
  // classified so. A handler that expects a constraint to pass later (a child
  // whose parent arrives in a later message) returns Transient for it itself.
  // Appends " [SQLSTATE xxxxx]" to the message.
  static HandlerResult FromSqlState(std::string_view sqlstate, std::string m) {
    const bool bad_data = sqlstate.size() == 5 && (sqlstate.starts_with("22") || sqlstate.starts_with("23"));
    if (!sqlstate.empty()) m += " [SQLSTATE " + std::string(sqlstate) + "]";
    return {bad_data ? ErrorClass::kPermanent : ErrorClass::kTransient, std::move(m)};
  }
};

// The rule for a handler whose effect is one SQL statement (outbox-consumer's
// `sql` handler): the statement is all there is, so only what can pass on a
// later try is kTransient — class 08 (connection), 40 (serialization failure,
// deadlock), 53 (insufficient resources), 55P03 (lock not available), 57
// (query cancelled, server shutting down), 58 and XX (system, internal), and
// 70100 (MariaDB's interrupted query). Everything else — data exception (22),
// integrity (23), an undefined function or table or a syntax error (42), a
// RAISE in the function (P0001) — is kPermanent. "" (no SQLSTATE) is kTransient.
ErrorClass SqlHandlerErrorClass(std::string_view sqlstate);

// The stamp's key for a message: the event id header, or a stable business
// identity (e.g. "LessonCompleted:<user>:<lesson>"). Never a per-publish value.
// An error, an empty key, a key that is not valid UTF-8 text, or a thrown
// exception makes the message a permanent failure (dead-letter).
// Called on the consumer's thread.
using DedupKeyFn = std::function<Result<std::string>(const InboundMessage& msg)>;

// The event id the relay puts in the `outbox-event-id` header; without it,
// a CloudEvents id with its source ("ce:<source> <id>": an id is unique within
// its source only), of any binding (InboundMessage::EventId).
DedupKeyFn DedupByEventId();

enum class Outcome {
  kApplied,
  kDuplicate,
  kPermanent,
  kTransient,
  // Not tried: an earlier message of its order key in the same Apply call failed
  // transiently (ordered mode only; see InboxStore::Apply).
  kHeld,
};
std::string_view OutcomeName(Outcome o);

struct MessageOutcome {
  Outcome outcome = Outcome::kTransient;
  std::string error;  // for kPermanent / kTransient; may span lines
};

// A message waiting in the inbox database (ordered mode): its order key has an
// earlier message that failed and waits for its retry, or it is that message.
struct ParkedMessage {
  std::int64_t id = 0;  // assigned by the store; increasing in parking order
  std::string order_key;
  std::string dedup_key;
  InboundMessage message;
  int attempts = 0;  // failed tries so far
  std::string last_error;
  std::chrono::milliseconds delay{0};  // Park: due this long from now
};

// Per consumer, what an inbox database holds (outboxctl inbox status).
struct StampSummary {
  std::string consumer;
  std::int64_t stamps = 0;
  std::int64_t older = 0;  // stamps older than the horizon asked about
  std::chrono::seconds oldest_stamp_age{0};
  std::int64_t duplicates = 0;  // later copies the kept stamps absorbed
  std::int64_t parked = 0;  // ordered mode's waiting messages
  std::chrono::seconds oldest_parked_age{0};
};

// A stamp as operators see it (outboxctl trace). Times are the database's text.
struct StampRecord {
  std::string consumer, dedup_key, applied_at, topic;
  std::string partition, offset;  // "" when unknown
  std::int64_t duplicates = 0;
};

// The database side of the inbox, as the consumer engine uses it.
//
// Thread-safety: not safe for concurrent use (one session); a consumer engine
// owns its use. Ownership: created by an Open* function of a store
// (OpenPostgresInbox); must outlive every Consumer that borrows it.
class InboxStore {
 public:
  virtual ~InboxStore() = default;

  // Creates or upgrades the inbox schema (stamp table). Idempotent.
  virtual Status Migrate() = 0;

  // Whether the inbox's tables are there at this build's version, without
  // changing anything: FailedPrecondition naming the schema (or database), the
  // version found and the one needed, and how to migrate; Unavailable when the
  // database cannot be asked. A daemon started without migrating checks this
  // before it consumes anything.
  virtual Status CheckSchema() { return Status::Ok(); }

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
  //
  // Ordered mode: when `order_keys` is given (same index), a message whose
  // order key had an earlier message fail transiently in this call is not
  // tried: kHeld, no stamp, no effect.
  virtual Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> messages,
                                                    std::span<const std::string> keys,
                                                    std::span<const std::string> order_keys) = 0;
  Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> messages,
                                            std::span<const std::string> keys) {
    return Apply(messages, keys, {});
  }

  // Ordered mode: the parked queue, one FIFO per order key, in the inbox
  // database so that parking commits before the offset does.
  //
  // The keys among `order_keys` that have parked messages.
  virtual Result<std::set<std::string>> ParkedKeys(std::span<const std::string> order_keys) = 0;
  // Appends `messages` in order (one transaction). A dedup key already parked is
  // left as it is, so parking a redelivered message again changes nothing.
  virtual Status Park(std::span<const ParkedMessage> messages) = 0;
  // The parked messages of every order key whose head (oldest) is due, at most
  // `limit`, in queue order per key (the head first). `delay` is not read back.
  virtual Result<std::vector<ParkedMessage>> Due(int limit) = 0;
  // Removes parked messages (applied, or dead-lettered and acked).
  virtual Status Unpark(std::span<const std::int64_t> ids) = 0;
  // A head that failed again: due again after `delay`.
  virtual Status Reschedule(std::int64_t id, int attempts, const std::string& error,
                            std::chrono::milliseconds delay) = 0;

  // Deletes at most `batch` stamps of this consumer older than `horizon`.
  // The horizon must exceed the longest time after which anything can deliver
  // the event again (docs/inbox.md, "Stamp retention").
  virtual Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) = 0;
};

// The inbox as operators see it (outboxctl inbox status|purge, trace
// --inbox-db): every consumer's stamps, read and purged; no effect is applied.
//
// Thread-safety: not safe for concurrent use (one session). Created by
// OpenPostgresInboxView / OpenMariaDbInboxView.
class InboxView {
 public:
  virtual ~InboxView() = default;

  // Creates or upgrades the inbox schema (stamp table). Idempotent.
  virtual Status Migrate() = 0;
  // Deletes at most `batch` stamps of the view's consumer older than `horizon`
  // (docs/inbox.md, "Stamp retention").
  virtual Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) = 0;
  // Every consumer of this inbox schema (not only this store's), for operators.
  virtual Result<std::vector<StampSummary>> Summary(std::chrono::seconds horizon) = 0;
  // The stamps, of any consumer, whose dedup key is one of `keys`.
  virtual Result<std::vector<StampRecord>> FindStamps(std::span<const std::string> keys) = 0;
};

}  // namespace outbox

#endif  // OUTBOX_INBOX_H_
