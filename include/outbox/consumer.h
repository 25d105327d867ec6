// Consumer: the inbox engine. A loop that takes batches from an InboxSource (the
// broker side, inbox_source.h), applies them through an InboxStore (the
// database side, inbox.h), forwards failures to retry and dead-letter topics,
// and commits offsets only for messages whose outcome is durable. It sees only
// those two interfaces; the sources are in kafka.h and rabbitmq.h, the stores
// in postgres_inbox.h and mariadb_inbox.h.
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
#include "outbox/inbox_source.h"
#include "outbox/log.h"
#include "outbox/metrics.h"
#include "outbox/status.h"

namespace outbox {

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
