// Kafka transport on librdkafka. All librdkafka calls, and the classification
// of its errors into PublishOutcome, live in this file.
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "common.h"
#include "outbox/kafka.h"
#include "outbox/thread_annotations.h"
#include "outbox/time.h"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

bool IsTopicChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

// The one place where broker errors become outcomes.
PublishOutcome Classify(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return PublishOutcome::kAcked;
    // The message or its destination is wrong: retrying the same bytes to the same
    // topic cannot succeed; the row is set aside (FAILED) for an operator.
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
      return PublishOutcome::kFatal;
    // Everything else (timeouts, broker down, leader changes, unknown topic while
    // it is being created, a fatal producer state we recover from by recreating
    // the producer, ...) may succeed later.
    default:
      return PublishOutcome::kRetryable;
  }
}

// Errors that say the broker could not be reached, not that the event is wrong.
bool IsUnavailable(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
      return true;
    default:
      return false;
  }
}

PublishResult MakeResult(rd_kafka_resp_err_t err) {
  PublishResult r;
  r.outcome = Classify(err);
  r.broker_unavailable = r.outcome == PublishOutcome::kRetryable && IsUnavailable(err);
  if (err) r.error = std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err);
  return r;
}

PublishResult Unavailable(std::string why) {
  return PublishResult{PublishOutcome::kRetryable, std::move(why), /*broker_unavailable=*/true};
}

// The effective value of a producer property (aliases resolved by librdkafka).
std::string ConfValue(rd_kafka_conf_t* conf, const char* name) {
  char buf[512];
  std::size_t size = sizeof buf;
  if (rd_kafka_conf_get(conf, name, buf, &size) != RD_KAFKA_CONF_OK) return "";
  return buf;
}


// One Publish call's results, shared with the delivery-report callback (which
// may run after Publish gave up waiting, hence shared ownership).
struct BatchState {
  explicit BatchState(std::size_t n) : results(n), done(n, false), remaining(n) {}
  Mutex mu;
  std::condition_variable cv;
  std::vector<PublishResult> results OUTBOX_GUARDED_BY(mu);
  std::vector<bool> done OUTBOX_GUARDED_BY(mu);
  std::size_t remaining OUTBOX_GUARDED_BY(mu);

  void Complete(std::size_t i, PublishResult r) OUTBOX_EXCLUDES(mu) {
    MutexLock l(mu);
    if (done[i]) return;
    done[i] = true;
    results[i] = std::move(r);
    if (--remaining == 0) cv.notify_all();
  }
};

struct Slot {
  std::shared_ptr<BatchState> batch;
  std::size_t index;
};

class KafkaTransport final : public Transport {
 public:
  explicit KafkaTransport(KafkaTransportOptions options) : options_(std::move(options)) {}

  ~KafkaTransport() override {
    stop_ = true;
    if (poller_.joinable()) poller_.join();
    WriterLock l(rk_mu_);
    DestroyProducer();
  }

  Status Init() {
    auto d = options_.properties.find("delivery.timeout.ms");
    auto m = options_.properties.find("message.timeout.ms");
    if (d != options_.properties.end() && m != options_.properties.end() &&
        d->second != m->second) {
      return Status::InvalidArgument(
          "kafka properties delivery.timeout.ms (" + d->second + ") and message.timeout.ms (" +
          m->second + ") are aliases of one setting and disagree; set only one");
    }
    if (!options_.properties.count("bootstrap.servers")) {
      return Status::InvalidArgument("kafka property bootstrap.servers is required");
    }
    OUTBOX_RETURN_IF_ERROR(ValidateTopicTemplate(options_.topic_template));
    {
      WriterLock l(rk_mu_);
      OUTBOX_RETURN_IF_ERROR(CreateProducer());
    }
    poller_ = std::thread([this] { PollLoop(); });
    return Status::Ok();
  }

  std::chrono::milliseconds MaxPublishTime() const override {
    // Publish produces within kMetadataBudget (topic metadata, a full local
    // queue), purges what is unreported message.timeout.ms after its last
    // produce() call, and waits kReportMargin more for the purge's reports.
    return message_timeout_ + kMetadataBudget + kReportMargin;
  }

