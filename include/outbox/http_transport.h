// HTTP delivery: a Transport that POSTs each event to a URL instead of
// producing to Kafka (relay.transport = http; docs/relay.md, "HTTP delivery").
//
// Each request:
//   POST <url_template with {aggregate_type} and {event_type} filled in>
//   body                   the payload bytes
//   Idempotency-Key        the event id (stable across re-delivery: dedup by it)
//   Outbox-Event-Id        the event id
//   Outbox-Aggregate-Type, Outbox-Aggregate-Id, Outbox-Event-Type
//   Outbox-Dedup-Key       when the event has one
//   Outbox-Attempt         the claim attempt that sent this copy
//   ...                    the event's own headers (traceparent included), then
//                          the configured extra headers (they win on a clash);
//                          an event header named like one the transport sets
//                          (Idempotency-Key, Outbox-* in any case, the framing
//                          ones) is not sent, and a configured one is refused
//   Content-Type           the event's content-type header, else
//                          application/octet-stream
//
// The same contract as Kafka (transport.h):
//   - order: one request in flight per aggregate, the next only after a 2xx;
//     once one fails, the later events of its aggregate in the call are
//     kNotSent;
//   - outages never FAIL: connection errors, timeouts, 408, 429 and 5xx (and an
//     event not sent before the deadline) are kRetryable with
//     broker_unavailable and outage_for_event, even when others of the batch
//     went through; a Retry-After on any of them is honoured through
//     PublishResult::retry_after;
//   - permanent refusals: any other status (3xx, 4xx) is kFatal, with the status
//     and the first bytes of the body in the error;
//   - a request answered 2xx after its timeout was delivered but is retried:
//     the receiver sees the same Idempotency-Key twice (at least once).
//
// Thread-safety: safe for concurrent use (several relay workers publish
// through one transport). Ownership: owns its connections; no borrowed state.
#ifndef OUTBOX_HTTP_TRANSPORT_H_
#define OUTBOX_HTTP_TRANSPORT_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "outbox/status.h"
#include "outbox/transport.h"

namespace outbox {

struct HttpTransportOptions {
  // http:// or https://HOST[:PORT]/PATH, with {aggregate_type} and
  // {event_type} anywhere in the path (percent-encoded when filled in).
  std::string url_template;
  // Bounds one Publish call (a batch): each request gets what is left of it. A
  // request still unanswered then is retried (kRetryable). 10 s, as Kafka's
  // message.timeout.ms here. A call ends within 2 x timeout + 1 s
  // (MaxPublishTime: a connection being opened at the deadline, TCP or TLS,
  // ends on its own timeouts; name resolution is not bounded).
  std::chrono::milliseconds timeout{10000};
  // Aggregates of a batch delivered at once, each on its own keep-alive
  // connection. 8: a batch's aggregates go in parallel without opening a
  // connection per event against a receiver with a small thread pool.
  int concurrency = 8;
  // Extra request headers, e.g. {"Authorization", "Bearer ..."}.
  std::map<std::string, std::string> headers;
  // https only: verify the server's certificate and name (on by default), and
  // against this CA file instead of the system's when set.
  bool tls_verify = true;
  std::string tls_ca_file;
};

// Validates a URL template: http or https, a host, known placeholders only (in
// the path), no user-info. InvalidArgument saying what is wrong.
Status ValidateHttpUrlTemplate(const std::string& tmpl);

// The URL for an event (REQUIRES: a valid template).
std::string RenderHttpUrl(const std::string& tmpl, const Event& event);

// Checks the options (the URL template, timeout > 0, concurrency 1..256, a
// readable CA file, header names and values fit for HTTP); opens no connection
// (an unreachable server surfaces as kRetryable outcomes and !Healthy()).
Result<std::unique_ptr<Transport>> OpenHttpTransport(const HttpTransportOptions& options);

}  // namespace outbox

#endif  // OUTBOX_HTTP_TRANSPORT_H_
