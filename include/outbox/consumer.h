// Consumer: the inbox engine. A loop that takes batches from an InboxSource (the
// broker side), applies them through an InboxStore (the database side), forwards
// failures to retry and dead-letter topics, and commits offsets only for
// messages whose outcome is durable. It sees only those two interfaces; the
// Kafka source is in kafka.h, the PostgreSQL store in postgres_inbox.h.
//
// Failures: a permanent error sends the message to `<topic><dlt_suffix>` at
// once; a transient one to `<topic>.retry.1`, `.2`, ... (one per entry of
// retry_delays), then to the dead-letter topic. Forwarded messages keep key,
// value (a NULL value stays NULL) and headers, and carry:
//   outbox-original-topic, outbox-original-partition, outbox-original-offset,
//   outbox-error-class (permanent|transient),
//   outbox-error-message (the error's first line, at most 1000 bytes),
//   outbox-error-detail (the whole error text, at most 8000 bytes),
//   outbox-attempt (1 for the first failure), outbox-first-failure-at (RFC 3339),
//   outbox-retry-due-at (ms since the epoch; retry topics only).
// A copy that would exceed forward_max_bytes (key + value + headers) loses its
// outbox-error-detail first (and keeps its route when it then fits); if it is
// still too large it cannot be forwarded whole: it goes to the dead-letter
// topic as a bounded record — the value cut to fit (then left out, with every
// header but the event id and the consumer's own, if the rest alone is too
// large) — with
//   outbox-original-size (the original value's bytes) and
//   outbox-truncated (what was cut, and why).
// Such a record cannot be replayed as it stands (outboxctl dlt replay says so).
//   outbox-group (ConsumerOptions::group, when set: the group that failed it).
// A message from a retry topic that is not yet due pauses its partition until it
// is (the consumer never sleeps holding a partition's progress).
//
// Several groups on one topic share its retry and dead-letter topics. A copy
// whose outbox-group names another group (on a retry topic, or replayed to the
// main topic by `outboxctl dlt replay`, which keeps the header) is skipped by
// this consumer: its offset is committed, it is neither applied nor counted as
// a duplicate, and it never pauses a partition. A copy without the header (made
// before this rule) is consumed by every group, as it was.
//
// Offsets are committed only for messages whose outcome is durable: applied or
// duplicate (inbox committed), or forwarded (broker acked); and only for
// partitions this member still owns.
//
// Thread-safety: Run() blocks on the calling thread, which is the only one that
// calls the source, the store and the dedup function. Stop() and counters() are
// safe from any thread. Ownership: the Consumer borrows the source, the store,
// the logger and the metrics registry; all must outlive it.
#ifndef OUTBOX_CONSUMER_H_
#define OUTBOX_CONSUMER_H_

#include <chrono>
#include <compare>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outbox/clock.h"
#include "outbox/inbox.h"
#include "outbox/log.h"
#include "outbox/metrics.h"
#include "outbox/status.h"

namespace outbox {

// The headers the consumer writes on forwarded messages (see the top of this file).
namespace inbox_headers {
inline constexpr char kOrigTopic[] = "outbox-original-topic";
inline constexpr char kOrigPartition[] = "outbox-original-partition";
inline constexpr char kOrigOffset[] = "outbox-original-offset";
inline constexpr char kErrClass[] = "outbox-error-class";
inline constexpr char kErrMessage[] = "outbox-error-message";
inline constexpr char kErrDetail[] = "outbox-error-detail";
inline constexpr char kAttempt[] = "outbox-attempt";
inline constexpr char kFirstFailure[] = "outbox-first-failure-at";
inline constexpr char kDueAt[] = "outbox-retry-due-at";
inline constexpr char kOrigSize[] = "outbox-original-size";
inline constexpr char kTruncated[] = "outbox-truncated";
inline constexpr char kGroup[] = "outbox-group";
}  // namespace inbox_headers

struct TopicPartition {
  std::string topic;
  int partition = 0;
  auto operator<=>(const TopicPartition&) const = default;
};

// A message to produce (retry, dead-letter, replay).
struct OutboundMessage {
  std::string topic;
  std::string key;
  bool key_is_null = false;  // produced with no key (a NULL key stays NULL)
  std::string payload;
  bool payload_is_null = false;
  std::map<std::string, std::string> headers;

  const std::string* Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

struct PartitionLag {
  TopicPartition tp;
  std::int64_t lag = 0;  // high watermark minus the consumer's position; -1 unknown
};

// The broker side of the inbox.
//
// Thread-safety: not safe for concurrent use; only the consumer's Run() thread
// calls it. Ownership: created by an Open* function of a transport
// (OpenKafkaInboxSource); must outlive the Consumer that borrows it.
class InboxSource {
 public:
  virtual ~InboxSource() = default;

  // Joins the group for these topics (the main topics and their retry topics).
  virtual Status Subscribe(const std::vector<std::string>& topics) = 0;

  // Up to `max` messages, in partition order. Waits up to ~100 ms for the first,
  // then at most `fill_wait` for more. Only messages of partitions this member
  // owns when Poll returns: a partition revoked during the call drops its
  // messages (its new owner consumes them).
  virtual std::vector<InboundMessage> Poll(int max, std::chrono::milliseconds fill_wait) = 0;

  // Produces every message and waits for every acknowledgement. An error means
  // some may not have arrived; the caller consumes the originals again.
  virtual Status Forward(std::span<const OutboundMessage> messages) = 0;

