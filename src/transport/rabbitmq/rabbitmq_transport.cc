// RabbitMQ transport on rabbitmq-c. All librabbitmq calls, and the
// classification of what the broker says into PublishOutcome, live in this file.
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "amqp_common.h"
#include "outbox/rabbitmq.h"
#include "outbox/thread_annotations.h"
#include "outbox/time.h"

namespace outbox {
namespace {

using namespace amqp_internal;  // NOLINT: this file is the library's RabbitMQ side

PublishResult Unavailable(std::string why) {
  PublishResult r;
  r.outcome = PublishOutcome::kRetryable;
  r.error = std::move(why);
  r.broker_unavailable = true;
  r.outage_for_event = true;
  return r;
}

// One connection and its one channel in confirm mode; used by one call at a time.
struct Conn {
  amqp_connection_state_t state = nullptr;
  amqp_channel_t channel = 1;
  std::uint64_t next_tag = 1;         // the next publish's delivery tag on `channel`
  std::set<std::string> exchanges;    // checked (or declared) on this connection
  bool blocked = false;               // connection.blocked seen, not unblocked yet
  bool reused = false;                // taken from the pool (it may have died idle)
  std::string blocked_reason;
  std::atomic<int> fd{-1};
  std::atomic<std::int64_t> deadline_ns{0};  // 0: not in a call

  ~Conn() {
    // Closes the socket without the protocol's close (a connection dropped
    // after an error; the pool's healthy ones are closed cleanly first).
    if (state) amqp_destroy_connection(state);
  }
};

class RabbitMqTransport final : public Transport {
 public:
  RabbitMqTransport(RabbitMqTransportOptions o, AmqpUrl url)
      : options_(std::move(o)), url_(std::move(url)) {
    watchdog_ = std::thread([this] { Watch(); });
  }
  ~RabbitMqTransport() override {
    {
      MutexLock l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    MutexLock l(mu_);
    for (auto& c : idle_) {  // a clean close, briefly
      timeval tv{1, 0};
      amqp_set_rpc_timeout(c->state, &tv);
      (void)amqp_connection_close(c->state, AMQP_REPLY_SUCCESS);
    }
  }

  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    std::vector<PublishResult> out(events.size());
    if (events.empty()) return out;
    const auto deadline = Clock::now() + options_.timeout;
    std::unique_ptr<Conn> c = Acquire(deadline, &out);
    if (!c) return out;
    // A pooled connection the broker closed while it sat idle (a restart) is
    // found before anything is sent: the call goes on with a new one.
    if (std::string why; c->reused && !Poll(*c, &why)) {
      Release(std::move(c), false);
      c = Acquire(deadline, &out, /*pooled=*/false);
      if (!c) return out;
    }
    const bool reuse = PublishOn(*c, events, deadline, &out);
    Release(std::move(c), reuse && Clock::now() < deadline);
    return out;
  }

  std::chrono::milliseconds MaxPublishTime() const override {
    // The call's own deadline, then the watchdog's round and a socket's close.
    return options_.timeout + std::chrono::milliseconds(1500);
  }
  std::string DescribeMaxPublishTime() const override {
    return "rabbitmq.timeout_ms + 1.5 s";
  }
  bool Healthy() const override { return !down_.load(); }
  std::string UnhealthyReason() const override {
    MutexLock l(mu_);
    return last_outage_.empty() ? "rabbitmq broker unreachable" : last_outage_;
  }

 private:
  // A pooled connection, or a new one. Null with every result an outage when
  // the broker cannot be reached.
  std::unique_ptr<Conn> Acquire(Clock::time_point deadline, std::vector<PublishResult>* out,
                                bool pooled = true) {
    std::unique_ptr<Conn> c;
    if (pooled) {
      MutexLock l(mu_);
      if (!idle_.empty()) {
        c = std::move(idle_.back());
        idle_.pop_back();
        c->reused = true;
      }
    }
    std::string error;
    if (!c) c = Connect(deadline, &error);
    if (!c) {
      NoteOutage(error);
      for (auto& r : *out) r = Unavailable(error);
      return nullptr;
    }
    Enter(*c, deadline);
    return c;
  }