  std::string DescribeMaxPublishTime() const override {
    return timeout_source_ + "=" + std::to_string(message_timeout_.count()) + " + " +
           std::to_string((kMetadataBudget + kReportMargin).count()) +
           " (topic metadata wait and delivery-report margin)";
  }

  bool Healthy() const override { return !all_brokers_down_ && !fatal_; }

  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    if (fatal_) RecreateProducer();
    auto batch = std::make_shared<BatchState>(events.size());
    const auto start = Clock::now();
    const auto deadline = start + MaxPublishTime();
    {
      ReaderLock l(rk_mu_);
      // Waits before a message is handed over (topic metadata, a full local
      // queue) end by produce_by; the batch's messages then have
      // message.timeout.ms before the purge below ends them, all inside
      // MaxPublishTime(): none can outlive the call (and the lease).
      const auto produce_by = start + kMetadataBudget;
      LearnTopics(events, produce_by);
      std::uint64_t generation = 0;
      {
        MutexLock g(produce_mu_);
        generation = purges_;
      }
      // Aggregates with an event that failed before reaching the broker: their
      // later events in this batch must not overtake it (Transport::Publish).
      std::set<std::pair<std::string_view, std::string_view>> stopped;
      for (std::size_t i = 0; i < events.size(); ++i) {
        const Event& e = events[i].event;
        const auto key = std::make_pair(std::string_view(e.aggregate_type),
                                        std::string_view(e.aggregate_id));
        if (stopped.count(key)) {
          batch->Complete(i, {PublishOutcome::kNotSent,
                              "not sent: an earlier event of this aggregate failed first"});
          continue;
        }
        if (!Produce(events[i], batch, i, produce_by, generation)) stopped.insert(key);
      }
    }
    // librdkafka times nothing out by itself before this point (its own
    // message.timeout.ms is MaxPublishTime(), see CreateProducer): a message
    // that timed out alone in the queue leaves a gap the idempotent producer
    // does not close, and the next event of its aggregate, produced a moment
    // later, would reach the topic first. Instead the batch's unreported
    // messages end together, by a purge of every queue, which keeps only a
    // prefix of each partition's messages. The purge ends the messages of
    // every batch in flight, not only this one's (they come back retryable).
    const auto purge_at = std::min(Clock::now() + message_timeout_, deadline - kReportMargin);
    MutexLock l(batch->mu);
    while (batch->remaining != 0 &&
           batch->cv.wait_until(l.native(), purge_at) != std::cv_status::timeout) {
    }
    if (batch->remaining != 0) {
      l.native().unlock();  // PurgeQueues' reports complete this batch's messages
      PurgeQueues();
      l.native().lock();
      while (batch->remaining != 0 &&
             batch->cv.wait_until(l.native(), deadline) != std::cv_status::timeout) {
      }
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (!batch->done[i]) {
        batch->done[i] = true;
        batch->results[i] = Unavailable("no delivery report within the publish deadline");
      }
    }
    batch->remaining = 0;
    return batch->results;
  }

 private:
  Status CreateProducer() OUTBOX_REQUIRES(rk_mu_) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    if (Status st = kafka_internal::SetProperties(
            conf, {&KafkaProducerDefaults(), &options_.properties});  // ours, then the user's
        !st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    // Every property that bounds a message's life, aliases included, resolves to
    // message.timeout.ms in librdkafka; read the effective value from it. Read
    // once, before any other thread starts (a recreated producer has the same
    // properties); read-only after.
    if (!configured_) {
      const long timeout = std::atol(ConfValue(conf, "message.timeout.ms").c_str());
      if (timeout <= 0) {
        rd_kafka_conf_destroy(conf);
        return Status::InvalidArgument(
            "kafka property message.timeout.ms (or delivery.timeout.ms) must be > 0 (0 = "
            "infinite is not allowed: a publish must end)");
      }
      message_timeout_ = std::chrono::milliseconds(timeout);
      timeout_source_ = "kafka.properties.message.timeout.ms";
      for (const char* alias : {"delivery.timeout.ms", "message.timeout.ms"}) {
        if (options_.properties.count(alias)) {
          timeout_source_ = std::string("kafka.properties.") + alias;
        }
      }
      // librdkafka checks this itself, but only for a timeout it enforces.
      if (std::atof(ConfValue(conf, "linger.ms").c_str()) >= static_cast<double>(timeout)) {
        rd_kafka_conf_destroy(conf);
        return Status::InvalidArgument(
            "kafka property linger.ms must be less than message.timeout.ms (or "
            "delivery.timeout.ms)");
      }
      max_message_bytes_ = std::atol(ConfValue(conf, "message.max.bytes").c_str());
      configured_ = true;
    }
    // Publish enforces message.timeout.ms for the whole batch (see Publish).
    // librdkafka's own timeout stays only as a backstop that cannot fire before
    // Publish's purge: MaxPublishTime() from each message's produce call.
    const std::string backstop = std::to_string(MaxPublishTime().count());
    if (rd_kafka_conf_set(conf, "message.timeout.ms", backstop.c_str(), err, sizeof err) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return Status::Internal(std::string("kafka property message.timeout.ms: ") + err);
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_dr_msg_cb(conf, &KafkaTransport::OnDelivery);
    rd_kafka_conf_set_error_cb(conf, &KafkaTransport::OnError);
    if (options_.logger) rd_kafka_conf_set_log_cb(conf, &KafkaTransport::OnLog);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) return Status::InvalidArgument(std::string("kafka producer: ") + err);
    rk_ = rk;
    fatal_ = false;
    return Status::Ok();
  }

  void DestroyProducer() OUTBOX_REQUIRES(rk_mu_) {
    if (!rk_) return;
    // Purge what is still queued: those messages get a delivery report with
    // _PURGE_QUEUE, i.e. kRetryable, so nothing is silently dropped.
    rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(rk_, 2000);
    rd_kafka_destroy(rk_);
    rk_ = nullptr;
  }

  void RecreateProducer() {
    WriterLock l(rk_mu_);
    if (!fatal_) return;
    DestroyProducer();
    (void)CreateProducer();  // properties were valid once; they still are
  }

  // Ends every message still queued or in flight, in every partition, with a
  // _PURGE_QUEUE or _PURGE_INFLIGHT delivery report (both kRetryable). A
  // partition keeps a prefix of its messages: librdkafka empties the queues
  // from the newest stage (the application's queue) to the oldest (requests in
  // flight), and a request whose predecessor was not written is refused by the
  // broker (idempotence); batches still producing stop (see Produce).
  void PurgeQueues() {
    ReaderLock rk(rk_mu_);
    MutexLock l(produce_mu_);
    if (rk_) rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    ++purges_;
  }

  void PollLoop() {
    while (!stop_) {
      {
        ReaderLock l(rk_mu_);
        if (rk_) rd_kafka_poll(rk_, 50);
      }
      // Let a pending RecreateProducer take the exclusive lock.
      if (fatal_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // librdkafka learns a topic it has not seen on its next periodic metadata
  // scan, up to 1 s after the first message; ask for the metadata at once
  // instead (once per topic; failures just fall back to librdkafka's own way).
  // Waits at most until `until` in all, so the wait stays inside MaxPublishTime().
  void LearnTopics(std::span<const ClaimedEvent> events, Clock::time_point until)
      OUTBOX_REQUIRES_SHARED(rk_mu_) {
    for (const ClaimedEvent& ce : events) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return;
      std::string topic = RenderTopic(options_.topic_template, ce.event);
      {
        MutexLock l(topics_mu_);
        if (!known_topics_.insert(topic).second) continue;
      }
      if (!rk_) continue;
      rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_, topic.c_str(), nullptr);
      if (!rkt) continue;
      const rd_kafka_metadata_t* md = nullptr;
      const int timeout_ms = static_cast<int>(left.count());
      if (rd_kafka_metadata(rk_, 0, rkt, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
      } else {
        MutexLock l(topics_mu_);
        known_topics_.erase(topic);  // try again next time
      }
      rd_kafka_topic_destroy(rkt);
    }
  }

  // Hands one event to librdkafka. False if it was refused before reaching the
  // broker (its outcome is then already recorded in `batch`).
  bool Produce(const ClaimedEvent& ce, const std::shared_ptr<BatchState>& batch, std::size_t i,
               Clock::time_point produce_by, std::uint64_t generation) OUTBOX_REQUIRES_SHARED(rk_mu_) {
    if (!rk_) {
      batch->Complete(i, Unavailable("kafka producer unavailable"));
      return false;
    }
    const Event& e = ce.event;
    const std::string topic = RenderTopic(options_.topic_template, e);
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(8 + e.headers.size());
    std::size_t header_bytes = 0;
    auto add = [&](const char* name, const std::string& v) {
      header_bytes += std::strlen(name) + v.size();
      rd_kafka_header_add(hdrs, name, -1, v.data(), static_cast<ssize_t>(v.size()));
    };
    add("outbox-event-id", ce.event_id);
    add("outbox-event-type", e.event_type);
    add("outbox-aggregate-type", e.aggregate_type);
    add("outbox-aggregate-id", e.aggregate_id);
    if (e.dedup_key) add("outbox-dedup-key", *e.dedup_key);
    add("outbox-created-at", FormatRfc3339(ce.created_at, 6));
    add("outbox-attempt", std::to_string(ce.attempts));
    for (const Header& h : e.headers) add(h.name.c_str(), h.value);

    auto* slot = new Slot{batch, i};
    for (;;) {
      rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
      {
        MutexLock l(produce_mu_);
        if (purges_ != generation) {
          // A purge (another batch's deadline) may have removed this batch's
          // earlier messages: producing the rest could let them pass those.
          rd_kafka_headers_destroy(hdrs);
          delete slot;
          batch->Complete(i, Unavailable("not produced: the producer's queues were purged at a "
                                         "publish deadline during this batch"));
          return false;
        }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
        err = rd_kafka_producev(
            rk_, RD_KAFKA_V_TOPIC(topic.c_str()),
            RD_KAFKA_V_KEY(e.aggregate_id.data(), e.aggregate_id.size()),
            RD_KAFKA_V_VALUE(const_cast<char*>(e.payload.data()), e.payload.size()),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE(slot), RD_KAFKA_V_END);
#pragma GCC diagnostic pop
      }
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return true;  // headers now owned by librdkafka
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && Clock::now() < produce_by) {
        // The bounded local queue is full: wait for delivery reports to drain it.
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      rd_kafka_headers_destroy(hdrs);
      delete slot;
      PublishResult r = MakeResult(err);
      if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
        // librdkafka checks the size before sending: the local producer refused
        // it, not the broker. Say which limit and which setting.
        r.error = "MSG_SIZE_TOO_LARGE: refused by the local producer before sending: payload " +
                  std::to_string(e.payload.size()) + " + key " +
                  std::to_string(e.aggregate_id.size()) + " + headers ~" +
                  std::to_string(header_bytes) + " bytes exceed message.max.bytes=" +
                  std::to_string(max_message_bytes_) +
                  " (kafka.properties.message.max.bytes; enqueue's limit is the setting "
                  "outbox.max_event_bytes)";
      }
      batch->Complete(i, std::move(r));
      return false;
    }
  }

  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaTransport*>(opaque);
    auto* slot = static_cast<Slot*>(m->_private);
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) self->all_brokers_down_ = false;
    if (slot) {
      slot->batch->Complete(slot->index, MakeResult(m->err));
      delete slot;
    }
  }

  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    auto* self = static_cast<KafkaTransport*>(opaque);
    auto code = static_cast<rd_kafka_resp_err_t>(err);
    if (code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) self->all_brokers_down_ = true;
    if (code == RD_KAFKA_RESP_ERR__FATAL) {
      char buf[512];
      rd_kafka_fatal_error(rk, buf, sizeof buf);
      self->fatal_ = true;  // the next Publish recreates the producer
    }
    if (self->options_.logger) kafka_internal::LogKafkaError(*self->options_.logger, rk, err, reason);
  }
  static void OnLog(const rd_kafka_t* rk, int level, const char* facility, const char* text) {
    auto* self = static_cast<KafkaTransport*>(rd_kafka_opaque(rk));
    if (self && self->options_.logger) {
      kafka_internal::LogFromKafka(*self->options_.logger, rk, level, facility, text);
    }
  }

  // MaxPublishTime() = message.timeout.ms + the two below (5 s in all, as before
  // the metadata wait was counted). kMetadataBudget bounds every wait before a
  // message is produced; kReportMargin covers the delivery-report callback.
  static constexpr std::chrono::milliseconds kMetadataBudget{2500};
  static constexpr std::chrono::milliseconds kReportMargin{2500};

  KafkaTransportOptions options_;
  std::chrono::milliseconds message_timeout_{10000};  // effective message.timeout.ms
  std::string timeout_source_;                        // the key that set it
  long max_message_bytes_ = 0;                        // effective message.max.bytes
  bool configured_ = false;                           // the three above are set
  SharedMutex rk_mu_;  // exclusive only to create, recreate and destroy the producer
  rd_kafka_t* rk_ OUTBOX_GUARDED_BY(rk_mu_) = nullptr;
  std::thread poller_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> all_brokers_down_{false};
  std::atomic<bool> fatal_{false};
  Mutex topics_mu_;
  std::set<std::string> known_topics_ OUTBOX_GUARDED_BY(topics_mu_);
  // Orders every produce call against PurgeQueues(): a batch that began
  // before a purge produces nothing after it.
  Mutex produce_mu_;
  std::uint64_t purges_ OUTBOX_GUARDED_BY(produce_mu_) = 0;
};

}  // namespace