  // Commits `next` offsets (the offset of the next message to consume) of
  // partitions this member still owns; offsets of revoked partitions are dropped,
  // so a new owner's committed position never moves backwards. An error is
  // logged by the caller; the messages come again and the store absorbs them.
  virtual Status Commit(const std::map<TopicPartition, std::int64_t>& next) = 0;

  // Consume partitions again from these offsets.
  virtual void Rewind(const std::map<TopicPartition, std::int64_t>& from) = 0;
  // Hold a partition at `offset` (fetched again after Resume).
  virtual void Pause(const TopicPartition& tp, std::int64_t offset) = 0;
  virtual void Resume(const TopicPartition& tp) = 0;

  // Lag of the owned partitions from locally known positions (no network call).
  virtual std::vector<PartitionLag> Lag() = 0;

  // "" while the broker answers; else why not (for /readyz: "broker
  // unreachable: …"), from the client's own errors (requests timed out, every
  // broker down) until a message, an assignment or a commit comes through.
  // Safe from any thread (the only exception to the rule above).
  virtual std::string NotReadyReason() const { return ""; }
};

// ConsumerOptions::forward_max_bytes's range.
inline constexpr std::size_t kMinForwardMaxBytes = 16'384;  // the failure headers always fit
// kafka.h's kForwardMessageMaxBytes less 4 KiB for the record's framing.
inline constexpr std::size_t kMaxForwardMaxBytes = 1'020'480;

struct ConsumerOptions {
  std::vector<std::string> topics;  // the main topics (retry topics are derived)
  // The consumer group (the source's group.id): stamped on forwarded copies as
  // outbox-group, so that other groups skip them (top of this file). "" = no
  // stamp, and every copy is this consumer's.
  std::string group = "";
  std::vector<std::chrono::milliseconds> retry_delays = {std::chrono::seconds(1),
                                                         std::chrono::seconds(10),
                                                         std::chrono::seconds(60)};
  std::string dlt_suffix = ".dlt";
  // Ordered mode (docs/inbox.md): effects of one message key (the aggregate id
  // the relay sets) apply in the order of the main topic. A message that fails
  // transiently is parked in the inbox database with the later messages of its
  // key behind it; other keys flow. Parked messages are retried from the
  // database after retry_delays (retry topics are not used), then
  // dead-lettered, which releases the key. Off by default; consumers that need
  // per-aggregate order (sagas, state machines) turn it on.
  bool ordered = false;
  int batch_size = 500;                      // messages per inbox transaction
  std::chrono::milliseconds batch_wait{20};  // how long to fill a batch
  // Stamps older than this are purged (in batches, every purge_interval). 0 keeps
  // them forever. It must exceed the re-delivery horizon (docs/inbox.md).
  std::chrono::seconds stamp_retention{0};
  std::chrono::seconds purge_interval{300};
  // The largest copy (key + value + header names and values) forwarded whole;
  // a larger one is dead-lettered as a bounded record (top of this file).
  // kMinForwardMaxBytes..kMaxForwardMaxBytes. The default takes the largest
  // event enqueue admits (1,000,000 bytes with its headers, plus the relay's)
  // with its failure headers, and stays under the Kafka source's forwarding
  // producer (kForwardMessageMaxBytes) and a broker's default
  // message.max.bytes; lower it to the dead-letter topics' max.message.bytes
  // if those are smaller.
  std::size_t forward_max_bytes = kMaxForwardMaxBytes;
  // Labels put first on every outbox_inbox_* sample, rendered without braces
  // (`consumer="learning-activity"`), so several consumers can share one
  // registry; "" = none.
  std::string metrics_labels = "";
  // The engine's time (retry due times, purge and lag intervals, backoff);
  // nullptr = SystemClock(). Not owned; must outlive the consumer.
  Clock* clock = nullptr;
};

// The topics a consumer with these options subscribes to: each main topic, then
// its retry topics.
std::vector<std::string> SubscribedTopics(const ConsumerOptions& options);

struct ConsumerCounters {
  std::uint64_t applied = 0;
  std::uint64_t duplicates = 0;     // delivered again, absorbed by the inbox
  std::uint64_t retried = 0;        // forwarded to a retry topic
  std::uint64_t dead_lettered = 0;  // forwarded to the dead-letter topic
};

class Consumer {
 public:
  // Subscribes the source. `metrics` is optional; when given, the consumer
  // registers its outbox_inbox_* metrics there (docs/inbox.md, "Metrics").
  static Result<std::unique_ptr<Consumer>> Create(ConsumerOptions options, InboxSource& source,
                                                  InboxStore& store, DedupKeyFn dedup,
                                                  Logger& logger,
                                                  MetricsRegistry* metrics = nullptr);
  virtual ~Consumer() = default;
  // Runs until Stop(). Returns OK after a Stop().
  virtual Status Run() = 0;
  virtual void Stop() = 0;
  virtual ConsumerCounters counters() const = 0;
  // "" while the consumer's last batch could use the database and its last
  // forward reached the broker; else why not, naming the part (for /readyz):
  // "inbox database unavailable: …" from the batch whose store call failed as
  // an outage (connection lost or silent, timeout, refused role, missing
  // schema) until a store call succeeds, "broker unreachable: …" from a
  // forward that was not acknowledged until one is, or while the source says
  // so (InboxSource::NotReadyReason). Any thread.
  virtual std::string NotReadyReason() const = 0;
};

}  // namespace outbox

#endif  // OUTBOX_CONSUMER_H_
