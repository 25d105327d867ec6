// relay.envelope = cloudevents: binary-mode CloudEvents 1.0 attributes on every
// transport, the payload unchanged (docs/relay.md, "CloudEvents").
//
// Each published message carries, besides the outbox-* headers:
//   <prefix>id           the event id
//   <prefix>source       the relay's cloudevents source (default /outbox/<schema>)
//   <prefix>type         Event::event_type
//   <prefix>specversion  1.0
//   <prefix>time         the enqueue time, RFC 3339 UTC with microseconds
//   <prefix>subject      Event::aggregate_id
// with the prefix of the transport's binding: Kafka headers `ce_`, AMQP
// application properties (RabbitMQ headers) `cloudEvents:`, HTTP headers `ce-`.
// The event's own headers of those names are replaced. The content type stays
// where it is (the event's content-type header): datacontenttype.
#ifndef OUTBOX_CLOUDEVENTS_H_
#define OUTBOX_CLOUDEVENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/transport.h"

namespace outbox {

inline constexpr char kCloudEventsKafkaPrefix[] = "ce_";
inline constexpr char kCloudEventsAmqpPrefix[] = "cloudEvents:";
inline constexpr char kCloudEventsHttpPrefix[] = "ce-";

// The six attributes above, named with `prefix`.
std::vector<Header> CloudEventsAttributes(const ClaimedEvent& e, const std::string& prefix,
                                          const std::string& source);

// A transport that publishes through `inner` with the attributes added to
// every event. Thread-safety, ownership: as `inner`, which it owns.
std::unique_ptr<Transport> WithCloudEvents(std::unique_ptr<Transport> inner, std::string prefix,
                                           std::string source);

}  // namespace outbox

#endif  // OUTBOX_CLOUDEVENTS_H_