std::string_view PublishOutcomeName(PublishOutcome o) {
  switch (o) {
    case PublishOutcome::kAcked: return "acked";
    case PublishOutcome::kRetryable: return "retriable";
    case PublishOutcome::kFatal: return "fatal";
    case PublishOutcome::kNotSent: return "not_sent";
  }
  return "unknown";
}

Status ValidateTopicTemplate(const std::string& tmpl) {
  if (tmpl.empty()) return Status::InvalidArgument("topic_template is empty");
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      std::size_t end = tmpl.find('}', i);
      if (end == std::string::npos) {
        return Status::InvalidArgument("topic_template \"" + tmpl + "\": unclosed '{'");
      }
      std::string name = tmpl.substr(i + 1, end - i - 1);
      if (name != "aggregate_type" && name != "event_type") {
        return Status::InvalidArgument("topic_template \"" + tmpl + "\": unknown placeholder {" +
                                       name + "} (known: {aggregate_type}, {event_type})");
      }
      i = end + 1;
    } else {
      if (!IsTopicChar(tmpl[i])) {
        return Status::InvalidArgument("topic_template \"" + tmpl + "\": character '" +
                                       std::string(1, tmpl[i]) +
                                       "' is not allowed in a Kafka topic name");
      }
      ++i;
    }
  }
  return Status::Ok();
}

std::string RenderTopic(const std::string& tmpl, const Event& event) {
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      std::size_t end = tmpl.find('}', i);
      const std::string& v =
          tmpl.compare(i + 1, end - i - 1, "event_type") == 0 ? event.event_type
                                                               : event.aggregate_type;
      // event_type is free text; map what Kafka does not allow to '_'.
      for (char c : v) out += IsTopicChar(c) ? c : '_';
      i = end + 1;
    } else {
      out += tmpl[i++];
    }
  }
  return out.substr(0, 249);
}

Result<std::unique_ptr<Transport>> OpenKafkaTransport(const KafkaTransportOptions& options) {
  auto t = std::make_unique<KafkaTransport>(options);
  OUTBOX_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace outbox
