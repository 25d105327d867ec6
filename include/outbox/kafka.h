// Kafka transport on librdkafka.
//
// Defaults: idempotent producer (enable.idempotence=true, acks=all), a bounded
// local queue, message key = aggregate id, topic from a template. Any librdkafka
// property can be set through `properties` (they override our defaults, except
// that the delivery-report callback is ours).
//
// Message headers (all UTF-8 text):
//   outbox-event-id        the event's UUID (stable across re-publish; dedup by it)
//   outbox-event-type      Event::event_type
//   outbox-aggregate-type  Event::aggregate_type
//   outbox-aggregate-id    Event::aggregate_id
//   outbox-dedup-key       Event::dedup_key, when set
//   outbox-created-at      enqueue time, RFC 3339 UTC with microseconds
//   outbox-attempt         the claim attempt that published this copy
//   ...                    then the event's own headers (e.g. traceparent)
//
// Thread-safety: the transport is safe for concurrent use; the inbox source is
// not (one consumer thread, see consumer.h).
//
// Also here: the Kafka side of the inbox (OpenKafkaInboxSource: the consumer-
// group member, and the producer that forwards to retry and dead-letter topics,
// with the transport's producer defaults) and dead-letter replay.
#ifndef OUTBOX_KAFKA_H_
#define OUTBOX_KAFKA_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/inbox_source.h"
#include "outbox/log.h"
#include "outbox/status.h"
#include "outbox/transport.h"