  void Release(std::unique_ptr<Conn> c, bool reuse) {
    Leave(*c);
    if (!reuse) return;  // destroyed here: closed
    MutexLock l(mu_);
    idle_.push_back(std::move(c));
  }

  std::unique_ptr<Conn> Connect(Clock::time_point deadline, std::string* error) {
    auto c = std::make_unique<Conn>();
    c->state = amqp_new_connection();
    const std::string where = "rabbitmq " + url_.host + ":" + std::to_string(url_.port);
    if (!c->state) {
      *error = where + ": out of memory";
      return nullptr;
    }
    Conn* raw = c.get();
    // The watchdog bounds the handshake too, from the socket's opening.
    const bool opened = OpenAndLogin(c->state, url_, options_, "outbox-relay", 0, deadline,
                                     [&](int fd) { raw->fd = fd; Enter(*raw, deadline); }, error);
    if (opened && !OpenChannel(c->state, c->channel, /*confirms=*/true, error)) {
      *error = where + ": " + *error;
      Leave(*c);
      return nullptr;
    }
    Leave(*c);
    if (!opened) return nullptr;
    c->next_tag = 1;
    return c;
  }

  // Checks (or declares) `exchange` on the connection. False with `error` when
  // it does not exist or cannot be declared (the channel is reopened: a failed
  // declare closes it); `lost` when the connection itself failed.
  bool EnsureExchange(Conn& c, const std::string& exchange, std::string* error, bool* lost) {
    if (c.exchanges.count(exchange)) return true;
    amqp_exchange_declare(c.state, c.channel, Bytes(exchange), Bytes(options_.exchange_type),
                          /*passive=*/options_.declare ? 0 : 1, /*durable=*/1,
                          /*auto_delete=*/0, /*internal=*/0, amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c.state);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      c.exchanges.insert(exchange);
      return true;
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
      auto* m = static_cast<amqp_channel_close_t*>(r.reply.decoded);
      const int code = m->reply_code;
      const std::string text = Text(m->reply_text);
      amqp_channel_close_ok_t ok{};
      (void)amqp_send_method(c.state, c.channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
      if (code == AMQP_NOT_FOUND) {
        *error = "exchange '" + exchange + "' does not exist in vhost '" + url_.vhost +
                 "' (declare it, or set rabbitmq.declare = true)";
      } else {
        *error = "exchange '" + exchange + "': " + std::to_string(code) + " " + text;
      }
      std::string why;  // the same channel number again, after its close-ok
      if (!OpenChannel(c.state, c.channel, /*confirms=*/true, &why)) {
        *lost = true;
        *error += "; then " + why;
      }
      c.next_tag = 1;
      return false;
    }
    *lost = true;
    *error = ReplyText(r, ("exchange '" + exchange + "'").c_str());
    return false;
  }

  // Reads what the broker sent without waiting (a connection.blocked before
  // publishing). False when the connection is gone.
  static bool Poll(Conn& c, std::string* error) {
    for (;;) {
      timeval zero{0, 0};
      amqp_frame_t f;
      const int rc = amqp_simple_wait_frame_noblock(c.state, &f, &zero);
      if (rc == AMQP_STATUS_TIMEOUT) return true;
      if (rc != AMQP_STATUS_OK) {
        *error = std::string("connection lost: ") + amqp_error_string2(rc);
        return false;
      }
      if (!Background(c, f, error)) return false;
    }
  }

  // A frame outside the confirms: blocked/unblocked, or the connection's close.
  static bool Background(Conn& c, const amqp_frame_t& f, std::string* error) {
    if (CloseText(f, error)) return false;
    if (f.frame_type != AMQP_FRAME_METHOD) return true;
    switch (f.payload.method.id) {
      case AMQP_CONNECTION_BLOCKED_METHOD: {
        auto* m = static_cast<amqp_connection_blocked_t*>(f.payload.method.decoded);
        c.blocked = true;
        c.blocked_reason = Text(m->reason);
        return true;
      }
      case AMQP_CONNECTION_UNBLOCKED_METHOD:
        c.blocked = false;
        return true;
      default:
        return true;
    }
  }

