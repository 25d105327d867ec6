// A small blocking AMQP client for tests (rabbitmq-c): declares what a test
// needs on the testenv's RabbitMQ node and reads messages back with basic.get.
// Not thread-safe; one per test.
#ifndef OUTBOX_TESTS_RABBITMQ_HELPERS_H_
#define OUTBOX_TESTS_RABBITMQ_HELPERS_H_

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace outbox::testing {

struct AmqpMessage {
  std::string exchange, routing_key, body, message_id, content_type;
  int delivery_mode = 0;
  std::uint64_t timestamp = 0;
  std::map<std::string, std::string> headers;  // string-valued ones
};

class AmqpClient {
 public:
  // `url`: amqp://user:password@host:port/vhost. ok() is false when it failed.
  explicit AmqpClient(const std::string& url) {
    std::vector<char> buf(url.begin(), url.end());
    buf.push_back('\0');
    amqp_connection_info info;
    if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) return;
    conn_ = amqp_new_connection();
    amqp_socket_t* s = amqp_tcp_socket_new(conn_);
    if (amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK) return;
    if (amqp_login(conn_, info.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user,
                   info.password)
            .reply_type != AMQP_RESPONSE_NORMAL) {
      return;
    }
    timeval rpc{10, 0};  // a test that waits on a broken channel fails, never hangs
    amqp_set_rpc_timeout(conn_, &rpc);
    amqp_channel_open(conn_, 1);
    ok_ = amqp_get_rpc_reply(conn_).reply_type == AMQP_RESPONSE_NORMAL;
  }
  ~AmqpClient() {
    if (!conn_) return;
    if (ok_) {
      amqp_channel_close(conn_, 1, AMQP_REPLY_SUCCESS);
      amqp_connection_close(conn_, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(conn_);
  }
  AmqpClient(const AmqpClient&) = delete;
  AmqpClient& operator=(const AmqpClient&) = delete;

  bool ok() const { return ok_; }

  bool DeclareExchange(const std::string& name, const std::string& type = "topic") {
    amqp_exchange_declare(conn_, 1, amqp_cstring_bytes(name.c_str()),
                          amqp_cstring_bytes(type.c_str()), 0, 1, 0, 0, amqp_empty_table);
    return Reply();
  }
  // A queue (durable unless told) bound to `exchange` with `binding`.
  bool DeclareQueue(const std::string& queue, const std::string& exchange,
                    const std::string& binding = "#", bool durable = true) {
    amqp_queue_declare(conn_, 1, amqp_cstring_bytes(queue.c_str()), 0, durable ? 1 : 0, 0, 0,
                       amqp_empty_table);
    if (!Reply()) return false;
    amqp_queue_bind(conn_, 1, amqp_cstring_bytes(queue.c_str()),
                    amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(binding.c_str()),
                    amqp_empty_table);
    return Reply();
  }
  bool Purge(const std::string& queue) {
    amqp_queue_purge(conn_, 1, amqp_cstring_bytes(queue.c_str()));
    return Reply();
  }
  void Delete(const std::string& queue, const std::string& exchange) {
    amqp_queue_delete(conn_, 1, amqp_cstring_bytes(queue.c_str()), 0, 0);
    (void)Reply();
    amqp_exchange_delete(conn_, 1, amqp_cstring_bytes(exchange.c_str()), 0);
    (void)Reply();
  }

  void DeleteExchange(const std::string& exchange) {
    amqp_exchange_delete(conn_, 1, amqp_cstring_bytes(exchange.c_str()), 0);
    (void)Reply();
  }
  void DeleteQueue(const std::string& queue) {
    amqp_queue_delete(conn_, 1, amqp_cstring_bytes(queue.c_str()), 0, 0);
    (void)Reply();
  }
  // Messages ready in `queue`; -1 when it does not exist (the broker closed
  // the channel for that: it is opened again).
  long Depth(const std::string& queue) {
    amqp_queue_declare_ok_t* ok = amqp_queue_declare(conn_, 1, amqp_cstring_bytes(queue.c_str()), 1,
                                                     0, 0, 0, amqp_empty_table);
    if (ok) return static_cast<long>(ok->message_count);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn_);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
      amqp_channel_close_ok_t close_ok{};
      (void)amqp_send_method(conn_, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok);
      amqp_channel_open(conn_, 1);
      ok_ = Reply();
    }
    return -1;
  }

  // Publishes `body` to `exchange` ("" = the default: `key` names the queue),
  // persistent, with string headers. False on a local error.
  bool Publish(const std::string& exchange, const std::string& key, const std::string& body,
               const std::map<std::string, std::string>& headers) {
    std::vector<amqp_table_entry_t> e;
    for (const auto& [k, v] : headers) {
      amqp_table_entry_t x;
      x.key = amqp_bytes_t{k.size(), const_cast<char*>(k.data())};
      x.value.kind = AMQP_FIELD_KIND_UTF8;
      x.value.value.bytes = amqp_bytes_t{v.size(), const_cast<char*>(v.data())};
      e.push_back(x);
    }
    amqp_basic_properties_t p{};
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.headers = amqp_table_t{static_cast<int>(e.size()), e.data()};
    return amqp_basic_publish(conn_, 1, amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(key.c_str()),
                              0, 0, &p, amqp_bytes_t{body.size(), const_cast<char*>(body.data())}) ==
           AMQP_STATUS_OK;
  }

  // Consumers subscribed to `queue`; -1 when it does not exist.
  long Consumers(const std::string& queue) {
    amqp_queue_declare_ok_t* ok = amqp_queue_declare(conn_, 1, amqp_cstring_bytes(queue.c_str()), 1,
                                                     0, 0, 0, amqp_empty_table);
    if (ok) return static_cast<long>(ok->consumer_count);
    (void)Depth(queue);  // opens the channel again
    return -1;
  }

  // The next message of `queue` (acknowledged), or nothing when it is empty.
  std::optional<AmqpMessage> Get(const std::string& queue) {
    amqp_rpc_reply_t r = amqp_basic_get(conn_, 1, amqp_cstring_bytes(queue.c_str()), 1);
    if (r.reply_type != AMQP_RESPONSE_NORMAL || r.reply.id != AMQP_BASIC_GET_OK_METHOD) {
      return std::nullopt;
    }
    auto* ok = static_cast<amqp_basic_get_ok_t*>(r.reply.decoded);
    AmqpMessage m;
    m.exchange = Str(ok->exchange);
    m.routing_key = Str(ok->routing_key);
    amqp_message_t msg;
    if (amqp_read_message(conn_, 1, &msg, 0).reply_type != AMQP_RESPONSE_NORMAL) {
      return std::nullopt;
    }
    m.body = Str(msg.body);
    const amqp_basic_properties_t& p = msg.properties;
    if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) m.message_id = Str(p.message_id);
    if (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) m.content_type = Str(p.content_type);
    if (p._flags & AMQP_BASIC_DELIVERY_MODE_FLAG) m.delivery_mode = p.delivery_mode;
    if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG) m.timestamp = p.timestamp;
    if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
      for (int i = 0; i < p.headers.num_entries; ++i) {
        const amqp_table_entry_t& e = p.headers.entries[i];
        if (e.value.kind == AMQP_FIELD_KIND_UTF8 || e.value.kind == AMQP_FIELD_KIND_BYTES) {
          m.headers[Str(e.key)] = Str(e.value.value.bytes);
        }
      }
    }
    amqp_destroy_message(&msg);
    amqp_maybe_release_buffers(conn_);
    return m;
  }

  // Every message of `queue`, in order.
  std::vector<AmqpMessage> Drain(const std::string& queue) {
    std::vector<AmqpMessage> out;
    while (auto m = Get(queue)) out.push_back(std::move(*m));
    return out;
  }

 private:
  static std::string Str(amqp_bytes_t b) {
    return std::string(static_cast<const char*>(b.bytes), b.len);
  }
  bool Reply() { return amqp_get_rpc_reply(conn_).reply_type == AMQP_RESPONSE_NORMAL; }

  amqp_connection_state_t conn_ = nullptr;
  bool ok_ = false;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_RABBITMQ_HELPERS_H_
