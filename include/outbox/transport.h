// Transport: publishes claimed events to a broker and reports, per event, what
// the broker said. The relay's retry / set-aside decision is made on
// PublishOutcome alone; every broker-specific error is classified inside the
// transport, in one place.
//
// Thread-safety: implementations are safe for concurrent use; several relay
// workers publish through one transport at once.
#ifndef OUTBOX_TRANSPORT_H_
#define OUTBOX_TRANSPORT_H_

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.h"

namespace outbox {

enum class PublishOutcome {
  kAcked,      // the broker has it (acks=all)
  kRetryable,  // try again later: timeout, broker down, leader change, ...
  kFatal,      // will never succeed as is: message too large, not authorised, bad topic
  // Never handed to the broker: an earlier event of its aggregate in the same
  // Publish call failed before it (see Transport::Publish). Not the event's own
  // failure; the relay gives its attempt back.
  kNotSent,
};

std::string_view PublishOutcomeName(PublishOutcome o);

struct PublishResult {
  PublishOutcome outcome = PublishOutcome::kRetryable;
  std::string error;  // broker's error name and text; empty when acked
  // kRetryable only: the broker could not be reached (message timed out, all
  // brokers down, local queue full, no delivery report in time) — nothing says
  // the event itself is at fault. A batch whose every failure is of this kind is
  // an outage: it does not count toward max_attempts (docs/relay.md).
  bool broker_unavailable = false;
  // kRetryable only: the server asked to be left alone this long (HTTP's
  // Retry-After); the retry, or the shared outage backoff, is not due before
  // it. Zero: no such request.
  std::chrono::milliseconds retry_after{0};
  // kRetryable only: the receiver was unavailable for this event alone (HTTP:
  // no answer, 408, 429, 5xx; or never sent before the deadline), while
  // others of the batch may have gone through. Outage semantics per event:
  // its attempt is given back and it is never FAILED for it (docs/relay.md,
  // "HTTP delivery"). Kafka leaves it false: there an event's own timeout in
  // a batch that otherwise went through counts.
  bool outage_for_event = false;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Publishes `events` (in order; per key, the broker keeps that order) and
  // blocks until every one has an outcome. Returns one result per event, same
  // index. Never takes longer than MaxPublishTime(): an event without a delivery
  // report by then is kRetryable.
  //
  // Order under failure: once an event fails before it reached the broker
  // (refused locally: over the size limit, local queue full past the deadline,
  // producer unavailable), no later event of the same aggregate (aggregate_type,
  // aggregate_id) in this call is handed to the broker; those come back
  // kNotSent. And an event that is not reported in time does not let a later
  // event of its aggregate (same partition) through: no later one comes back
  // kAcked after an earlier one timed out or was purged (the Kafka transport
  // purges its queues at the deadline; events of other aggregates may then
  // fail with it, retryable). Nothing of the call stays queued after it
  // returns; a request already sent may still be written (possibly persisted).
  // Not covered: an event the broker refuses for good (kFatal); the events
  // after it may be acked (docs/relay.md).
  virtual std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) = 0;

  // Upper bound of one Publish call; the relay's lease must be longer.
  virtual std::chrono::milliseconds MaxPublishTime() const = 0;
  // How MaxPublishTime() is made up, naming the settings (for error messages).
  virtual std::string DescribeMaxPublishTime() const { return "the transport's publish timeout"; }

  // False while the broker has been unreachable recently (for /readyz).
  virtual bool Healthy() const = 0;
  // What /readyz says while !Healthy(), naming the part that is down.
  virtual std::string UnhealthyReason() const { return "broker unreachable"; }
  // What the transport delivers to, as the relay's logs and /readyz name it:
  // "broker" (Kafka) or "receiver" (HTTP delivery).
  virtual std::string PeerName() const { return "broker"; }
};

}  // namespace outbox

#endif  // OUTBOX_TRANSPORT_H_