  // Publishes the call on `c` and waits for its confirms. True when the
  // connection may be used again.
  bool PublishOn(Conn& c, std::span<const ClaimedEvent> events, Clock::time_point deadline,
                 std::vector<PublishResult>* out) {
    std::string error;
    if (!Poll(c, &error)) return Lost(error, out);
    if (c.blocked) {
      const std::string why = "the broker blocked publishing (connection.blocked: " +
                              c.blocked_reason + ": a memory or disk alarm)";
      NoteOutage(why);
      for (auto& r : *out) r = Unavailable(why);
      return true;
    }
    // Exchanges first: an event whose exchange is missing fails here, and the
    // later events of its aggregate are not sent.
    std::map<std::string, std::string> missing;  // exchange -> why
    std::vector<std::string> exchange(events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      exchange[i] = RenderExchange(options_.exchange_template, events[i].event);
      if (missing.count(exchange[i]) || c.exchanges.count(exchange[i])) continue;
      bool lost = false;
      std::string why;
      if (!EnsureExchange(c, exchange[i], &why, &lost)) {
        if (lost) return Lost(why, out);
        missing[exchange[i]] = why;
      }
    }
    std::map<std::uint64_t, std::size_t> tag_of;  // delivery tag -> event, unconfirmed
    std::map<std::string, std::size_t> by_id;     // message id -> event (for returns)
    std::set<std::pair<std::string, std::string>> failed;  // aggregates with a failure
    std::vector<bool> settled(events.size(), false);
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i].event;
      const auto agg = std::make_pair(e.aggregate_type, e.aggregate_id);
      if (failed.count(agg)) {
        (*out)[i] = PublishResult{PublishOutcome::kNotSent,
                                  "not sent: an earlier event of its aggregate failed"};
        settled[i] = true;
        continue;
      }
      if (auto m = missing.find(exchange[i]); m != missing.end()) {
        (*out)[i] = PublishResult{PublishOutcome::kRetryable, m->second};
        settled[i] = true;
        failed.insert(agg);
        continue;
      }
      if (std::string why = Unfit(events[i]); !why.empty()) {
        (*out)[i] = PublishResult{PublishOutcome::kFatal, why};
        settled[i] = true;
        failed.insert(agg);
        continue;
      }
      if (int rc = Send(c, events[i], exchange[i]); rc != AMQP_STATUS_OK) {
        if (rc == AMQP_STATUS_BAD_AMQP_DATA || rc == AMQP_STATUS_TABLE_TOO_BIG) {
          // The event's own (a check above missed it); the connection may be
          // mid-frame: the rest of the call is an outage on it.
          (*out)[i] = PublishResult{PublishOutcome::kFatal,
                                    std::string("AMQP cannot carry this event: ") +
                                        amqp_error_string2(rc)};
          settled[i] = true;
        }
        return Lost(std::string("publish: ") + amqp_error_string2(rc), out, &settled);
      }
      tag_of[c.next_tag++] = i;
      by_id[events[i].event_id] = i;
    }
    return AwaitConfirms(c, deadline, &tag_of, by_id, &settled, out);
  }

  // Why AMQP cannot carry an event as a message, or "": a content type over
  // 255 bytes (a short string), or properties and headers over one header
  // frame (kFrameMax; each header costs its name, its value and 6 bytes).
  static std::string Unfit(const ClaimedEvent& ce) {
    std::size_t bytes = 512 + ce.event_id.size() + ce.event.aggregate_id.size() +
                        ce.event.aggregate_type.size() + ce.event.event_type.size() +
                        (ce.event.dedup_key ? ce.event.dedup_key->size() : 0);
    for (const Header& h : ce.event.headers) {
      bytes += h.name.size() + h.value.size() + 6;
      if (EqualsIgnoreCase(h.name, "content-type") && h.value.size() > 255) {
        return "its content-type header is " + std::to_string(h.value.size()) +
               " bytes: AMQP's content_type holds at most 255";
      }
    }
    if (ce.event.aggregate_id.size() > 255) {
      return "its aggregate id is " + std::to_string(ce.event.aggregate_id.size()) +
             " bytes: an AMQP routing key holds at most 255";
    }
    if (bytes > kFrameMax - 1024) {
      return "its headers and properties take about " + std::to_string(bytes) +
             " bytes: more than one AMQP header frame (" + std::to_string(kFrameMax) + ")";
    }
    return "";
  }

