// The Kafka side of the inbox: a consumer-group member that implements
// InboxSource, its forwarding producer, and dead-letter replay. All librdkafka
// calls of the consumer side are in this file.
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <memory>
#include <set>

#include "common.h"
#include "outbox/kafka.h"
#include "outbox/thread_annotations.h"

namespace outbox {
namespace {

using kafka_internal::Props;
using std::chrono::milliseconds;
namespace h = inbox_headers;

InboundMessage ToInbound(const rd_kafka_message_t* m) {
  InboundMessage in;
  in.topic = rd_kafka_topic_name(m->rkt);
  in.partition = m->partition;
  in.offset = m->offset;
  if (m->key) in.key.assign(static_cast<const char*>(m->key), m->key_len);
  in.key_is_null = m->key == nullptr;
  if (m->payload) {
    in.payload.assign(static_cast<const char*>(m->payload), m->len);
  } else {
    in.payload_is_null = true;
  }
  rd_kafka_timestamp_type_t tstype;
  std::int64_t ts = rd_kafka_message_timestamp(m, &tstype);
  if (ts >= 0) in.timestamp = std::chrono::system_clock::time_point(milliseconds(ts));
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name;
    const void* val;
    size_t size;
    for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == 0; ++i) {
      in.headers[name] = val ? std::string(static_cast<const char*>(val), size) : std::string();
    }
  }
  return in;
}

// The consumer bounds every forwarded copy to ConsumerOptions::forward_max_bytes
// (at most kMaxForwardMaxBytes) of key, value and headers: with the record's
// framing it must fit this producer's message.max.bytes.
static_assert(kMaxForwardMaxBytes + 4'096 == static_cast<std::size_t>(kForwardMessageMaxBytes));

// A synchronous producer for forwarding (retry, dead-letter, replay), with the
// transport's producer defaults.
class Forwarder {
 public:
  ~Forwarder() {
    if (rk_) {
      rd_kafka_flush(rk_, 5000);
      rd_kafka_destroy(rk_);
    }
  }

  // `logger` (borrowed; null: librdkafka's own stderr logging) gets the
  // producer's log lines and errors.
  Status Init(const Props& consumer_props, Logger* logger) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    const Props connection = kafka_internal::ConnectionProperties(consumer_props);
    // Room for the failure headers on top of the largest event.
    const Props forward = {{"message.max.bytes", std::to_string(kForwardMessageMaxBytes)}};
    Status st = kafka_internal::SetProperties(
        conf, {&KafkaProducerDefaults(), &forward, &connection});
    if (!st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
      auto* slot = static_cast<rd_kafka_resp_err_t*>(m->_private);
      if (slot) *slot = m->err;
    });
    if (logger) {
      rd_kafka_conf_set_opaque(conf, logger);
      rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
        kafka_internal::LogFromKafka(*static_cast<Logger*>(rd_kafka_opaque(rk)), rk, level, fac, buf);
      });
      rd_kafka_conf_set_error_cb(conf, [](rd_kafka_t* rk, int err, const char* reason, void* opaque) {
        kafka_internal::LogKafkaError(*static_cast<Logger*>(opaque), rk, err, reason);
      });
    }
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) return Status::InvalidArgument(std::string("forwarding producer: ") + err);
    return Status::Ok();
  }

  // Produces all and waits for every delivery report; returns the first error.
  Status Send(std::span<const OutboundMessage> items) {
    // The delivery reports' slots live on the heap: if some report is still due
    // when this call gives up, the slots are kept (orphans_) rather than freed
    // under it.
    auto slots = std::make_shared<std::vector<rd_kafka_resp_err_t>>(items.size(),
                                                                   RD_KAFKA_RESP_ERR__IN_PROGRESS);
    std::vector<rd_kafka_resp_err_t>& results = *slots;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const OutboundMessage& it = items[i];
      rd_kafka_headers_t* hdrs = rd_kafka_headers_new(it.headers.size());
      for (const auto& [k, v] : it.headers) {
        rd_kafka_header_add(hdrs, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
      }
      void* value = it.payload_is_null ? nullptr : const_cast<char*>(it.payload.data());
      const std::size_t value_len = it.payload_is_null ? 0 : it.payload.size();
      const void* key = it.key_is_null ? nullptr : it.key.data();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk_, RD_KAFKA_V_TOPIC(it.topic.c_str()), RD_KAFKA_V_KEY(key, it.key.size()),
          RD_KAFKA_V_VALUE(value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(&results[i]), RD_KAFKA_V_END);
#pragma GCC diagnostic pop
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(hdrs);
        results[i] = e;
      }
    }
    if (rd_kafka_flush(rk_, 15000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      // A broker that does not answer (a path that black-holes): end what is
      // left now, so that no delivery report can come after `results` is gone;
      // each ends _PURGE_QUEUE or _PURGE_INFLIGHT, and the originals are
      // consumed again.
      rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      if (rd_kafka_flush(rk_, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) orphans_.push_back(slots);
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (results[i] != RD_KAFKA_RESP_ERR_NO_ERROR) {
        // The originals are consumed again; a refusal that cannot pass (a copy
        // over the size limit, a topic not allowed) keeps failing, loudly.
        return Status::Unavailable("forward to " + items[i].topic + ": " +
                                   rd_kafka_err2name(results[i]) + ": " +
                                   rd_kafka_err2str(results[i]));
      }
    }
    return Status::Ok();
  }

 private:
  rd_kafka_t* rk_ = nullptr;
  // Slots of calls that gave up with reports still due (rare: a broker that
  // answers nothing even to the purge's flush); small, kept for the
  // producer's life.
  std::vector<std::shared_ptr<std::vector<rd_kafka_resp_err_t>>> orphans_;
};

