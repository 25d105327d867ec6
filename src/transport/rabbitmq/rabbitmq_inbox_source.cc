// The RabbitMQ side of the inbox (rabbitmq.h, "The inbox source"): the
// group's queues, manual acks, retry queues that dead-letter back, and the
// forwarding connection with publisher confirms.
#include <algorithm>
#include <set>
#include <thread>

#include "amqp_common.h"
#include "outbox/rabbitmq.h"
#include "outbox/thread_annotations.h"

namespace outbox {
namespace {

using namespace amqp_internal;  // NOLINT: this file is the library's RabbitMQ side

constexpr amqp_channel_t kConsume = 1;  // deliveries and acks (consuming connection)
constexpr amqp_channel_t kLag = 1;      // passive declares for the lag (lag connection)
constexpr amqp_channel_t kForward = 1;  // confirms (forwarding connection)
constexpr int kHeartbeatS = 30;

// "orders.retry.2" -> ("orders", 2); anything else -> (topic, 0).
std::pair<std::string, int> SplitRetryTopic(const std::string& t) {
  const auto at = t.rfind(".retry.");
  if (at == std::string::npos || at + 7 >= t.size()) return {t, 0};
  int n = 0;
  for (std::size_t i = at + 7; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9' || n > 1000) return {t, 0};
    n = n * 10 + (t[i] - '0');
  }
  return {t.substr(0, at), n};
}

// The main topics of a subscription (its retry topics dropped) -> retry levels.
std::map<std::string, int> MainTopics(const std::vector<std::string>& topics) {
  std::map<std::string, int> mains;
  for (const std::string& t : topics) {
    const auto [main, level] = SplitRetryTopic(t);
    int& n = mains[level == 0 ? t : main];
    n = std::max(n, level);
  }
  return mains;
}

// The key that binds every message of the exchange to the group's queue.
std::string BindingKey(const std::string& exchange_type) {
  if (exchange_type == "topic") return "#";
  if (exchange_type == "x-consistent-hash") return "1";
  return "";  // fanout ignores it; headers with no arguments matches all
}

// Per main topic: its exchange (declared, or checked when declare is off), the
// group's queue bound to it, the retry queues that dead-letter back to it, and
// the dead-letter queue; on `channel`, which a refusal closes. False with
// `error`; `inequivalent` when the broker refused a declaration as
// inequivalent to what exists (406 PRECONDITION_FAILED).
bool DeclareTopology(amqp_connection_state_t s, amqp_channel_t channel, const AmqpUrl& url,
                     const RabbitMqInboxSourceOptions& o, const std::map<std::string, int>& mains,
                     std::string* error, bool* inequivalent) {
  auto ok = [&](const std::string& what) {
    const amqp_rpc_reply_t r = amqp_get_rpc_reply(s);
    const std::string why = ReplyText(r, what.c_str());
    if (why.empty()) return true;
    *inequivalent = r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
                    static_cast<amqp_channel_close_t*>(r.reply.decoded)->reply_code == AMQP_PRECONDITION_FAILED;
    *error = "rabbitmq " + url.host + ":" + std::to_string(url.port) + ": " + why;
    return false;
  };
  for (const auto& [t, levels] : mains) {
    amqp_exchange_declare(s, channel, Bytes(t), Bytes(o.broker.exchange_type), o.broker.declare ? 0 : 1, 1, 0,
                          0, amqp_empty_table);
    if (!ok("exchange '" + t + "'" + (o.broker.declare ? "" : " (rabbitmq.declare is off: it must exist)"))) {
      return false;
    }
    const std::string q = RabbitMqQueueName(o.group, t);
    amqp_field_value_t sac;
    sac.kind = AMQP_FIELD_KIND_BOOLEAN;
    sac.value.boolean = 1;
    amqp_table_entry_t qargs[] = {Entry("x-single-active-consumer", sac)};
    amqp_queue_declare(s, channel, Bytes(q), 0, /*durable=*/1, 0, 0,
                       o.single_active_consumer ? amqp_table_t{1, qargs} : amqp_empty_table);
    if (!ok("queue '" + q + "'")) return false;
    amqp_queue_bind(s, channel, Bytes(q), Bytes(t), Bytes(BindingKey(o.broker.exchange_type)), amqp_empty_table);
    if (!ok("binding '" + q + "' to '" + t + "'")) return false;
    const std::string dlx;  // the default exchange: routes by queue name
    for (int n = 1; n <= levels; ++n) {
      const std::string rq = q + ".retry." + std::to_string(n);
      amqp_table_entry_t rargs[] = {Entry("x-dead-letter-exchange", Utf8(dlx)),
                                    Entry("x-dead-letter-routing-key", Utf8(q))};
      amqp_queue_declare(s, channel, Bytes(rq), 0, 1, 0, 0, amqp_table_t{2, rargs});
      if (!ok("queue '" + rq + "'")) return false;
    }
    const std::string dq = q + o.dlt_suffix;
    amqp_queue_declare(s, channel, Bytes(dq), 0, 1, 0, 0, amqp_empty_table);
    if (!ok("queue '" + dq + "'")) return false;
  }
  return true;
}

class RabbitMqInboxSource final : public InboxSource {
 public:
  RabbitMqInboxSource(RabbitMqInboxSourceOptions o, AmqpUrl url, Logger& logger)
      : options_(std::move(o)), url_(std::move(url)), log_(logger) {}

