#include "amqp_common.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <sys/socket.h>

#include <algorithm>
#include <vector>

namespace outbox::amqp_internal {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-' || c == ':';
}

Result<AmqpUrl> ParseAmqpUrl(const std::string& url) {
  const std::string shown = RedactAmqpUrl(url);
  if (url.rfind("amqp://", 0) != 0 && url.rfind("amqps://", 0) != 0) {
    return Status::InvalidArgument("\"" + shown + "\" must start with amqp:// or amqps://");
  }
  std::vector<char> buf(url.begin(), url.end());
  buf.push_back('\0');
  amqp_connection_info info;
  amqp_default_connection_info(&info);
  if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) {
    return Status::InvalidArgument("\"" + shown +
                                   "\" is not amqp[s]://USER:PASSWORD@HOST[:PORT]/VHOST (PORT in 1..65535, the "
                                   "VHOST percent-encoded)");
  }
  AmqpUrl u;
  u.user = info.user ? info.user : "";
  u.password = info.password ? info.password : "";
  u.host = info.host ? info.host : "";
  u.vhost = info.vhost ? info.vhost : "/";
  u.port = info.port;
  u.tls = info.ssl != 0;
  if (u.host.empty()) return Status::InvalidArgument("\"" + shown + "\" has no host");
  if (u.port < 1 || u.port > 65535) {
    return Status::InvalidArgument("\"" + shown + "\": the port must be 1..65535");
  }
  if (u.vhost.empty()) u.vhost.push_back('/');  // (= "/" trips GCC 12's -Wrestrict at -O2)
  return u;
}

amqp_bytes_t Bytes(const std::string& s) {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};
}

std::string Text(amqp_bytes_t b) {
  return std::string(static_cast<const char*>(b.bytes), b.len);
}

std::string ReplyText(const amqp_rpc_reply_t& r, const char* what) {
  switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return "";
    case AMQP_RESPONSE_NONE:
      return std::string(what) + ": no reply (missing RPC reply type)";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return std::string(what) + ": " + amqp_error_string2(r.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        auto* m = static_cast<amqp_connection_close_t*>(r.reply.decoded);
        return std::string(what) + ": the broker closed the connection: " +
               std::to_string(m->reply_code) + " " + Text(m->reply_text);
      }
      if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        auto* m = static_cast<amqp_channel_close_t*>(r.reply.decoded);
        return std::string(what) + ": the broker closed the channel: " +
               std::to_string(m->reply_code) + " " + Text(m->reply_text);
      }
      return std::string(what) + ": unexpected reply from the broker";
  }
  return std::string(what) + ": unknown reply";
}

timeval Tv(Clock::duration d) {
  const auto us = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

bool FieldText(const amqp_field_value_t& v, std::string* out) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      *out = Text(v.value.bytes);
      return true;
    case AMQP_FIELD_KIND_BOOLEAN:
      *out = v.value.boolean ? "true" : "false";
      return true;
    case AMQP_FIELD_KIND_I8: *out = std::to_string(v.value.i8); return true;
    case AMQP_FIELD_KIND_U8: *out = std::to_string(v.value.u8); return true;
    case AMQP_FIELD_KIND_I16: *out = std::to_string(v.value.i16); return true;
    case AMQP_FIELD_KIND_U16: *out = std::to_string(v.value.u16); return true;
    case AMQP_FIELD_KIND_I32: *out = std::to_string(v.value.i32); return true;
    case AMQP_FIELD_KIND_U32: *out = std::to_string(v.value.u32); return true;
    case AMQP_FIELD_KIND_I64: *out = std::to_string(v.value.i64); return true;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP: *out = std::to_string(v.value.u64); return true;
    default:
      return false;
  }
}