rd_kafka_topic_partition_list_t* ToList(const std::map<TopicPartition, std::int64_t>& offsets) {
  auto* l = rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size()));
  for (const auto& [tp, off] : offsets) {
    rd_kafka_topic_partition_list_add(l, tp.topic.c_str(), tp.partition)->offset = off;
  }
  return l;
}

class KafkaInboxSource final : public InboxSource {
 public:
  KafkaInboxSource(Props props, Logger& log) : props_(std::move(props)), log_(log) {}

  ~KafkaInboxSource() override {
    if (rk_) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }

  Status Init() {
    for (const char* k : {"bootstrap.servers", "group.id"}) {
      if (!props_.count(k)) {
        return Status::InvalidArgument(std::string("inbox source: kafka property ") + k +
                                       " is required");
      }
    }
    static const Props kConsumerDefaults = {{"enable.auto.commit", "false"},
                                            {"enable.auto.offset.store", "false"},
                                            {"auto.offset.reset", "earliest"},
                                            {"session.timeout.ms", "10000"},
                                            {"heartbeat.interval.ms", "1000"},
                                            {"log_level", "4"}};
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    Status st = kafka_internal::SetProperties(conf, {&kConsumerDefaults, &props_});
    if (!st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaInboxSource::OnRebalance);
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
      auto* self = static_cast<KafkaInboxSource*>(rd_kafka_opaque(rk));
      kafka_internal::LogFromKafka(self->log_, rk, level, fac, buf);
    });
    rd_kafka_conf_set_error_cb(conf, [](rd_kafka_t* rk, int err, const char* reason, void* opaque) {
      auto* self = static_cast<KafkaInboxSource*>(opaque);
      kafka_internal::LogKafkaError(self->log_, rk, err, reason);
      const auto code = static_cast<rd_kafka_resp_err_t>(err);
      if (code == RD_KAFKA_RESP_ERR__TIMED_OUT || code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
          code == RD_KAFKA_RESP_ERR__TRANSPORT) {
        self->NoteBroker(std::string("broker unreachable: ") + rd_kafka_err2name(code) + ": " +
                         (reason ? reason : ""));
      }
    });
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk_) return Status::InvalidArgument(std::string("inbox source: ") + err);
    rd_kafka_poll_set_consumer(rk_);
    return forwarder_.Init(props_, &log_);
  }

  Status Subscribe(const std::vector<std::string>& topics) override {
    rd_kafka_topic_partition_list_t* subs =
        rd_kafka_topic_partition_list_new(static_cast<int>(topics.size()));
    for (const auto& t : topics) {
      rd_kafka_topic_partition_list_add(subs, t.c_str(), RD_KAFKA_PARTITION_UA);
    }
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (e) return Status::InvalidArgument(std::string("subscribe: ") + rd_kafka_err2str(e));
    return Status::Ok();
  }

  std::vector<InboundMessage> Poll(int max, milliseconds fill_wait) override {
    std::vector<InboundMessage> out;
    const auto deadline = std::chrono::steady_clock::now() + fill_wait;
    revoked_ = false;
    while (static_cast<int>(out.size()) < max) {
      int timeout = out.empty() ? 100
                                : static_cast<int>(std::max<long long>(
                                      0, std::chrono::duration_cast<milliseconds>(
                                             deadline - std::chrono::steady_clock::now())
                                             .count()));
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, timeout);
      if (!m) break;  // back to the engine: paused partitions may be due
      if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          log_.Warn("consumer error", {{"error", rd_kafka_message_errstr(m)}});
        }
      } else {
        out.push_back(ToInbound(m));
      }
      if (!m->err || m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) NoteBroker("");
      rd_kafka_message_destroy(m);
    }
    if (revoked_) {
      // A rebalance inside this call took partitions away: their messages now
      // belong to the new owner, who consumes them from the committed offset.
      const std::size_t before = out.size();
      std::erase_if(out, [&](const InboundMessage& m) {
        return !owned_.count(TopicPartition{m.topic, m.partition});
      });
      if (out.size() != before) {
        log_.Info("dropped messages of revoked partitions",
                  {{"messages", std::to_string(before - out.size())}});
      }
    }
    return out;
  }

  Status Forward(std::span<const OutboundMessage> messages) override {
    return forwarder_.Send(messages);
  }

  Status Commit(const std::map<TopicPartition, std::int64_t>& next) override {
    std::map<TopicPartition, std::int64_t> mine;
    for (const auto& [tp, off] : next) {
      if (owned_.count(tp)) mine.emplace(tp, off);
    }
    if (mine.size() != next.size()) {
      log_.Info("offsets of revoked partitions not committed",
                {{"partitions", std::to_string(next.size() - mine.size())}});
    }
    if (mine.empty()) return Status::Ok();
    rd_kafka_topic_partition_list_t* l = ToList(mine);
    rd_kafka_resp_err_t e = rd_kafka_commit(rk_, l, /*async=*/0);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) return Status::Unavailable(std::string("offset commit: ") + rd_kafka_err2str(e));
    NoteBroker("");
    return Status::Ok();
  }

  void Rewind(const std::map<TopicPartition, std::int64_t>& from) override {
    std::map<TopicPartition, std::int64_t> mine;
    for (const auto& [tp, off] : from) {
      if (owned_.count(tp)) mine.emplace(tp, off);
    }
    if (mine.empty()) return;
    rd_kafka_topic_partition_list_t* l = ToList(mine);
    Seek(l);
    rd_kafka_topic_partition_list_destroy(l);
  }

  void Pause(const TopicPartition& tp, std::int64_t offset) override {
    rd_kafka_topic_partition_list_t* l = ToList({{tp, offset}});
    // Seek first (a seek waits for the fetcher, which a pause would stop), so
    // the held message is fetched again after the resume.
    Seek(l);
    rd_kafka_pause_partitions(rk_, l);
    rd_kafka_topic_partition_list_destroy(l);
  }

  void Resume(const TopicPartition& tp) override {
    rd_kafka_topic_partition_list_t* l = ToList({{tp, 0}});
    rd_kafka_resume_partitions(rk_, l);
    rd_kafka_topic_partition_list_destroy(l);
  }

  std::vector<PartitionLag> Lag() override {
    std::vector<PartitionLag> out;
    if (owned_.empty()) return out;
    std::map<TopicPartition, std::int64_t> zero;
    for (const auto& tp : owned_) zero.emplace(tp, RD_KAFKA_OFFSET_INVALID);
    rd_kafka_topic_partition_list_t* l = ToList(zero);
    rd_kafka_position(rk_, l);
    for (int i = 0; i < l->cnt; ++i) {
      const auto& p = l->elems[i];
      std::int64_t lo = -1, hi = -1;
      PartitionLag pl{{p.topic, p.partition}, -1};
      if (rd_kafka_get_watermark_offsets(rk_, p.topic, p.partition, &lo, &hi) ==
              RD_KAFKA_RESP_ERR_NO_ERROR &&
          hi >= 0) {
        // No position yet (nothing consumed since the assignment): all of it.
        const std::int64_t pos = p.offset >= 0 ? p.offset : std::max<std::int64_t>(lo, 0);
        pl.lag = std::max<std::int64_t>(0, hi - pos);
      }
      out.push_back(pl);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return out;
  }

 private:
  // Runs inside rd_kafka_consumer_poll, on the Poll thread. What librdkafka does
  // without a callback (take or give up the partitions), plus our record of what
  // this member owns, and a log line.
  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque) {
    auto* self = static_cast<KafkaInboxSource*>(opaque);
    const bool cooperative = std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
    const bool assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
    self->log_.Info(assign ? "partitions assigned" : "partitions revoked",
                    {{"count", std::to_string(parts->cnt)}});
    if (assign) self->NoteBroker("");
    if (!assign) self->revoked_ = true;
    if (!cooperative && !assign) self->owned_.clear();
    for (int i = 0; i < parts->cnt; ++i) {
      TopicPartition tp{parts->elems[i].topic, parts->elems[i].partition};
      if (assign) {
        self->owned_.insert(tp);
      } else {
        self->owned_.erase(tp);
      }
    }
    if (cooperative) {
      rd_kafka_error_t* e = assign ? rd_kafka_incremental_assign(rk, parts)
                                   : rd_kafka_incremental_unassign(rk, parts);
      if (e) {
        self->log_.Warn("incremental rebalance failed", {{"error", rd_kafka_error_string(e)}});
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, assign ? parts : nullptr);
    }
  }

  void Seek(rd_kafka_topic_partition_list_t* l) {
    if (rd_kafka_error_t* e = rd_kafka_seek_partitions(rk_, l, 5000)) {
      log_.Warn("seek failed; messages may be redelivered later than expected",
                {{"error", rd_kafka_error_string(e)}});
      rd_kafka_error_destroy(e);
    }
  }

  void NoteBroker(std::string why) {
    MutexLock l(health_mu_);
    broker_error_ = std::move(why);
    broker_error_at_ = std::chrono::steady_clock::now();
  }

 public:
  // An error ages out after kBrokerErrorHold without a new one: an idle
  // consumer gets no message, assignment or commit to clear it, while a broker
  // that stays away keeps reporting (request timeouts recur).
  std::string NotReadyReason() const override {
    static constexpr auto kBrokerErrorHold = std::chrono::seconds(60);
    MutexLock l(health_mu_);
    if (std::chrono::steady_clock::now() - broker_error_at_ > kBrokerErrorHold) return "";
    return broker_error_;
  }

 private:
  Props props_;
  Logger& log_;
  rd_kafka_t* rk_ = nullptr;
  Forwarder forwarder_;
  mutable Mutex health_mu_;  // librdkafka's threads write, /readyz reads
  std::string broker_error_ OUTBOX_GUARDED_BY(health_mu_);
  std::chrono::steady_clock::time_point broker_error_at_ OUTBOX_GUARDED_BY(health_mu_);
  std::set<TopicPartition> owned_;  // as of the last rebalance callback
  bool revoked_ = false;            // a revocation happened during this Poll
};

}  // namespace