  Status Subscribe(const std::vector<std::string>& topics) override {
    mains_ = MainTopics(topics);
    for (const auto& [t, levels] : mains_) {
      const std::string longest = Queue(t) + (levels > 0 ? ".retry." + std::to_string(levels) : "") +
                                  options_.dlt_suffix;
      if (t.empty() || t.size() > 255) {
        return Status::InvalidArgument("rabbitmq: topic (exchange) \"" + t + "\" must be 1..255 bytes");
      }
      if (longest.size() > 255) {
        return Status::InvalidArgument("rabbitmq: queue \"" + longest +
                                       "\" is longer than 255 bytes: shorten the group or the topic");
      }
    }
    return Status::Ok();
  }

  std::vector<InboundMessage> Poll(int max, std::chrono::milliseconds fill_wait) override {
    std::vector<InboundMessage> out;
    if (paused_from_ > 0) {
      // A retry copy came back before its due time (another consumer's clock
      // ahead of ours) and the batch's earlier messages are acked: the session
      // ends, giving the copy and what followed it back to the queue in their
      // order (the same session would never deliver them again, and nothing
      // past the copy may be acked in it).
      consume_.reset();
      paused_from_ = 0;
    }
    if (!paused_.empty()) {  // until the engine resumes it, when due
      std::this_thread::sleep_for(std::min(fill_wait, std::chrono::milliseconds(100)));
      return out;
    }
    if (!consume_ && !Connect()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return out;
    }
    const auto start = Clock::now();
    auto until = start + std::chrono::milliseconds(100);
    while (static_cast<int>(out.size()) < max) {
      const auto left = until - Clock::now();
      if (left <= Clock::duration::zero()) break;
      amqp_maybe_release_buffers(consume_->state);
      amqp_envelope_t env;
      timeval tv = Tv(left);
      const amqp_rpc_reply_t r = amqp_consume_message(consume_->state, &env, &tv, 0);
      if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        out.push_back(Convert(env));
        amqp_destroy_envelope(&env);
        if (out.size() == 1) until = Clock::now() + fill_wait;
        continue;
      }
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) break;
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
          r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
        // A frame that is not a delivery: a close, a cancel, an alarm.
        if (std::string why; !OtherFrame(&why)) {
          Lose(why);
          return {};  // not acked: the broker gives them to a consumer again
        }
        continue;
      }
      Lose(ReplyText(r, "consume"));
      return {};
    }
    RefreshDepth();
    return out;
  }

  Status Forward(std::span<const OutboundMessage> messages) override {
    if (messages.empty()) return Status::Ok();
    const auto deadline = Clock::now() + options_.broker.timeout;
    std::string error;
    // No heartbeat: the connection idles between forwards (the broker would
    // close it for their silence).
    if (!forward_) {
      if (!(forward_ = Open("outbox-consumer-forward", 0, kForward, true, deadline, &error))) {
        NoteDown(error);
        return Status::Unavailable(error);
      }
      forward_tag_ = 1;
    }
    std::map<std::uint64_t, bool> unconfirmed;  // delivery tag -> (unused)
    const SendWatchdog watchdog(forward_->fd, deadline);
    for (const OutboundMessage& m : messages) {
      if (int rc = Publish(m); rc != AMQP_STATUS_OK) {
        forward_.reset();
        error = std::string("rabbitmq: forward to ") + m.topic + ": " + amqp_error_string2(rc);
        NoteDown(error);
        return Status::Unavailable(error);
      }
      unconfirmed.emplace(forward_tag_++, true);
    }
    if (Status st = AwaitConfirms(forward_->state, deadline, "forwarded copies", &unconfirmed); !st.ok()) {
      forward_.reset();
      NoteDown(st.message());
      return st;
    }
    if (consume_) NoteUp();  // the broker answers (an earlier forward's failure is past)
    return Status::Ok();
  }

  Status Commit(const std::map<TopicPartition, std::int64_t>& next) override {
    std::uint64_t upto = 0;
    for (const auto& [tp, offset] : next) {
      if (tp.partition == session_ && offset > 0) upto = std::max(upto, static_cast<std::uint64_t>(offset - 1));
    }
    // Never past a paused delivery: the copy and what follows it come again.
    if (paused_from_ > 0) upto = std::min(upto, paused_from_ - 1);
    // A session that ended took its unacked deliveries back: nothing to ack.
    if (upto == 0 || !consume_) return Status::Ok();
    if (int rc = amqp_basic_ack(consume_->state, kConsume, upto, /*multiple=*/1); rc != AMQP_STATUS_OK) {
      const std::string why = std::string("rabbitmq: basic.ack: ") + amqp_error_string2(rc);
      Lose(why);
      return Status::Unavailable(why);
    }
    return Status::Ok();
  }

  void Rewind(const std::map<TopicPartition, std::int64_t>& from) override {
    // Deliveries cannot be fetched again one by one: ending the session gives
    // every unacked one back to the queue, in its place; the next Poll opens
    // a new session (at once: this is not an outage).
    for (const auto& [tp, offset] : from) {
      if (tp.partition == session_ && consume_) {
        consume_.reset();
        retry_at_ = Clock::now();
        return;
      }
    }
  }

  // The engine pauses a retry copy that is not due yet (its batch's earlier
  // messages are still committed: acked below it). Copies expire from their
  // retry queue when due, so this happens only when the consumer that
  // forwarded it runs on a clock ahead of ours; the whole queue waits (its
  // deliveries after the copy are not acked: they come again, in order).
  void Pause(const TopicPartition& tp, std::int64_t offset) override {
    if (tp.partition != session_) return;
    paused_.insert(tp);
    const auto tag = static_cast<std::uint64_t>(offset);
    if (paused_from_ == 0 || tag < paused_from_) paused_from_ = tag;
  }
  void Resume(const TopicPartition& tp) override { paused_.erase(tp); }

  std::vector<PartitionLag> Lag() override {
    std::vector<PartitionLag> out;
    for (const auto& [t, depth] : depth_) out.push_back({{t, session_}, depth});
    return out;
  }

  std::string NotReadyReason() const override {
    MutexLock l(mu_);
    return not_ready_;
  }

 private:
  std::string Queue(const std::string& topic) const { return RabbitMqQueueName(options_.group, topic); }

  // A logged-in connection with `channel` open (in confirm mode with
  // `confirms`), or null with `error`.
  std::unique_ptr<Connection> Open(const char* name, int heartbeat_s, amqp_channel_t channel, bool confirms,
                                   Clock::time_point deadline, std::string* error) {
    auto c = std::make_unique<Connection>(amqp_new_connection());
    if (!c->state) {
      *error = "rabbitmq: out of memory";
      return nullptr;
    }
    Connection* raw = c.get();
    if (!OpenAndLogin(c->state, url_, options_.broker, name, heartbeat_s, deadline,
                      [raw](int fd) { raw->fd = fd; }, error)) {
      return nullptr;
    }
    if (!OpenChannel(c->state, channel, confirms, error)) {
      *error = "rabbitmq " + url_.host + ":" + std::to_string(url_.port) + ": " + *error;
      return nullptr;
    }
    return c;
  }

  // The consuming session: the topology, then a consumer per main queue.
  bool Connect() {
    if (Clock::now() < retry_at_) return false;
    const auto deadline = Clock::now() + options_.broker.timeout;
    std::string error;
    // Heartbeats: Poll services the connection every ~100 ms while idle.
    consume_ = Open("outbox-consumer", kHeartbeatS, kConsume, false, deadline, &error);
    bool inequivalent = false;
    if (consume_ && !DeclareTopology(consume_->state, kConsume, url_, options_, mains_, &error, &inequivalent)) {
      consume_.reset();
    }
    if (consume_) {
      amqp_basic_qos(consume_->state, kConsume, 0, static_cast<std::uint16_t>(options_.prefetch), 0);
      amqp_rpc_reply_t r = amqp_get_rpc_reply(consume_->state);
      error = ReplyText(r, "basic.qos");
      for (auto it = mains_.begin(); error.empty() && it != mains_.end(); ++it) {
        const std::string q = Queue(it->first);
        amqp_basic_consume(consume_->state, kConsume, Bytes(q), Bytes(q), 0, /*no_ack=*/0,
                           /*exclusive=*/0, amqp_empty_table);
        error = ReplyText(amqp_get_rpc_reply(consume_->state), ("basic.consume " + q).c_str());
      }
      if (!error.empty()) consume_.reset();
    }
    if (!consume_) {
      backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(5000));
      retry_at_ = Clock::now() + backoff_;
      NoteDown(error);
      return false;
    }
    ++session_;
    paused_from_ = 0;
    backoff_ = std::chrono::milliseconds(100);
    consumer_tags_.clear();
    for (const auto& [t, levels] : mains_) consumer_tags_[Queue(t)] = t;
    depth_at_ = Clock::time_point{};
    NoteUp();
    return true;
  }

  // A frame amqp_consume_message did not take. False with `why` when the
  // session is over.
  bool OtherFrame(std::string* why) {
    amqp_frame_t f;
    timeval zero{0, 0};
    const int rc = amqp_simple_wait_frame_noblock(consume_->state, &f, &zero);
    if (rc == AMQP_STATUS_TIMEOUT) return true;
    if (rc != AMQP_STATUS_OK) {
      *why = std::string("connection lost: ") + amqp_error_string2(rc);
      return false;
    }
    if (CloseText(f, why)) return false;
    if (f.frame_type != AMQP_FRAME_METHOD) return true;
    switch (f.payload.method.id) {
      case AMQP_BASIC_CANCEL_METHOD: {
        auto* m = static_cast<amqp_basic_cancel_t*>(f.payload.method.decoded);
        *why = "the broker cancelled the consumer of queue '" + Text(m->consumer_tag) +
               "' (deleted?)";
        return false;
      }
      default:
        return true;  // connection.blocked: consuming goes on
    }
  }

  InboundMessage Convert(const amqp_envelope_t& env) {
    InboundMessage m;
    const std::string tag = Text(env.consumer_tag);
    auto it = consumer_tags_.find(tag);
    m.topic = it == consumer_tags_.end() ? Text(env.exchange) : it->second;
    m.partition = session_;
    m.offset = static_cast<std::int64_t>(env.delivery_tag);
    ReadMessage(env.message, env.routing_key, &m);
    // A copy from a retry queue arrives with the queue's name as its routing
    // key: its own key travels in a header (ReadMessage), and so does the
    // retry topic it comes from (the engine counts attempts by it).
    if (auto r = m.headers.find(std::string(kRabbitMqRetryTopicHeader));
        r != m.headers.end() && SplitRetryTopic(r->second).first == m.topic) {
      m.topic = r->second;
    }
    return m;
  }

  // One forwarded copy: to the group's retry queue (expiring when due) or
  // dead-letter queue through the default exchange, else (a replay) to the
  // topic's exchange with its key.
  int Publish(const OutboundMessage& m) {
    std::string exchange, key, expiration;
    const auto [main, level] = SplitRetryTopic(m.topic);
    const bool dead = m.topic.size() > options_.dlt_suffix.size() &&
                      m.topic.compare(m.topic.size() - options_.dlt_suffix.size(),
                                      std::string::npos, options_.dlt_suffix) == 0;
    if (level > 0 || dead) {
      key = Queue(m.topic);
      if (level > 0) {
        const std::string* due = m.Header(inbox_headers::kDueAt);
        const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count();
        expiration = std::to_string(std::max<std::int64_t>(0, (due ? std::atoll(due->c_str()) : 0) - now_ms));
      }
    } else {
      exchange = m.topic;
      key = m.key;
    }
    std::map<std::string, std::string> h = m.headers;
    if (!m.key_is_null) h[kRabbitMqKeyHeader] = m.key;
    if (level > 0) {
      h[kRabbitMqRetryTopicHeader] = m.topic;
    } else {
      h.erase(kRabbitMqRetryTopicHeader);
    }
    return PublishMessage(forward_->state, kForward, exchange, key, h, m.payload, expiration);
  }

  // Queue depth (messages ready) per main topic, at most once a second while
  // a session is open: a passive declare on a connection of its own. Never on
  // the consuming connection: an RPC there makes rabbitmq-c queue every
  // delivery that arrives before its reply, and with a large prefetch
  // consuming then crawled (720 effects/s against 27,000 without it,
  // docs/benchmarks.md). A failure is not an outage (the consuming session
  // says that): the depth stays as last read and is tried again in 5 s.
  void RefreshDepth() {
    if (!consume_ || Clock::now() < depth_at_) return;
    depth_at_ = Clock::now() + std::chrono::seconds(1);
    std::string error;
    const auto deadline = Clock::now() + std::min<Clock::duration>(options_.broker.timeout, std::chrono::seconds(2));
    if (!lag_ && !(lag_ = Open("outbox-consumer-lag", 0, kLag, false, deadline, &error))) {
      depth_at_ = Clock::now() + std::chrono::seconds(5);
      return;
    }
    for (const auto& [t, levels] : mains_) {
      amqp_queue_declare_ok_t* ok =
          amqp_queue_declare(lag_->state, kLag, Bytes(Queue(t)), /*passive=*/1, 0, 0, 0, amqp_empty_table);
      if (!ok) {
        lag_.reset();
        depth_at_ = Clock::now() + std::chrono::seconds(5);
        return;
      }
      depth_[t] = ok->message_count;
    }
  }

  // The consuming session is over: its unacked deliveries go back to the queue.
  void Lose(const std::string& why) {
    consume_.reset();
    log_.Warn("rabbitmq consumer session ended; reconnecting (unacked messages are delivered again)",
              {{"group", options_.group}, {"error", why}});
    retry_at_ = Clock::now() + backoff_;
    NoteDown(why);
  }

  void NoteDown(const std::string& why) {
    MutexLock l(mu_);
    if (not_ready_.empty()) {
      log_.Warn("rabbitmq unreachable; retrying with backoff", {{"group", options_.group}, {"error", why}});
    }
    not_ready_ = "broker unreachable: " + why;
  }
  void NoteUp() {
    MutexLock l(mu_);
    if (!not_ready_.empty()) log_.Info("rabbitmq consumer session open", {{"group", options_.group}});
    not_ready_.clear();
  }

  const RabbitMqInboxSourceOptions options_;
  const AmqpUrl url_;
  Logger& log_;
  std::map<std::string, int> mains_;                 // main topic -> retry levels
  std::map<std::string, std::string> consumer_tags_;  // consumer tag (the queue) -> topic
  std::unique_ptr<Connection> consume_, forward_, lag_;
  std::uint64_t forward_tag_ = 1;
  int session_ = 0;  // the "partition": one per consuming session
  std::map<std::string, std::int64_t> depth_;
  std::set<TopicPartition> paused_;
  // The lowest delivery tag paused in this session (0: none): Commit acks
  // below it only (ack multiple covers every topic of the channel).
  std::uint64_t paused_from_ = 0;
  Clock::time_point depth_at_{}, retry_at_{};  // the next depth read; the next connect
  std::chrono::milliseconds backoff_{100};
  mutable Mutex mu_;
  std::string not_ready_ OUTBOX_GUARDED_BY(mu_);
};

}  // namespace