  int Send(Conn& c, const ClaimedEvent& ce, const std::string& exchange) {
    const Event& e = ce.event;
    std::vector<std::pair<std::string, std::string>> h = {
        {"outbox-event-id", ce.event_id},
        {"outbox-event-type", e.event_type},
        {"outbox-aggregate-type", e.aggregate_type},
        {"outbox-aggregate-id", e.aggregate_id},
        {"outbox-created-at", FormatRfc3339(ce.created_at, 6)},
        {"outbox-attempt", std::to_string(ce.attempts)}};
    if (e.dedup_key) h.emplace_back("outbox-dedup-key", *e.dedup_key);
    std::string content_type = "application/octet-stream";
    for (const Header& x : e.headers) {
      h.emplace_back(x.name, x.value);
      if (EqualsIgnoreCase(x.name, "content-type")) content_type = x.value;
    }
    std::vector<amqp_table_entry_t> entries(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      entries[i].key = Bytes(h[i].first);
      entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
      entries[i].value.value.bytes = Bytes(h[i].second);
    }
    amqp_basic_properties_t p{};
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.content_type = Bytes(content_type);
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.message_id = Bytes(ce.event_id);
    p.timestamp = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(ce.created_at.time_since_epoch())
            .count());
    p.headers = amqp_table_t{static_cast<int>(entries.size()), entries.data()};
    return amqp_basic_publish(c.state, c.channel, Bytes(exchange), Bytes(e.aggregate_id),
                              /*mandatory=*/1, /*immediate=*/0, &p, Bytes(e.payload));
  }

  static bool EqualsIgnoreCase(const std::string& a, const char* b) {
    const std::size_t n = std::strlen(b);
    if (a.size() != n) return false;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
    }
    return true;
  }

  // Reads confirms until every tag is settled or the deadline. True when the
  // connection may be used again.
  bool AwaitConfirms(Conn& c, Clock::time_point deadline,
                     std::map<std::uint64_t, std::size_t>* tag_of,
                     const std::map<std::string, std::size_t>& by_id, std::vector<bool>* settled,
                     std::vector<PublishResult>* out) {
    std::set<std::size_t> returned;
    auto settle = [&](std::uint64_t tag, bool multiple, bool ack) {
      auto end = multiple ? tag_of->upper_bound(tag) : tag_of->find(tag);
      auto begin = multiple ? tag_of->begin() : end;
      if (!multiple && end != tag_of->end()) end = std::next(end);
      for (auto it = begin; it != end; it = tag_of->erase(it)) {
        const std::size_t i = it->second;
        (*settled)[i] = true;
        if (returned.count(i)) continue;  // its kFatal is already recorded
        (*out)[i] = ack ? PublishResult{PublishOutcome::kAcked, ""}
                        : Unavailable("basic.nack: the broker could not take the message");
      }
    };
    while (!tag_of->empty()) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) {
        return Lost("no confirm from the broker within rabbitmq.timeout_ms (" +
                        std::to_string(options_.timeout.count()) + " ms)" +
                        (c.blocked ? "; the broker blocked publishing: " + c.blocked_reason : ""),
                    out, settled);
      }
      timeval tv = Tv(left);
      amqp_frame_t f;
      const int rc = amqp_simple_wait_frame_noblock(c.state, &f, &tv);
      if (rc == AMQP_STATUS_TIMEOUT) continue;
      if (rc != AMQP_STATUS_OK) {
        return Lost(std::string("connection lost: ") + amqp_error_string2(rc), out, settled);
      }
      if (f.frame_type != AMQP_FRAME_METHOD) continue;
      switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
          auto* m = static_cast<amqp_basic_ack_t*>(f.payload.method.decoded);
          settle(m->delivery_tag, m->multiple != 0, true);
          break;
        }
        case AMQP_BASIC_NACK_METHOD: {
          auto* m = static_cast<amqp_basic_nack_t*>(f.payload.method.decoded);
          settle(m->delivery_tag, m->multiple != 0, false);
          break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
          auto* m = static_cast<amqp_basic_return_t*>(f.payload.method.decoded);
          const std::string why = "unroutable: no queue bound to exchange '" +
                                  Text(m->exchange) + "' for routing key '" +
                                  Text(m->routing_key) + "' (" +
                                  std::to_string(m->reply_code) + " " + Text(m->reply_text) + ")";
          std::string id;
          std::string error;
          if (!ReadReturnedId(c, deadline, &id, &error)) return Lost(error, out, settled);
          auto it = by_id.find(id);
          if (it == by_id.end()) {  // cannot tell which event: none counts as sent
            return Lost("a returned message without a known message_id (" + why + ")", out,
                        settled);
          }
          returned.insert(it->second);
          (*out)[it->second] = PublishResult{PublishOutcome::kFatal, why};
          break;
        }
        default: {
          std::string error;
          if (!Background(c, f, &error)) return Lost(error, out, settled);
          // A memory or disk alarm: no confirm comes until it ends. What was
          // sent may still be routed then, in order (at least once).
          if (c.blocked) {
            return Lost("the broker blocked publishing (connection.blocked: " + c.blocked_reason +
                            ": a memory or disk alarm)",
                        out, settled);
          }
        }
      }
      amqp_maybe_release_buffers(c.state);
    }
    NoteSuccess();
    return true;
  }

  // The message id of a returned message: its content header follows the
  // basic.return, then its body frames (skipped).
  static bool ReadReturnedId(Conn& c, Clock::time_point deadline, std::string* id,
                             std::string* error) {
    std::uint64_t body = 0, read = 0;
    bool header = false;
    while (!header || read < body) {
      timeval tv = Tv(deadline - Clock::now());
      amqp_frame_t f;
      const int rc = amqp_simple_wait_frame_noblock(c.state, &f, &tv);
      if (rc != AMQP_STATUS_OK) {
        *error = std::string("reading a returned message: ") + amqp_error_string2(rc);
        return false;
      }
      if (f.frame_type == AMQP_FRAME_HEADER) {
        header = true;
        body = f.payload.properties.body_size;
        auto* p = static_cast<amqp_basic_properties_t*>(f.payload.properties.decoded);
        if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) *id = Text(p->message_id);
      } else if (f.frame_type == AMQP_FRAME_BODY) {
        read += f.payload.body_fragment.len;
      }
    }
    return true;
  }

  // The connection failed: what is not settled yet is an outage. False (the
  // connection is not used again).
  bool Lost(const std::string& why, std::vector<PublishResult>* out,
            std::vector<bool>* settled = nullptr) {
    NoteOutage(why);
    for (std::size_t i = 0; i < out->size(); ++i) {
      if (settled && (*settled)[i]) continue;
      (*out)[i] = Unavailable(why);
    }
    return false;
  }

  void NoteOutage(const std::string& why) {
    down_ = true;
    const std::string where = "rabbitmq " + url_.host + ":" + std::to_string(url_.port);
    MutexLock l(mu_);
    last_outage_ = why.rfind(where, 0) == 0 ? why : where + ": " + why;
  }
  void NoteSuccess() { down_ = false; }

  // ---- The watchdog: a call past its deadline has its socket shut down ----
  void Enter(Conn& c, Clock::time_point deadline) {
    c.deadline_ns = deadline.time_since_epoch().count();
    MutexLock l(mu_);
    busy_.insert(&c);
  }
  void Leave(Conn& c) {
    MutexLock l(mu_);
    busy_.erase(&c);
    c.deadline_ns = 0;
  }
  void Watch() {
    MutexLock l(mu_);
    while (!stopping_) {
      cv_.wait_for(l.native(), std::chrono::milliseconds(200));
      const auto now = Clock::now().time_since_epoch().count();
      const auto grace = std::chrono::nanoseconds(std::chrono::milliseconds(500)).count();
      for (Conn* c : busy_) {
        const auto d = c->deadline_ns.load();
        if (d != 0 && now > d + grace && c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
      }
    }
  }

  const RabbitMqTransportOptions options_;
  const AmqpUrl url_;
  std::atomic<bool> down_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ OUTBOX_GUARDED_BY(mu_) = false;
  std::string last_outage_ OUTBOX_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Conn>> idle_ OUTBOX_GUARDED_BY(mu_);
  std::set<Conn*> busy_ OUTBOX_GUARDED_BY(mu_);
  std::thread watchdog_;
};

}  // namespace

