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
#include <vector>

#include "outbox/event.h"
#include "outbox/inbox_source.h"
#include "outbox/log.h"
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

// ---- The inbox source: the C++ Consumer and outbox-consumer on RabbitMQ ----
//
// A handler's topic is an exchange; its group reads it through queues of its
// own, all durable, declared at each connection:
//   <group>.<topic>              bound to the exchange for every key ("#" on a
//                                topic exchange, "" on fanout/headers, weight
//                                "1" on x-consistent-hash); with
//                                x-single-active-consumer when
//                                single_active_consumer (ordered handlers)
//   <group>.<topic>.retry.N      one per retry delay; a copy waits there until
//                                due (its per-message expiration), then
//                                dead-letters back to <group>.<topic>
//   <group>.<topic><dlt_suffix>  the dead-letter queue
// Several processes with the same group share the queue (competing consumers;
// with single_active_consumer, one reads and the others stand by).
//
// In the engine's words (inbox_source.h): the partition is the consuming
// session (a new number at each connection), the offset the delivery tag.
// Commit acks (multiple) up to the last offset of the current session; a
// session that ended gives its unacked deliveries back to the queue, so an
// offset of an earlier session is never acked. Rewind ends the session for the
// same reason. Forwarded copies are persistent, published with confirms on a
// connection of their own; the message's key travels in the header
// kRabbitMqKeyHeader (a copy from a retry queue arrives with the queue's name
// as its routing key), a retry copy's topic in kRabbitMqRetryTopicHeader. A
// retry copy delivered before its due time (clocks apart) ends the session
// until it is due (Pause), so nothing after it is acked. Lag is the main
// queue's depth (messages ready), read at most once a second on a connection
// of its own (an RPC on the consuming one stalls deliveries). An unreachable broker or a refused declare (say a queue
// that exists with other arguments) is retried with backoff and said by
// NotReadyReason, naming the queue or exchange.
//
// Thread-safety: as InboxSource (one thread; NotReadyReason from any).
// Ownership: owns its connections (consuming, forwarding, and one for the
// queue depth); borrows `logger`, which must outlive it.
inline constexpr char kRabbitMqKeyHeader[] = "outbox-message-key";
// On a copy in a retry queue: the retry topic (<topic>.retry.N) it is
// delivered as when it comes back, so that the engine counts its attempts.
inline constexpr char kRabbitMqRetryTopicHeader[] = "outbox-retry-topic";

struct RabbitMqInboxSourceOptions {
  // The connection (url, tls_*, timeout: each connect and each forward) and
  // the exchanges (exchange_type; declare: declare them, else they must
  // exist). exchange_template is not used. Queues are always declared.
  RabbitMqTransportOptions broker;
  std::string group;  // required: names the queues
  std::string dlt_suffix = ".dlt";
  // Unacked deliveries the broker sends ahead (basic.qos), 1..65535: the
  // source holds up to this many messages (times the largest message) in
  // memory. 4x the engine's batch: the next batches arrive while one applies
  // (docs/benchmarks.md, "outbox-consumer on RabbitMQ").
  int prefetch = 2000;
  bool single_active_consumer = false;  // ordered handlers: one reader per queue at a time
};

// "<group>.<topic>": the group's queue for a topic.
std::string RabbitMqQueueName(const std::string& group, const std::string& topic);

// Declares, once, on a connection of its own, what the source declares for
// `topics` (as Subscribe takes them): what outbox-consumer does at start, so
// that a refused declaration is a configuration error before anything else.
// InvalidArgument when the broker refuses one as inequivalent to what exists
// (406 PRECONDITION_FAILED: a queue that exists with other arguments, say an
// unordered handler's queue for an ordered one, or an exchange of another
// type), naming it; Unavailable when the broker cannot be reached or refuses
// for another reason (the source retries it).
Status DeclareRabbitMqInbox(const RabbitMqInboxSourceOptions& options,
                           const std::vector<std::string>& topics);

// Dead-letter replay (outboxctl dlt replay --queue): takes the messages in the
// dead-letter queue `dlt_queue` now (say "billing.orders.dlt") and sends those
// that match `filter` back to the group's main queue — "<outbox-group>.<outbox-original-topic>",
// through the default exchange, so no other group gets them again (a copy
// without outbox-group goes to its topic's exchange with its key) — without
// the failure headers and with outbox-replayed-from = "<dlt_queue>/<n>" (n:
// its place when taken). Each replayed message is acked, leaving the queue,
// only once its copy is confirmed (a crash in between sends it twice; the
// inbox absorbs it); the others, and all of them with `dry_run`, go back to
// the queue in their place. The time filter reads the copy's timestamp
// property (when it was dead-lettered, to the second). A copy whose group's
// queue does not exist stays, listed in not_replayable. The connection has
// heartbeats (half rabbitmq.timeout_ms, 1..30 s): a broker that goes silent
// ends the call. The messages taken are held unacked until the end: a replay
// longer than the broker's consumer_timeout (30 min by default) has its
// channel closed, and they go back. NotFound when the queue does not exist;
// Unavailable when the broker cannot be reached or refuses a copy (the
// messages of its chunk stay dead-lettered).
Result<ReplayResult> ReplayRabbitMqDeadLetters(const RabbitMqTransportOptions& broker,
                                               const std::string& dlt_queue, const ReplayFilter& filter,
                                               bool dry_run, const ReplayProgress& progress = nullptr);

// Validates the options (InvalidArgument naming the key, never the password;
// exchange_type direct is refused: it cannot route every key to one queue)
// and creates the source; it connects at the first Poll or Forward.
Result<std::unique_ptr<InboxSource>> OpenRabbitMqInboxSource(const RabbitMqInboxSourceOptions& options,
                                                             Logger& logger);

}  // namespace outbox

#endif  // OUTBOX_RABBITMQ_H_