Result<std::unique_ptr<InboxSource>> OpenKafkaInboxSource(const KafkaInboxSourceOptions& options,
                                                          Logger& logger) {
  auto s = std::make_unique<KafkaInboxSource>(options.properties, logger);
  OUTBOX_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<InboxSource>(std::move(s));
}

Result<ReplayResult> ReplayDeadLetters(const std::map<std::string, std::string>& properties,
                                       const std::string& dlt_topic, const ReplayFilter& filter,
                                       bool dry_run, const ReplayProgress& progress) {
  if (!properties.count("bootstrap.servers")) {
    return Status::InvalidArgument("replay: kafka property bootstrap.servers is required");
  }
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  const Props defaults = {
      {"group.id", "outbox-dlt-replay"}, {"enable.auto.commit", "false"}, {"log_level", "3"}};
  Status st = kafka_internal::SetProperties(conf, {&defaults, &properties});
  if (!st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!rk) return Status::InvalidArgument(std::string("replay: ") + err);
  Forwarder fwd;
  if (Status fs = fwd.Init(properties, nullptr); !fs.ok()) {
    rd_kafka_destroy(rk);
    return fs;
  }

  // Partitions of the dead-letter topic and where each ends now.
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, dlt_topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
  rd_kafka_topic_destroy(rkt);
  if (e) {
    rd_kafka_destroy(rk);
    return Status::Unavailable("replay: metadata for " + dlt_topic + ": " + rd_kafka_err2str(e));
  }
  std::map<int, std::int64_t> high;
  rd_kafka_topic_partition_list_t* assign = rd_kafka_topic_partition_list_new(4);
  for (int t = 0; t < md->topic_cnt; ++t) {
    for (int pi = 0; pi < md->topics[t].partition_cnt; ++pi) {
      int part = md->topics[t].partitions[pi].id;
      std::int64_t lo = 0, hi = 0;
      rd_kafka_query_watermark_offsets(rk, dlt_topic.c_str(), part, &lo, &hi, 10000);
      if (hi > lo) {
        high[part] = hi;
        rd_kafka_topic_partition_list_add(assign, dlt_topic.c_str(), part)->offset = lo;
      }
    }
  }
  rd_kafka_metadata_destroy(md);
  ReplayResult result;
  std::vector<OutboundMessage> items;
  if (!high.empty()) {
    rd_kafka_assign(rk, assign);
    std::map<int, bool> done;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (done.size() < high.size() && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 200);
      if (!m) continue;
      if (!m->err) {
        InboundMessage in = ToInbound(m);
        ++result.scanned;
        const std::string from =
            dlt_topic + "/" + std::to_string(in.partition) + "/" + std::to_string(in.offset);
        if (ReplayMatches(filter, in) && in.Header(h::kTruncated)) {
          result.not_replayable.push_back(NotReplayableText(in, from));
        } else if (ReplayMatches(filter, in)) {
          items.push_back(ReplayCopy(in, *in.Header(h::kOrigTopic), from));
        }
        if (m->offset + 1 >= high[m->partition]) done[m->partition] = true;
        if (progress) progress(result.scanned, items.size());
      }
      rd_kafka_message_destroy(m);
    }
  }
  rd_kafka_topic_partition_list_destroy(assign);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  if (!dry_run && !items.empty()) OUTBOX_RETURN_IF_ERROR(fwd.Send(items));
  result.replayed = items.size();
  return result;
}

}  // namespace outbox