bool OpenAndLogin(amqp_connection_state_t state, const AmqpUrl& url,
                  const RabbitMqTransportOptions& options, const char* connection_name,
                  int heartbeat_s, Clock::time_point deadline,
                  const std::function<void(int)>& on_socket, std::string* error) {
  const std::string where = "rabbitmq " + url.host + ":" + std::to_string(url.port);
  amqp_socket_t* socket = nullptr;
  if (url.tls) {
    socket = amqp_ssl_socket_new(state);
    if (socket) {
      amqp_ssl_socket_set_verify_peer(socket, options.tls_verify ? 1 : 0);
      amqp_ssl_socket_set_verify_hostname(socket, options.tls_verify ? 1 : 0);
      if (!options.tls_ca_file.empty() &&
          amqp_ssl_socket_set_cacert(socket, options.tls_ca_file.c_str()) != AMQP_STATUS_OK) {
        *error = where + ": cannot read rabbitmq.tls_ca_file " + options.tls_ca_file;
        return false;
      }
      if (!options.tls_cert_file.empty() &&
          amqp_ssl_socket_set_key(socket, options.tls_cert_file.c_str(),
                                  options.tls_key_file.c_str()) != AMQP_STATUS_OK) {
        *error = where + ": cannot use rabbitmq.tls_cert_file / tls_key_file";
        return false;
      }
    }
  } else {
    socket = amqp_tcp_socket_new(state);
  }
  if (!socket) {
    *error = where + ": cannot create a socket";
    return false;
  }
  timeval tv = Tv(deadline - Clock::now());
  if (int rc = amqp_socket_open_noblock(socket, url.host.c_str(), url.port, &tv);
      rc != AMQP_STATUS_OK) {
    *error = where + ": connect: " + amqp_error_string2(rc);
    return false;
  }
  if (on_socket) on_socket(amqp_socket_get_sockfd(socket));
  tv = Tv(deadline - Clock::now());
  amqp_set_handshake_timeout(state, &tv);
  amqp_set_rpc_timeout(state, &tv);
  // Capabilities: connection.blocked (alarms are told, not only felt),
  // authentication_failure_close (a bad password is said as such),
  // consumer_cancel_notify (a deleted queue cancels its consumer).
  const char* const kCaps[] = {"connection.blocked", "authentication_failure_close",
                               "publisher_confirms", "basic.nack", "consumer_cancel_notify"};
  constexpr int kNumCaps = 5;
  amqp_table_entry_t caps[kNumCaps];
  for (int i = 0; i < kNumCaps; ++i) {
    caps[i].key = amqp_cstring_bytes(kCaps[i]);
    caps[i].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[i].value.value.boolean = 1;
  }
  amqp_table_entry_t props[2];
  props[0].key = amqp_cstring_bytes("capabilities");
  props[0].value.kind = AMQP_FIELD_KIND_TABLE;
  props[0].value.value.table = amqp_table_t{kNumCaps, caps};
  props[1].key = amqp_cstring_bytes("connection_name");
  props[1].value.kind = AMQP_FIELD_KIND_UTF8;
  props[1].value.value.bytes = amqp_cstring_bytes(connection_name);
  const amqp_table_t client{2, props};
  amqp_rpc_reply_t r = amqp_login_with_properties(
      state, url.vhost.c_str(), 0, kFrameMax, heartbeat_s, &client, AMQP_SASL_METHOD_PLAIN,
      url.user.c_str(), url.password.c_str());
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    *error = ReplyText(r, (where + ": login as " + url.user + " to vhost " + url.vhost).c_str());
    return false;
  }
  return true;
}

bool OpenChannel(amqp_connection_state_t state, amqp_channel_t channel, bool confirms,
                 std::string* error) {
  amqp_channel_open(state, channel);
  amqp_rpc_reply_t r = amqp_get_rpc_reply(state);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    *error = ReplyText(r, "channel.open");
    return false;
  }
  if (!confirms) return true;
  amqp_confirm_select(state, channel);
  r = amqp_get_rpc_reply(state);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    *error = ReplyText(r, "confirm.select");
    return false;
  }
  return true;
}

SendWatchdog::SendWatchdog(int fd, Clock::time_point deadline)
    : thread_([this, fd, deadline] {
        std::unique_lock<std::mutex> l(mu_);
        if (!cv_.wait_until(l, deadline + std::chrono::milliseconds(500), [this] { return done_; })) {
          ::shutdown(fd, SHUT_RDWR);
        }
      }) {}

SendWatchdog::~SendWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

amqp_table_entry_t Entry(const char* key, amqp_field_value_t value) {
  amqp_table_entry_t e;
  e.key = amqp_cstring_bytes(key);
  e.value = value;
  return e;
}

amqp_field_value_t Utf8(const std::string& s) {
  amqp_field_value_t v;
  v.kind = AMQP_FIELD_KIND_UTF8;
  v.value.bytes = Bytes(s);
  return v;
}

