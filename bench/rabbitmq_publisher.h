// The RabbitMQ references for the benchmarks: a bare publisher (no outbox, no
// database) that publishes persistent messages like the relay's (same size,
// message_id and outbox headers) from one connection with publisher confirms —
// as fast as it can in windows (each window waits for its confirms, as a relay
// batch does: the drain's ceiling) or each when due at a steady rate (the
// broker's own confirm latency) — and a bare consumer. Each exits on any error.
#ifndef OUTBOX_BENCH_RABBITMQ_PUBLISHER_H_
#define OUTBOX_BENCH_RABBITMQ_PUBLISHER_H_

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rabbitmq_helpers.h"  // tests/: the AMQP client the tests use

namespace outbox::bench {

[[noreturn]] inline void BareDie(const char* who, const char* what) {
  std::fprintf(stderr, "%s: %s\n", who, what);
  std::exit(1);
}

// A logged-in connection with channel 1 in confirm mode. Exits on any error.
inline amqp_connection_state_t BareConfirmingConnection(const std::string& url, const char* who) {
  std::vector<char> buf(url.begin(), url.end());
  buf.push_back('\0');
  amqp_connection_info info;
  if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) BareDie(who, "bad URL");
  amqp_connection_state_t c = amqp_new_connection();
  amqp_socket_t* s = amqp_tcp_socket_new(c);
  if (amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK) BareDie(who, "connect");
  if (amqp_login(c, info.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password)
          .reply_type != AMQP_RESPONSE_NORMAL) {
    BareDie(who, "login");
  }
  amqp_channel_open(c, 1);
  amqp_confirm_select(c, 1);
  if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) BareDie(who, "confirm.select");
  return c;
}

// Publishes message number `n` as the relay would (persistent, the outbox's
// headers, routing key "agg-<n mod 1000>", `mandatory`). Exits on any error.
inline void BarePublishOne(amqp_connection_state_t c, const std::string& exchange, int n,
                           const std::string& payload, const char* who) {
  const std::string id = "00000000-0000-7000-8000-" + std::to_string(100000000000 + n);
  const std::string agg = "agg-" + std::to_string(n % 1000);
  const std::string h[][2] = {{"outbox-event-id", id},         {"outbox-event-type", "Bench"},
                              {"outbox-aggregate-type", "bench"}, {"outbox-aggregate-id", agg},
                              {"outbox-created-at", "2026-12-06T00:00:00.000000Z"},
                              {"outbox-attempt", "1"}};
  amqp_table_entry_t e[6];
  for (int k = 0; k < 6; ++k) {
    e[k].key = amqp_cstring_bytes(h[k][0].c_str());
    e[k].value.kind = AMQP_FIELD_KIND_UTF8;
    e[k].value.value.bytes = amqp_cstring_bytes(h[k][1].c_str());
  }
  amqp_basic_properties_t p{};
  p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
             AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
  p.content_type = amqp_cstring_bytes("application/octet-stream");
  p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  p.message_id = amqp_cstring_bytes(id.c_str());
  p.timestamp = 1'800'000'000;
  p.headers = amqp_table_t{6, e};
  if (amqp_basic_publish(c, 1, amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(agg.c_str()), 1, 0, &p,
                         amqp_cstring_bytes(payload.c_str())) != AMQP_STATUS_OK) {
    BareDie(who, "publish");
  }
}

// Waits until the broker confirmed every tag up to `tag` (`confirmed`: the
// last confirmed so far). Exits on a nack, a return or a lost connection.
inline void BareAwaitConfirms(amqp_connection_state_t c, std::uint64_t* confirmed, std::uint64_t tag,
                              const char* who) {
  while (*confirmed < tag) {
    amqp_frame_t f;
    if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK) BareDie(who, "wait for confirms");
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) BareDie(who, "nack");
    if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) BareDie(who, "returned: no queue bound");
    if (f.payload.method.id != AMQP_BASIC_ACK_METHOD) continue;
    auto* a = static_cast<amqp_basic_ack_t*>(f.payload.method.decoded);
    *confirmed = a->multiple ? a->delivery_tag : *confirmed + 1;
    amqp_maybe_release_buffers(c);
  }
}