std::string RedactAmqpUrl(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  // The user-info ends at the last '@' before the path (a password may hold '@').
  const auto path = url.find('/', scheme + 3);
  const auto at = url.rfind('@', path == std::string::npos ? std::string::npos : path);
  if (at == std::string::npos || at < scheme + 3) return url;
  const auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

Status ValidateAmqpUrl(const std::string& url) { return ParseAmqpUrl(url).status(); }

Status ValidateExchangeTemplate(const std::string& tmpl) {
  if (tmpl.empty()) return Status::InvalidArgument("exchange_template is empty");
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      const std::size_t end = tmpl.find('}', i);
      if (end == std::string::npos) {
        return Status::InvalidArgument("exchange_template \"" + tmpl + "\": unclosed '{'");
      }
      const std::string name = tmpl.substr(i + 1, end - i - 1);
      if (name != "aggregate_type" && name != "event_type") {
        return Status::InvalidArgument("exchange_template \"" + tmpl +
                                       "\": unknown placeholder {" + name +
                                       "} (known: {aggregate_type}, {event_type})");
      }
      i = end + 1;
    } else if (!IsNameChar(tmpl[i])) {
      return Status::InvalidArgument("exchange_template \"" + tmpl + "\": character '" +
                                     std::string(1, tmpl[i]) +
                                     "' is not allowed in a RabbitMQ exchange name");
    } else {
      ++i;
    }
  }
  return Status::Ok();
}