void ReadMessage(const amqp_message_t& msg, amqp_bytes_t routing_key, InboundMessage* m) {
  m->key = Text(routing_key);
  m->payload = Text(msg.body);
  const amqp_basic_properties_t& p = msg.properties;
  if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
    for (int i = 0; i < p.headers.num_entries; ++i) {
      std::string v;
      if (FieldText(p.headers.entries[i].value, &v)) m->headers[Text(p.headers.entries[i].key)] = v;
    }
  }
  if (auto k = m->headers.find(std::string(kRabbitMqKeyHeader)); k != m->headers.end()) m->key = k->second;
  if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) && !m->headers.count("outbox-event-id")) {
    m->headers["outbox-event-id"] = Text(p.message_id);
  }
  m->timestamp = (p._flags & AMQP_BASIC_TIMESTAMP_FLAG)
                     ? std::chrono::system_clock::time_point(std::chrono::seconds(p.timestamp))
                     : std::chrono::system_clock::now();
}

int PublishMessage(amqp_connection_state_t state, amqp_channel_t channel, const std::string& exchange,
                   const std::string& routing_key, const std::map<std::string, std::string>& headers,
                   const std::string& payload, const std::string& expiration) {
  std::vector<amqp_table_entry_t> entries;
  entries.reserve(headers.size());
  for (const auto& [name, value] : headers) {
    amqp_table_entry_t e;
    e.key = Bytes(name);
    e.value = Utf8(value);
    entries.push_back(e);
  }
  amqp_basic_properties_t p{};
  p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  p.headers = amqp_table_t{static_cast<int>(entries.size()), entries.data()};
  p.timestamp = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  if (auto id = headers.find("outbox-event-id"); id != headers.end()) {
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    p.message_id = Bytes(id->second);
  }
  if (!expiration.empty()) {
    p._flags |= AMQP_BASIC_EXPIRATION_FLAG;
    p.expiration = Bytes(expiration);
  }
  return amqp_basic_publish(state, channel, Bytes(exchange), Bytes(routing_key), /*mandatory=*/1, 0, &p,
                            Bytes(payload));
}

bool CloseText(const amqp_frame_t& f, std::string* why) {
  if (f.frame_type != AMQP_FRAME_METHOD) return false;
  if (f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
    auto* m = static_cast<amqp_connection_close_t*>(f.payload.method.decoded);
    *why = "the broker closed the connection: " + std::to_string(m->reply_code) + " " + Text(m->reply_text);
    return true;
  }
  if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
    auto* m = static_cast<amqp_channel_close_t*>(f.payload.method.decoded);
    *why = "the broker closed the channel: " + std::to_string(m->reply_code) + " " + Text(m->reply_text);
    return true;
  }
  return false;
}

Status AwaitConfirms(amqp_connection_state_t state, Clock::time_point deadline, const char* what,
                     std::map<std::uint64_t, bool>* unconfirmed) {
  std::string returned;
  while (!unconfirmed->empty()) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      return Status::Unavailable(std::string("rabbitmq: ") + what + " not confirmed within rabbitmq.timeout_ms");
    }
    timeval tv = Tv(left);
    amqp_frame_t f;
    const int rc = amqp_simple_wait_frame_noblock(state, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) continue;
    if (rc != AMQP_STATUS_OK) {
      return Status::Unavailable(std::string("rabbitmq: connection lost while awaiting confirms of ") + what +
                                 ": " + amqp_error_string2(rc));
    }
    if (f.frame_type != AMQP_FRAME_METHOD) continue;  // a returned message's content
    std::string closed;
    if (CloseText(f, &closed)) return Status::Unavailable("rabbitmq: " + closed);
    switch (f.payload.method.id) {
      case AMQP_BASIC_NACK_METHOD:
        return Status::Unavailable(std::string("rabbitmq: basic.nack: the broker could not take ") + what);
      case AMQP_BASIC_ACK_METHOD: {
        auto* m = static_cast<amqp_basic_ack_t*>(f.payload.method.decoded);
        if (m->multiple) {
          unconfirmed->erase(unconfirmed->begin(), unconfirmed->upper_bound(m->delivery_tag));
        } else {
          unconfirmed->erase(m->delivery_tag);
        }
        break;
      }
      case AMQP_BASIC_RETURN_METHOD: {
        auto* m = static_cast<amqp_basic_return_t*>(f.payload.method.decoded);
        returned = "no queue for " + std::string(what) + ": exchange '" + Text(m->exchange) + "', routing key '" +
                   Text(m->routing_key) + "' (" + Text(m->reply_text) + ")";
        break;
      }
      default:
        break;
    }
    amqp_maybe_release_buffers(state);
  }
  // A returned message is acked too (it was handled: dropped): not delivered.
  if (!returned.empty()) return Status::Unavailable("rabbitmq: " + returned);
  return Status::Ok();
}

}  // namespace outbox::amqp_internal
