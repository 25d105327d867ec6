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
// Thread-safety: safe for concurrent use.
#ifndef OUTBOX_KAFKA_H_
#define OUTBOX_KAFKA_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "outbox/status.h"
#include "outbox/transport.h"

namespace outbox {

// The producer's default message.max.bytes: enqueue's default limit
// (outbox.max_event_bytes = 1,000,000 bytes of payload + key + headers) plus
// room for the relay's own headers (at most ~1.4 KB) and their framing.
inline constexpr long kDefaultMessageMaxBytes = 1'000'000 + 8'192;

struct KafkaTransportOptions {
  // librdkafka properties, e.g. {"bootstrap.servers", "host:9092"}. Required:
  // bootstrap.servers. Ours, overridable: enable.idempotence=true, acks=all,
  // message.timeout.ms=10000, message.max.bytes=kDefaultMessageMaxBytes,
  // linger.ms=5, queue.buffering.max.kbytes=65536 (the
  // librdkafka default is 1 GiB), queue.buffering.max.messages=100000.
  std::map<std::string, std::string> properties;
  // Placeholders: {aggregate_type}, {event_type}. Default like Debezium's router.
  std::string topic_template = "outbox.event.{aggregate_type}";
};

// Validates a topic template: known placeholders only, and the literal parts in
// Kafka's topic alphabet.
Status ValidateTopicTemplate(const std::string& tmpl);

// Renders the topic for an event (REQUIRES: a valid template and a valid event).
std::string RenderTopic(const std::string& tmpl, const Event& event);

// Creates the producer (does not wait for the broker: an unreachable broker is
// retried inside librdkafka and surfaces as kRetriable outcomes and !Healthy()).
// A bad property is InvalidArgument naming it.
Result<std::unique_ptr<Transport>> OpenKafkaTransport(const KafkaTransportOptions& options);

}  // namespace outbox

#endif  // OUTBOX_KAFKA_H_