std::string RenderExchange(const std::string& tmpl, const Event& event) {
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      const std::size_t end = tmpl.find('}', i);
      const std::string& v = tmpl.compare(i + 1, end - i - 1, "event_type") == 0
                                 ? event.event_type
                                 : event.aggregate_type;
      for (char ch : v) out += IsNameChar(ch) ? ch : '_';
      i = end + 1;
    } else {
      out += tmpl[i++];
    }
  }
  return out.substr(0, 255);
}

Status ValidateRabbitMqOptions(const RabbitMqTransportOptions& options) {
  auto url = ParseAmqpUrl(options.url);
  if (!url.ok()) return Status::InvalidArgument("rabbitmq.url: " + url.status().message());
  if (Status st = ValidateExchangeTemplate(options.exchange_template); !st.ok()) {
    return Status::InvalidArgument("rabbitmq." + st.message());
  }
  static const std::set<std::string> kTypes = {"direct", "topic", "fanout", "headers",
                                               "x-consistent-hash"};
  if (!kTypes.count(options.exchange_type)) {
    return Status::InvalidArgument("rabbitmq.exchange_type \"" + options.exchange_type +
                                   "\": must be direct, topic, fanout, headers or x-consistent-hash");
  }
  if (options.timeout.count() <= 0) {
    return Status::InvalidArgument("rabbitmq.timeout_ms must be > 0");
  }
  for (const auto& [key, path] : {std::pair<const char*, std::string>{"tls_ca_file", options.tls_ca_file},
                                  {"tls_cert_file", options.tls_cert_file},
                                  {"tls_key_file", options.tls_key_file}}) {
    if (!path.empty() && !std::ifstream(path).good()) {
      return Status::InvalidArgument(std::string("rabbitmq.") + key + ": cannot read " + path);
    }
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument(
        "rabbitmq.tls_cert_file and rabbitmq.tls_key_file go together");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Transport>> OpenRabbitMqTransport(const RabbitMqTransportOptions& options) {
  OUTBOX_RETURN_IF_ERROR(ValidateRabbitMqOptions(options));
  auto url = ParseAmqpUrl(options.url);
  if (!url.ok()) return url.status();
  return std::unique_ptr<Transport>(new RabbitMqTransport(options, std::move(url).value()));
}

}  // namespace outbox