// The ceiling for relay_bench --rabbitmq: one client publishing `rows`
// messages like the relay's with confirms, `window` unconfirmed at a time;
// returns messages/s. Exits on any error.
inline double BarePublishRate(const std::string& url, const std::string& exchange, int rows,
                              int window, int payload_bytes) {
  const char* who = "bare publisher";
  amqp_connection_state_t c = BareConfirmingConnection(url, who);
  const std::string payload(static_cast<std::size_t>(payload_bytes), 'x');
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t tag = 0, confirmed = 0;
  for (int sent = 0; sent < rows;) {
    const int n = std::min(window, rows - sent);
    for (int i = 0; i < n; ++i, ++sent, ++tag) BarePublishOne(c, exchange, sent, payload, who);
    BareAwaitConfirms(c, &confirmed, tag, who);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return rows / secs;
}

// The broker's own confirm latency at a steady load, for relay_bench
// --bare-latency: one message every 1/rate s for `seconds` (200-byte payload),
// each published when due without waiting for earlier confirms (confirms are
// read between sends); from its due time to its basic.ack, in ms, sorted. A
// stall of the broker counts for every message it holds up.
inline std::vector<double> BarePublishLatencies(const std::string& url, const std::string& exchange, int rate,
                                                int seconds) {
  using Clock = std::chrono::steady_clock;
  const char* who = "bare publisher";
  amqp_connection_state_t c = BareConfirmingConnection(url, who);
  const std::string payload(200, 'x');
  std::vector<double> ms;
  std::map<std::uint64_t, Clock::time_point> due;  // unconfirmed: tag -> due time
  const auto period = std::chrono::nanoseconds(1'000'000'000LL / std::max(1, rate));
  const int total = rate * seconds;
  auto next = Clock::now();
  std::uint64_t tag = 0;
  for (int n = 0; n < total || !due.empty();) {
    if (n < total && Clock::now() >= next) {
      BarePublishOne(c, exchange, n++, payload, who);
      due[++tag] = next;
      next += period;
      continue;
    }
    const auto wait = n < total ? std::max(Clock::duration::zero(), next - Clock::now())
                                : Clock::duration(std::chrono::seconds(10));
    timeval tv{static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
               static_cast<suseconds_t>(std::chrono::duration_cast<std::chrono::microseconds>(wait).count() % 1000000)};
    amqp_frame_t f;
    const int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) {
      if (n >= total) BareDie(who, "no confirm within 10 s");
      continue;
    }
    if (rc != AMQP_STATUS_OK) BareDie(who, "wait for confirms");
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) BareDie(who, "nack");
    if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) BareDie(who, "returned: no queue bound");
    if (f.payload.method.id != AMQP_BASIC_ACK_METHOD) continue;
    auto* a = static_cast<amqp_basic_ack_t*>(f.payload.method.decoded);
    const auto now = Clock::now();
    const auto first = a->multiple ? due.begin() : due.find(a->delivery_tag);
    const auto end = a->multiple ? due.upper_bound(a->delivery_tag) : (first == due.end() ? first : std::next(first));
    for (auto it = first; it != end; it = due.erase(it)) {
      ms.push_back(std::chrono::duration<double, std::milli>(now - it->second).count());
    }
    amqp_maybe_release_buffers(c);
  }
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  std::sort(ms.begin(), ms.end());
  return ms;
}

// The RabbitMQ ceiling for inbox_bench --amqp: a bare consumer (no inbox, no
// database) that reads `rows` messages of `queue` with manual acks (`multiple`
// every `ack_every`) and `prefetch` unacked; returns messages/s from the first
// delivery. Exits on any error.
inline double BareConsumeRate(const std::string& url, const std::string& queue, int rows, int prefetch,
                              int ack_every) {
  std::vector<char> buf(url.begin(), url.end());
  buf.push_back('\0');
  amqp_connection_info info;
  auto die = [](const char* what) {
    std::fprintf(stderr, "bare consumer: %s\n", what);
    std::exit(1);
  };
  if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) die("bad URL");
  amqp_connection_state_t c = amqp_new_connection();
  amqp_socket_t* s = amqp_tcp_socket_new(c);
  if (amqp_socket_open(s, info.host, info.port) != AMQP_STATUS_OK) die("connect");
  if (amqp_login(c, info.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user, info.password)
          .reply_type != AMQP_RESPONSE_NORMAL) {
    die("login");
  }
  amqp_channel_open(c, 1);
  amqp_basic_qos(c, 1, 0, static_cast<std::uint16_t>(prefetch), 0);
  amqp_basic_consume(c, 1, amqp_cstring_bytes(queue.c_str()), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL) die("basic.consume");
  std::chrono::steady_clock::time_point t0;
  for (int got = 0; got < rows;) {
    amqp_maybe_release_buffers(c);
    amqp_envelope_t env;
    if (amqp_consume_message(c, &env, nullptr, 0).reply_type != AMQP_RESPONSE_NORMAL) die("consume");
    if (got++ == 0) t0 = std::chrono::steady_clock::now();
    if (got % ack_every == 0 || got == rows) amqp_basic_ack(c, 1, env.delivery_tag, 1);
    amqp_destroy_envelope(&env);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return rows / secs;
}

// Declares the exchange (topic, durable) and a queue bound to it with '#'
// (durable, or not: then RabbitMQ writes no message of it to disk), then purges
// the queue (what the previous run left).
inline void PrepareRabbitMq(const std::string& url, const std::string& exchange,
                            const std::string& queue, bool durable = true) {
  outbox::testing::AmqpClient c(url);
  if (!c.ok() || !c.DeclareExchange(exchange) || !c.DeclareQueue(queue, exchange, "#", durable) ||
      !c.Purge(queue)) {
    std::fprintf(stderr, "relay_bench: cannot prepare RabbitMQ (%s)\n", exchange.c_str());
    std::exit(1);
  }
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_RABBITMQ_PUBLISHER_H_
