// What the RabbitMQ transport (the relay's side) and the RabbitMQ inbox source
// (the consumer's side) share: the URL, frames as text, and opening a logged-in
// connection. Internal to src/transport/rabbitmq.
#ifndef OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_
#define OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_

#include <amqp.h>
#include <amqp_framing.h>
#include <sys/time.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

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

// A connection someone owns; destroyed (the socket closed, the broker requeues
// what was not acked) with it.
struct Connection {
  amqp_connection_state_t state = nullptr;
  int fd = -1;  // the socket, once open
  explicit Connection(amqp_connection_state_t s) : state(s) {}
  ~Connection() {
    if (state) amqp_destroy_connection(state);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
};

// While alive, shuts `fd` down past `deadline` (and a grace): a send that a
// broker which stopped reading (a memory alarm) blocks then fails instead of
// hanging. rabbitmq-c bounds RPCs, not publishes.
class SendWatchdog {
 public:
  SendWatchdog(int fd, Clock::time_point deadline);
  ~SendWatchdog();
  SendWatchdog(const SendWatchdog&) = delete;
  SendWatchdog& operator=(const SendWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is
};

// A table entry and a long-string value (borrowing `key` and `s`).
amqp_table_entry_t Entry(const char* key, amqp_field_value_t value);
amqp_field_value_t Utf8(const std::string& s);

// A connection.close or channel.close frame as text ("the broker closed the
// connection: 320 CONNECTION_FORCED - ..."); false for any other frame.
bool CloseText(const amqp_frame_t& f, std::string* why);

// What the inbox reads of a delivered message into `m`: the key (the routing
// key, or the header kRabbitMqKeyHeader when present), the payload, the
// headers as text, the event id from message_id when no header has it, the
// timestamp (the property, else now). Topic, partition and offset are the
// caller's.
void ReadMessage(const amqp_message_t& msg, amqp_bytes_t routing_key, InboundMessage* m);

// Publishes `payload` persistent, with `mandatory`: `headers` as long
// strings, message_id from the header outbox-event-id, the timestamp now, and
// `expiration` (ms, as text) when not empty. rabbitmq-c's status.
int PublishMessage(amqp_connection_state_t state, amqp_channel_t channel, const std::string& exchange,
                   const std::string& routing_key, const std::map<std::string, std::string>& headers,
                   const std::string& payload, const std::string& expiration);

// Waits on `state` until the broker confirmed (basic.ack, `multiple`
// included) every delivery tag in `unconfirmed` (erased as confirmed).
// Unavailable naming `what` on a nack, a basic.return (no queue for a message
// published with `mandatory`: named by exchange and routing key), a lost or
// closed connection, or `deadline`.
Status AwaitConfirms(amqp_connection_state_t state, Clock::time_point deadline, const char* what,
                     std::map<std::uint64_t, bool>* unconfirmed);

}  // namespace outbox::amqp_internal

#endif  // OUTBOX_SRC_TRANSPORT_RABBITMQ_AMQP_COMMON_H_
