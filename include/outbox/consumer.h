// Consumer: the Kafka side of the inbox. A consumer-group member that feeds
// batches to an Inbox and commits offsets only after the effects are committed.
//
// Failures: a permanent error sends the message to `<topic><dlt_suffix>` at
// once; a transient one to `<topic>.retry.1`, `.2`, ... (one per entry of
// retry_delays), then to the dead-letter topic. Forwarded messages keep key,
// payload and headers, and carry:
//   outbox-original-topic, outbox-original-partition, outbox-original-offset,
//   outbox-error-class (permanent|transient), outbox-error-message,
//   outbox-attempt (1 for the first failure), outbox-first-failure-at (RFC 3339),
//   outbox-retry-due-at (ms since the epoch; retry topics only).
// A message from a retry topic that is not yet due pauses its partition until it
// is (the consumer never sleeps holding a partition's progress).
//
// Offsets are committed (synchronously) only for messages whose outcome is
// durable: applied or duplicate (inbox committed), or forwarded (broker acked).
//
// Thread-safety: Run() blocks; Stop() and counters() from any thread.
#ifndef OUTBOX_CONSUMER_H_
#define OUTBOX_CONSUMER_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/inbox.h"
#include "outbox/log.h"
#include "outbox/status.h"

namespace outbox {

struct ConsumerOptions {
  // librdkafka properties; bootstrap.servers and group.id are required. Ours:
  // enable.auto.commit=false, auto.offset.reset=earliest, session.timeout.ms=10000.
  std::map<std::string, std::string> properties;
  std::vector<std::string> topics;  // the main topics (retry topics are derived)
  std::vector<std::chrono::milliseconds> retry_delays = {std::chrono::seconds(1),
                                                         std::chrono::seconds(10),
                                                         std::chrono::seconds(60)};
  std::string dlt_suffix = ".dlt";
  int batch_size = 500;                        // messages per inbox transaction
  std::chrono::milliseconds batch_wait{20};    // how long to fill a batch
  // Stamps older than this are purged (in batches, every purge_interval). 0 keeps
  // them forever. It must exceed the broker's retention plus the longest replay
  // window, or a very late duplicate could apply twice (docs/inbox.md).
  std::chrono::seconds stamp_retention{0};
  std::chrono::seconds purge_interval{300};
};

struct ConsumerCounters {
  std::uint64_t applied = 0;
  std::uint64_t duplicates = 0;     // delivered again, absorbed by the inbox
  std::uint64_t retried = 0;        // forwarded to a retry topic
  std::uint64_t dead_lettered = 0;  // forwarded to the dead-letter topic
};

class Consumer {
 public:
  // `batch_handler` is optional (see BatchHandler in inbox.h).
  static Result<std::unique_ptr<Consumer>> Create(ConsumerOptions options, Inbox& inbox,
                                                  DedupKeyFn dedup, Handler handler,
                                                  Logger& logger,
                                                  BatchHandler batch_handler = nullptr);
  virtual ~Consumer() = default;
  virtual Status Run() = 0;
  virtual void Stop() = 0;
  virtual ConsumerCounters counters() const = 0;
};

// Dead-letter replay: copies the messages of a dead-letter topic that match the
// filter back to their original topic (header outbox-original-topic), keeping key,
// payload and the event's own headers, adding outbox-replayed-from. Safe to run
// twice: the inbox absorbs what was already applied.
struct ReplayFilter {
  std::string key;                                  // "" = any
  std::chrono::system_clock::time_point since{};    // message timestamp >= since
  std::chrono::system_clock::time_point until = std::chrono::system_clock::time_point::max();
};

struct ReplayResult {
  std::uint64_t scanned = 0;
  std::uint64_t replayed = 0;
};

Result<ReplayResult> ReplayDeadLetters(const std::map<std::string, std::string>& properties,
                                       const std::string& dlt_topic, const ReplayFilter& filter,
                                       bool dry_run);

}  // namespace outbox

#endif  // OUTBOX_CONSUMER_H_
