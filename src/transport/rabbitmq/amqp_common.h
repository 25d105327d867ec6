// What the RabbitMQ transport (the relay's side) and the RabbitMQ inbox source
// (the consumer's side) share: the URL, frames as text, and opening a logged-in
// connection. Internal to src/transport/rabbitmq.
#ifndef OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_
#define OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_

#include <amqp.h>
#include <amqp_framing.h>
#include <sys/time.h>

#include <chrono>
#include <functional>
#include <string>

#include "outbox/rabbitmq.h"
#include "outbox/status.h"

namespace outbox::amqp_internal {

using Clock = std::chrono::steady_clock;

// The frame size asked for at login (RabbitMQ's default maximum): the
// properties and headers of a message must fit in one header frame.
inline constexpr int kFrameMax = 131072;

// Letters, digits, '.', '_', '-', ':': what RabbitMQ allows in a name.
bool IsNameChar(char c);

// The parts of an AMQP URL.
struct AmqpUrl {
  std::string user, password, host, vhost;
  int port = 0;
  bool tls = false;
};
// InvalidArgument saying what is wrong, with the password redacted.
Result<AmqpUrl> ParseAmqpUrl(const std::string& url);

// Borrowed bytes of `s` (valid while `s` is unchanged).
amqp_bytes_t Bytes(const std::string& s);
std::string Text(amqp_bytes_t b);
// A reply as text: "" when normal, else `what`: and why (a closed channel or
// connection with the broker's code and text).
std::string ReplyText(const amqp_rpc_reply_t& r, const char* what);
timeval Tv(Clock::duration d);

// A header value as text: strings as they are, numbers and booleans printed;
// false for kinds with no text (tables, arrays, void).
bool FieldText(const amqp_field_value_t& v, std::string* out);

// Opens the socket (TLS for amqps, as `options` says) and logs in on `state`,
// which the caller created and owns (and destroys on failure). `on_socket` is
// called with the socket's descriptor once it is open (a watchdog may shut it
// down past the deadline). `heartbeat_s`: 0 = none. False with `error` naming
// the broker's address and the step.
bool OpenAndLogin(amqp_connection_state_t state, const AmqpUrl& url,
                  const RabbitMqTransportOptions& options, const char* connection_name,
                  int heartbeat_s, Clock::time_point deadline,
                  const std::function<void(int)>& on_socket, std::string* error);

// Opens `channel`; with `confirms`, in confirm mode.
bool OpenChannel(amqp_connection_state_t state, amqp_channel_t channel, bool confirms,
                 std::string* error);

}  // namespace outbox::amqp_internal

#endif  // OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_
