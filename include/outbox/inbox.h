// Inbox: turns at-least-once delivery into an effect that happens once.
//
// For each message: in one transaction on the consumer's own PostgreSQL
// database, insert a stamp (consumer, dedup key) with ON CONFLICT DO NOTHING; if
// it is new, run the handler with that same open transaction, so the handler's
// writes and the stamp commit or roll back together. A duplicate (stamp already
// there) is counted on the existing stamp (column `duplicates`) and nothing else
// happens. Only after the commit may the Kafka offset be committed (the consumer
// runner does that).
//
// Several messages share one transaction, each inside its own savepoint, so one
// failing handler does not undo the others.
//
// Thread-safety: an Inbox owns one database session; not safe for concurrent use.
#ifndef OUTBOX_INBOX_H_
#define OUTBOX_INBOX_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outbox/status.h"

struct pg_conn;  // libpq's PGconn

namespace outbox {

// A message as consumed from Kafka.
struct InboundMessage {
  std::string topic;
  int partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string payload;
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

// The handler runs inside the open transaction on `txn` (a libpq connection in
// a transaction block, inside a savepoint). It must not COMMIT or ROLLBACK.
// A thrown exception is treated as kTransient.
using Handler = std::function<HandlerResult(const InboundMessage& msg, pg_conn* txn)>;

// Optional, for throughput: applies the effects of all new messages of a batch
// at once (e.g. one multi-row INSERT) on `txn`. Used on the fast path; if it
// fails, the batch is redone message by message with the per-message Handler,
// each in a savepoint. It must do exactly what the Handler would do for each.
using BatchHandler =
    std::function<HandlerResult(std::span<const InboundMessage* const> msgs, pg_conn* txn)>;

// The stamp's key for a message: the event id header, or a stable business
// identity (e.g. "LessonCompleted:<user>:<lesson>"). Never a per-publish value.
// A missing or undecodable identity is a permanent error.
using DedupKeyFn = std::function<Result<std::string>(const InboundMessage& msg)>;

// The event id the relay puts in the `outbox-event-id` header.
DedupKeyFn DedupByEventId();

enum class Outcome { kApplied, kDuplicate, kPermanent, kTransient };
std::string_view OutcomeName(Outcome o);

struct MessageOutcome {
  Outcome outcome = Outcome::kTransient;
  std::string error;  // for kPermanent / kTransient
};

struct InboxOptions {
  std::string conninfo;
  std::string schema = "inbox";  // validated like the outbox schema
  std::string consumer;          // consumer name, part of the stamp key; required
  std::chrono::milliseconds statement_timeout{30'000};
  // Count each absorbed copy on its stamp (`duplicates`, `last_duplicate_at`;
  // shown by `outboxctl trace`). One UPDATE per batch that holds duplicates;
  // off saves that write when whole topics are replayed (docs/benchmarks.md).
  bool count_duplicates = true;
};

class Inbox {
 public:
  static Result<std::unique_ptr<Inbox>> Open(const InboxOptions& options);
  virtual ~Inbox() = default;

  // Creates or upgrades the inbox schema (stamp table). Idempotent.
  virtual Status Migrate() = 0;

  // Processes `messages` in one transaction, a savepoint each, and commits.
  // Returns one outcome per message (same index) once the commit succeeded. If the
  // transaction cannot be committed, returns the error and nothing took effect —
  // the caller must not commit those offsets.
  virtual Result<std::vector<MessageOutcome>> Process(std::span<const InboundMessage> messages,
                                                      const DedupKeyFn& dedup,
                                                      const Handler& handler,
                                                      const BatchHandler& batch = nullptr) = 0;

  // Deletes at most `batch` stamps of this consumer older than `horizon`.
  // The horizon must exceed the broker's retention plus the longest replay
  // window, or a very late duplicate could apply twice (docs/inbox.md).
  virtual Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) = 0;
};

}  // namespace outbox

#endif  // OUTBOX_INBOX_H_