namespace outbox {

// The producer's default message.max.bytes: enqueue's default limit
// (outbox.max_event_bytes = 1,000,000 bytes of payload + key + headers) plus
// room for the relay's own headers (at most ~1.4 KB) and their framing.
inline constexpr long kDefaultMessageMaxBytes = 1'000'000 + 8'192;

// The inbox's forwarding producer admits a forwarded copy of the largest event
// with its failure headers (consumer.h: at most ~10 KB), still below the
// broker's default message.max.bytes (1,048,588).
inline constexpr long kForwardMessageMaxBytes = kDefaultMessageMaxBytes + 16'384;

struct KafkaTransportOptions {
  // librdkafka properties, e.g. {"bootstrap.servers", "host:9092"}. Required:
  // bootstrap.servers. Ours, overridable: enable.idempotence=true, acks=all,
  // message.timeout.ms=10000, message.max.bytes=kDefaultMessageMaxBytes,
  // linger.ms=0, queue.buffering.max.kbytes=65536 (the
  // librdkafka default is 1 GiB), queue.buffering.max.messages=100000.
  std::map<std::string, std::string> properties;
  // Placeholders: {aggregate_type}, {event_type}. Default like Debezium's router.
  std::string topic_template = "outbox.event.{aggregate_type}";
  // Where librdkafka's own log lines and error callbacks go (with their reason
  // text; SSL and SASL failures show up there first). Borrowed: must outlive
  // the transport. Null: librdkafka logs to stderr itself and errors are only
  // reflected in publish results.
  Logger* logger = nullptr;
};

// The producer properties the transport sets before the user's (which override
// them): the list above, plus socket.nagle.disable=true and log_level=4. Also
// the inbox's forwarding producer's, but for message.max.bytes. docs/relay.md
// lists them; a test holds the two together. Immutable; lives forever.
const std::map<std::string, std::string>& KafkaProducerDefaults();

// Validates a topic template: known placeholders only, and the literal parts in
// Kafka's topic alphabet.
Status ValidateTopicTemplate(const std::string& tmpl);

// Renders the topic for an event (REQUIRES: a valid template and a valid event).
std::string RenderTopic(const std::string& tmpl, const Event& event);

// Creates the producer (does not wait for the broker: an unreachable broker is
// retried inside librdkafka and surfaces as kRetryable outcomes and !Healthy()).
// A bad property is InvalidArgument naming it.
Result<std::unique_ptr<Transport>> OpenKafkaTransport(const KafkaTransportOptions& options);

struct KafkaInboxSourceOptions {
  // librdkafka consumer properties; bootstrap.servers and group.id are required.
  // Ours, overridable: enable.auto.commit=false, enable.auto.offset.store=false,
  // auto.offset.reset=earliest, session.timeout.ms=10000,
  // heartbeat.interval.ms=1000. The forwarding producer takes the connection
  // and security properties (bootstrap.servers, security.*, sasl.*, ssl.*) from
  // here and the transport's producer defaults (KafkaTransportOptions), except
  // message.max.bytes = kForwardMessageMaxBytes.
  std::map<std::string, std::string> properties;
};

// Creates the consumer-group member (joins on Subscribe). A bad or missing
// property is InvalidArgument naming it. `logger` must outlive the source;
// rebalances are logged on the thread that calls Poll.
Result<std::unique_ptr<InboxSource>> OpenKafkaInboxSource(const KafkaInboxSourceOptions& options,
                                                          Logger& logger);

// Dead-letter replay: copies the messages of a dead-letter topic that match the
// filter back to their original topic (header outbox-original-topic), keeping
// key, value and the event's own headers, adding outbox-replayed-from. The
// dead-letter topic keeps them. Safe to run twice: the inbox absorbs what was
// already applied. (ReplayFilter, ReplayResult: inbox_source.h.)
Result<ReplayResult> ReplayDeadLetters(const std::map<std::string, std::string>& properties,
                                       const std::string& dlt_topic, const ReplayFilter& filter,
                                       bool dry_run, const ReplayProgress& progress = nullptr);

// What waits on the broker for a consumer group (outboxctl serve): per topic
// — a main topic, its retry topics (`<topic>.retry.N`) and its dead-letter
// topic (`<topic><dlt_suffix>`), those that exist — the messages it holds
// (high - low watermark, all partitions) and the group's lag on it (high -
// committed offset; a partition without a commit counts from its low mark).
struct TopicBacklog {
  std::string topic;
  std::string role;               // "main", "retry", "dead-letter"
  std::int64_t messages = 0;
  std::int64_t lag = 0;
  bool committed = false;         // the group has committed on some partition
};
// Reads metadata, watermarks and the group's committed offsets (no join, no
// commit). Unavailable when the broker does not answer within `timeout`.
Result<std::vector<TopicBacklog>> ConsumerBacklog(const std::map<std::string, std::string>& properties,
                                                  const std::string& group,
                                                  const std::vector<std::string>& topics,
                                                  const std::string& dlt_suffix = ".dlt",
                                                  std::chrono::milliseconds timeout =
                                                      std::chrono::seconds(10));

// The retention of a consumer's topics (outboxctl inbox purge): per topic —
// each main topic, its retry topics and its dead-letter topic, those that
// exist — what the broker reports (DescribeConfigs) and how long a message may
// stay readable: Kafka deletes whole segments, so up to retention.ms after its
// segment rolled (segment.ms); a topic compacted but not deleted keeps a key's
// last message forever. A main topic the broker does not have is NotFound; a
// broker that does not answer within `timeout` (the metadata, then the
// configurations: twice), cannot describe configurations or reports a value
// that is not a number is Unavailable.
struct TopicRetention {
  std::string topic;
  std::string role;               // "main", "retry", "dead-letter"
  std::int64_t retention_ms = 0;  // -1: forever
  std::int64_t segment_ms = 0;
  std::string cleanup_policy;     // "delete", "compact", "compact,delete"
  // retention.ms + segment.ms; -1 when messages may stay forever (retention.ms
  // -1, a policy without "delete", or a sum past what int64 holds).
  std::int64_t keep_ms = 0;
};
Result<std::vector<TopicRetention>> ReadTopicRetention(const std::map<std::string, std::string>& properties,
                                                       const std::vector<std::string>& topics,
                                                       const std::string& dlt_suffix = ".dlt",
                                                       std::chrono::milliseconds timeout =
                                                           std::chrono::seconds(10));

}  // namespace outbox

#endif  // OUTBOX_KAFKA_H_