std::string RabbitMqQueueName(const std::string& group, const std::string& topic) {
  return group + "." + topic;
}

Status DeclareRabbitMqInbox(const RabbitMqInboxSourceOptions& options,
                           const std::vector<std::string>& topics) {
  OUTBOX_RETURN_IF_ERROR(ValidateRabbitMqOptions(options.broker));
  auto url = ParseAmqpUrl(options.broker.url);
  if (!url.ok()) return url.status();
  Connection c(amqp_new_connection());
  std::string error;
  if (!c.state || !OpenAndLogin(c.state, *url, options.broker, "outbox-consumer-declare", 0,
                                Clock::now() + options.broker.timeout, nullptr, &error) ||
      !OpenChannel(c.state, kConsume, false, &error)) {
    return Status::Unavailable(error.empty() ? "rabbitmq: out of memory" : error);
  }
  bool inequivalent = false;
  if (!DeclareTopology(c.state, kConsume, *url, options, MainTopics(topics), &error, &inequivalent)) {
    return inequivalent ? Status::InvalidArgument(error) : Status::Unavailable(error);
  }
  (void)amqp_channel_close(c.state, kConsume, AMQP_REPLY_SUCCESS);
  (void)amqp_connection_close(c.state, AMQP_REPLY_SUCCESS);
  return Status::Ok();
}

