// RabbitMQ transport on rabbitmq-c (librabbitmq 0.11): relay.transport =
// rabbitmq (docs/relay.md, "RabbitMQ delivery").
//
// Each event is one persistent message (delivery_mode 2), published with
// `mandatory` set, on a channel in confirm mode:
//   exchange      exchange_template with {aggregate_type} / {event_type} filled in
//                 (characters RabbitMQ does not allow in a name become '_')
//   routing key   the aggregate id
//   message_id    the event id (stable across re-publish: dedup by it)
//   timestamp     the enqueue time (seconds)
//   content_type  the event's content-type header, else application/octet-stream
//   headers       outbox-event-id, outbox-event-type, outbox-aggregate-type,
//                 outbox-aggregate-id, outbox-dedup-key (when set),
//                 outbox-created-at, outbox-attempt — as on Kafka — then the
//                 event's own headers (long strings)
//
// The contract of transport.h:
//   - acked: the broker's basic.ack (`multiple` included) for the message, and
//     no basic.return before it;
//   - a basic.return (no queue bound for the routing key) is kFatal naming the
//     exchange and the key;
//   - outages are kRetryable with broker_unavailable and never FAIL an event: a
//     connection refused or lost, a channel or connection closed by the broker,
//     a basic.nack, connection.blocked (a memory or disk alarm), no confirm
//     before the deadline;
//   - an exchange that does not exist (with `declare` off) is kRetryable, not an
//     outage (it counts toward max_attempts), naming the exchange; the later
//     events of its aggregates in the call are kNotSent;
//   - an event AMQP cannot carry (content-type or aggregate id over 255 bytes,
//     headers over one header frame) is kFatal before it is sent;
//   - order: a call publishes on one channel, in the call's order; RabbitMQ
//     routes a channel's messages in publication order, so an aggregate's
//     events reach its queue in order. Not covered: a basic.nack of an earlier
//     event with a later one acked (the broker's internal error; the relay
//     counts it: outbox_relay_events_acked_out_of_order_total), and a kFatal
//     event with later ones acked (transport.h).
//   - a call ends within MaxPublishTime(): a connection whose call passed its
//     deadline (a send blocked by a broker that stopped reading) is shut down
//     by a watchdog.
//
// Thread-safety: the transport is safe for concurrent use: each Publish call
// takes a connection of its own from a pool (one per concurrent call, opened on
// demand, closed on any error). Ownership: owns its connections and watchdog
// thread.
#ifndef OUTBOX_RABBITMQ_H_
#define OUTBOX_RABBITMQ_H_

#include <chrono>
#include <memory>
#include <string>

#include "outbox/event.h"
#include "outbox/status.h"
#include "outbox/transport.h"

namespace outbox {

struct RabbitMqTransportOptions {
  // amqp://USER:PASSWORD@HOST[:PORT]/VHOST (port 5672; the vhost percent-encoded:
  // %2F for "/") or amqps://... (TLS, port 5671). Never printed with its password.
  std::string url;
  // Placeholders: {aggregate_type}, {event_type}.
  std::string exchange_template = "outbox.event.{aggregate_type}";
  // Declare each exchange (durable, of exchange_type) on first use. Off: the
  // exchanges must exist (docs/relay.md says what to declare by hand).
  bool declare = false;
  std::string exchange_type = "topic";  // direct, topic, fanout, headers, x-consistent-hash
  // Bounds one Publish call: connecting, publishing and the confirms. 10 s, as
  // Kafka's message.timeout.ms here.
  std::chrono::milliseconds timeout{10000};
  // amqps only: verify the server's certificate and name (on by default),
  // against this CA file instead of the system's when set; a client
  // certificate and key for brokers that ask for one.
  bool tls_verify = true;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Checks an AMQP URL: amqp or amqps, a host, a port in 1..65535, user and
// password present. InvalidArgument saying what is wrong, without the password.
Status ValidateAmqpUrl(const std::string& url);
// The URL with its password replaced by "***" (for logs and errors).
std::string RedactAmqpUrl(const std::string& url);

// Validates an exchange template: known placeholders only, literal parts in
// RabbitMQ's name alphabet (letters, digits, '-', '_', '.', ':').
Status ValidateExchangeTemplate(const std::string& tmpl);
// The exchange for an event (REQUIRES: a valid template), at most 255 bytes.
std::string RenderExchange(const std::string& tmpl, const Event& event);

// Checks the options: URL, template, exchange type, timeout > 0, readable TLS
// files. InvalidArgument naming the key (rabbitmq.*), without the password.
Status ValidateRabbitMqOptions(const RabbitMqTransportOptions& options);

// ValidateRabbitMqOptions, then the transport; opens no connection (an unreachable broker surfaces as kRetryable
// outcomes and !Healthy()).
Result<std::unique_ptr<Transport>> OpenRabbitMqTransport(const RabbitMqTransportOptions& options);

}  // namespace outbox

#endif  // OUTBOX_RABBITMQ_H_
