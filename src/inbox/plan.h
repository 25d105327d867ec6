// The inbox engine's decisions for one batch, as pure functions (unit-tested
// without a database or broker): which messages go to the store and with which
// key, which wait (retry not due), which are rejected before the store; which
// are forwarded where with which headers; which offsets may be committed.
#ifndef OUTBOX_SRC_INBOX_PLAN_H_
#define OUTBOX_SRC_INBOX_PLAN_H_

#include <cstdint>
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
};

// REQUIRES: messages in partition order (as the source returns them).
Intake PlanIntake(std::span<const InboundMessage> messages, std::int64_t now_ms,
                  const DedupKeyFn& dedup);

enum class ForwardKind { kRetry, kDeadLetter };

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

// Next offsets to commit: per partition, one past the last taken message.
std::map<TopicPartition, std::int64_t> PlanCommit(std::span<const InboundMessage> messages,
                                                  const std::vector<bool>& taken);

}  // namespace outbox::inbox_internal

#endif  // OUTBOX_SRC_INBOX_PLAN_H_
