// The inbox engine's decisions for one batch, as pure functions (unit-tested
// without a database or broker): which messages go to the store and with which
// key, which wait (retry not due), which are rejected before the store; which
// are forwarded where with which headers; which offsets may be committed.
#ifndef OUTBOX_SRC_INBOX_PLAN_H_
#define OUTBOX_SRC_INBOX_PLAN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outbox/consumer.h"
#include "outbox/inbox.h"

namespace outbox::inbox_internal {

using namespace inbox_headers;  // NOLINT: the header names, as in consumer.h
inline constexpr std::size_t kErrMessageMaxBytes = 1000;
inline constexpr std::size_t kErrDetailMaxBytes = 8000;

// "orders.retry.2" -> ("orders", 2); anything else -> (topic, 0).
std::pair<std::string, int> SplitRetry(const std::string& topic);

// Runs the dedup-key function and checks its result: an error, an empty key,
// a key that is not valid UTF-8 text, or an exception is an error naming why.
Result<std::string> DedupKey(const DedupKeyFn& dedup, const InboundMessage& m);

struct Intake {
  std::vector<std::size_t> apply;  // indices of messages for the store, in order
  std::vector<std::string> keys;   // their dedup keys (same length as apply)
  // Per message: set when decided before the store (rejected as permanent).
  std::vector<std::optional<MessageOutcome>> outcomes;
  // Retry messages not yet due: the partition waits at this offset.
  std::map<TopicPartition, std::pair<std::int64_t, std::int64_t>> pauses;  // -> (offset, due ms)
  // The first offset of each partition in the batch (where to rewind to).
  std::map<TopicPartition, std::int64_t> first_offsets;
  std::vector<bool> taken;  // per message: processed in this batch (not held)
  std::size_t other_groups = 0;  // taken, skipped: copies another group failed
};

// REQUIRES: messages in partition order (as the source returns them).
// `group` (ConsumerOptions::group): a copy whose outbox-group names another
// group is taken and skipped (consumer.h).
Intake PlanIntake(std::span<const InboundMessage> messages, std::int64_t now_ms,
                  const DedupKeyFn& dedup, const std::string& group = "");

enum class ForwardKind { kRetry, kDeadLetter };

// A forwarded copy's size against the limit: key, value, header names and
// values, and a few bytes of framing per header.
std::size_t ForwardBytes(const OutboundMessage& m);

// Makes `out` fit `max_bytes` (REQUIRES: >= kMinForwardMaxBytes) when it does
// not: first drops outbox-error-detail (returns false if that is enough: the
// copy keeps its route); else sends it to `dlt_topic`, cuts the value to fit —
// or, when the rest alone is too large, leaves out the value and every header
// but the consumer's own and a short outbox-event-id (each cut to 1,000 bytes)
// and cuts the key to 256 bytes — and records outbox-original-size and
// outbox-truncated. Returns true when it cut. The result fits `max_bytes`.
bool BoundForward(OutboundMessage& out, std::size_t max_bytes, const std::string& dlt_topic);

struct Forwards {
  std::vector<OutboundMessage> messages;
  std::vector<ForwardKind> kinds;     // same index
  std::vector<Outcome> classes;       // the failure class of each (permanent/transient)
};

// `outcomes[i]` is the outcome of messages[i] for every taken message.
// `now_rfc3339` stamps outbox-first-failure-at on a first failure.
Forwards PlanForwards(std::span<const InboundMessage> messages,
                      std::span<const std::optional<MessageOutcome>> outcomes,
                      const ConsumerOptions& options, std::int64_t now_ms,
                      const std::string& now_rfc3339);

// The first line of an error (trimmed), cut to at most `max_bytes` on a UTF-8
// boundary; and the whole text cut the same way.
std::string FirstLine(const std::string& text, std::size_t max_bytes);
std::string CutUtf8(const std::string& text, std::size_t max_bytes);

// The order key of a message: its broker key when that is text, else "hex:"
// and the key's bytes in hex (the store keeps order keys as text).
std::string OrderKey(const InboundMessage& m);

// The copy of a failed message for a retry or dead-letter topic: its key, value
// and headers, plus the failure headers (see consumer.h). `attempt` is 1 for
// the first failure. The caller sets topic (and outbox-retry-due-at).
OutboundMessage FailureCopy(const InboundMessage& m, const MessageOutcome& o, int attempt,
                            const std::string& now_rfc3339);

// Ordered mode, after the store: the taken messages to park, in batch order —
// those whose key already had parked messages (`pre_parked`), those that
// failed transiently (the new heads, due after retry_delays[0]; with no retry
// delays they are dead-lettered instead) and those held behind them. Their
// outcomes become kHeld so that PlanForwards leaves them alone.
// `dedup_keys[i]` is message i's key (empty when it has none).
std::vector<ParkedMessage> PlanParking(std::span<const InboundMessage> messages, Intake& in,
                                       const std::vector<std::string>& dedup_keys,
                                       const std::vector<bool>& pre_parked,
                                       const ConsumerOptions& options);

// Ordered mode, after the store applied due parked messages: what becomes of
// each. Applied and duplicates leave the queue; a transient failure is tried
// again later (attempts + 1) or, past the last retry delay, dead-lettered;
// a permanent one is dead-lettered; kHeld ones stay as they are.
struct ParkedPlan {
  std::vector<std::int64_t> unpark;  // now
  struct Retry {
    std::int64_t id;
    int attempts;
    std::string error;
    std::chrono::milliseconds delay;
  };
  std::vector<Retry> retries;
  std::vector<OutboundMessage> dead_letters;  // unparked once acked
  std::vector<std::int64_t> dead_ids;
  std::vector<Outcome> dead_classes;
  std::uint64_t applied = 0, duplicates = 0;
};
ParkedPlan PlanParked(std::span<const ParkedMessage> due, std::span<const MessageOutcome> outcomes,
                      const ConsumerOptions& options, const std::string& now_rfc3339);

// The rule that keeps one message from holding a partition (docs/inbox.md, "A
// consumer never wedges"). A batch whose Apply failed the same way twice in a
// row is applied again in halves, and halves of halves, until the failing
// messages stand alone; a message that fails alone gets a kTransient outcome
// carrying the error, and takes the per-message path (retry topics or parking,
// then the dead-letter topic). Parts are applied in batch order; in ordered
// mode (`order_keys` non-empty, same index as the messages) a message whose
// order key failed transiently or was held in an earlier part is kHeld and not
// tried. `failed` is the whole batch's error (it is not tried a third time).
// `apply` applies the messages at the given indices (in one store call) and
// returns their outcomes in the same order.
//
// An error is returned, and the batch is consumed again as before, when a part
// fails in a way that is not split (SplitsOn), or when more than one message
// was tried alone and every one failed: the fault is then the database's, not
// a message's, and dead-lettering the batch would be wrong (`failed` is
// returned). Messages held behind their key's failed message were not tried
// and do not count: a poisoned head of a key does not wedge its partition.
// Parts applied before that are committed; redelivery absorbs them as
// duplicates.
using ApplyFn = std::function<Result<std::vector<MessageOutcome>>(std::span<const std::size_t>)>;
Result<std::vector<MessageOutcome>> ApplyBySplitting(std::size_t count,
                                                     std::span<const std::string> order_keys,
                                                     const Status& failed, const ApplyFn& apply);

// Whether a failed Apply may be split: only when the error cannot pass on a
// later try (not retryable: a key the database cannot index, a constraint, an
// internal error). Not for what a later try may pass — the database
// unreachable, read-only or full (kUnavailable), a timeout (kDeadlineExceeded:
// a handler's own statement past it already fails its message alone), a
// deadlock, a serialization failure or a lock not granted — nor when the role
// is refused (kPermissionDenied) or the inbox's tables are missing
// (kFailedPrecondition): no message is at fault.
bool SplitsOn(const Status& st);

// Next offsets to commit: per partition, one past the last taken message.
std::map<TopicPartition, std::int64_t> PlanCommit(std::span<const InboundMessage> messages,
                                                  const std::vector<bool>& taken);

}  // namespace outbox::inbox_internal

#endif  // OUTBOX_SRC_INBOX_PLAN_H_