Result<std::unique_ptr<InboxSource>> OpenRabbitMqInboxSource(const RabbitMqInboxSourceOptions& options,
                                                             Logger& logger) {
  OUTBOX_RETURN_IF_ERROR(ValidateRabbitMqOptions(options.broker));
  if (options.group.empty()) return Status::InvalidArgument("rabbitmq: the group is required (it names the queues)");
  if (options.group.rfind("amq.", 0) == 0) {
    return Status::InvalidArgument("rabbitmq: group \"" + options.group +
                                   "\": queue names starting with amq. are the broker's");
  }
  if (options.prefetch < 1 || options.prefetch > 65535) {
    return Status::InvalidArgument("rabbitmq.prefetch must be 1..65535");
  }
  if (options.broker.exchange_type == "direct") {
    return Status::InvalidArgument(
        "rabbitmq.exchange_type direct cannot route every aggregate's key to the group's queue: "
        "use topic (the default), fanout or headers");
  }
  if (options.dlt_suffix.empty()) return Status::InvalidArgument("rabbitmq: the dead-letter suffix is empty");
  auto url = ParseAmqpUrl(options.broker.url);
  if (!url.ok()) return url.status();
  return std::unique_ptr<InboxSource>(new RabbitMqInboxSource(options, std::move(url).value(), logger));
}

}  // namespace outbox
