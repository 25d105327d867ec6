// InboxSource: the broker side of the inbox, neutral of any broker. The
// engine (consumer.h) sees only this interface; the Kafka source
// (OpenKafkaInboxSource, kafka.h) and the RabbitMQ source
// (OpenRabbitMqInboxSource, rabbitmq.h) implement it.
//
// The words are Kafka's, and each source says what they mean on its broker:
// a topic is what a handler subscribes to, a partition a stream of the topic
// read in order, an offset a message's place in it (the next offset to read
// is committed). On RabbitMQ a topic is an exchange, read through the
// group's queue; the partition is the channel's session and the offset the
// delivery tag (rabbitmq.h).
#ifndef OUTBOX_INBOX_SOURCE_H_
#define OUTBOX_INBOX_SOURCE_H_

#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "outbox/inbox.h"
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
// (OpenKafkaInboxSource, OpenRabbitMqInboxSource); must outlive the Consumer
// that borrows it.
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

// ConsumerOptions::forward_max_bytes's range: the largest copy a source must
// forward whole.
inline constexpr std::size_t kMinForwardMaxBytes = 16'384;  // the failure headers always fit
// kafka.h's kForwardMessageMaxBytes less 4 KiB for the record's framing.
inline constexpr std::size_t kMaxForwardMaxBytes = 1'020'480;

// Dead-letter replay (outboxctl dlt replay), on either broker: which
// dead-lettered messages to send back (ReplayDeadLetters in kafka.h,
// ReplayRabbitMqDeadLetters in rabbitmq.h), and what came of it.
struct ReplayFilter {
  std::string key;                                // "" = any
  std::chrono::system_clock::time_point since{};  // message timestamp >= since
  std::chrono::system_clock::time_point until = std::chrono::system_clock::time_point::max();
};

struct ReplayResult {
  std::uint64_t scanned = 0;
  std::uint64_t replayed = 0;
  // Matching messages that are cut copies (header outbox-truncated: the message
  // was too large to forward whole): not replayed. Each says where it is and
  // where its original was, e.g. "orders.dlt/2/5: a cut copy of orders/2/17
  // (1040000 bytes); replay the original from that offset".
  std::vector<std::string> not_replayable;
};

// `progress`, when set, is called on the calling thread after each scanned
// message with the messages scanned and matched so far (for a progress line).
using ReplayProgress = std::function<void(std::uint64_t scanned, std::uint64_t matched)>;

// Whether a dead-letter copy `in` is one to replay: it names its original
// topic (header outbox-original-topic) and passes the filter.
bool ReplayMatches(const ReplayFilter& filter, const InboundMessage& in);
// What a replay sends for the dead-letter copy `in`: its key, payload and the
// event's own headers to `topic`, without the failure headers
// (outbox-original-*, outbox-error-*, the attempt, first failure and due
// time), with outbox-replayed-from = `from` (where the copy was).
OutboundMessage ReplayCopy(const InboundMessage& in, std::string topic, const std::string& from);
// Why a matching cut copy (header outbox-truncated) is not replayed, naming
// `from` (where it is) and its original's place and size.
std::string NotReplayableText(const InboundMessage& in, const std::string& from);

}  // namespace outbox

#endif  // OUTBOX_INBOX_SOURCE_H_
