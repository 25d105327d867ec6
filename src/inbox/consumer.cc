// The Kafka consumer runner of the inbox, and dead-letter replay. All librdkafka
// calls of the consumer side are in this file.
#include "outbox/consumer.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <thread>

#include "outbox/fault.h"

namespace outbox {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::milliseconds;

const char* kOrigTopic = "outbox-original-topic";
const char* kOrigPartition = "outbox-original-partition";
const char* kOrigOffset = "outbox-original-offset";
const char* kErrClass = "outbox-error-class";
const char* kErrMessage = "outbox-error-message";
const char* kAttempt = "outbox-attempt";
const char* kFirstFailure = "outbox-first-failure-at";
const char* kDueAt = "outbox-retry-due-at";

std::int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
}

std::string Rfc3339Now() {
  std::time_t t = Clock::to_time_t(Clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "orders.retry.2" -> ("orders", 2); else (topic, 0).
std::pair<std::string, int> SplitRetry(const std::string& topic) {
  auto pos = topic.rfind(".retry.");
  if (pos == std::string::npos) return {topic, 0};
  int n = std::atoi(topic.c_str() + pos + 7);
  if (n <= 0) return {topic, 0};
  return {topic.substr(0, pos), n};
}

Status SetProps(rd_kafka_conf_t* conf, const std::map<std::string, std::string>& props) {
  char err[512];
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      return Status::InvalidArgument("kafka property " + k + "=\"" + v + "\": " + err);
    }
  }
  return Status::Ok();
}

InboundMessage ToInbound(const rd_kafka_message_t* m) {
  InboundMessage in;
  in.topic = rd_kafka_topic_name(m->rkt);
  in.partition = m->partition;
  in.offset = m->offset;
  if (m->key) in.key.assign(static_cast<const char*>(m->key), m->key_len);
  if (m->payload) in.payload.assign(static_cast<const char*>(m->payload), m->len);
  rd_kafka_timestamp_type_t tstype;
  std::int64_t ts = rd_kafka_message_timestamp(m, &tstype);
  if (ts >= 0) in.timestamp = Clock::time_point(milliseconds(ts));
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

// A synchronous little producer for forwarding (retry, dead-letter, replay).
class Forwarder {
 public:
  ~Forwarder() {
    if (rk_) {
      rd_kafka_flush(rk_, 5000);
      rd_kafka_destroy(rk_);
    }
  }
  Status Init(const std::map<std::string, std::string>& consumer_props) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::map<std::string, std::string> p = {{"enable.idempotence", "true"},
                                            {"acks", "all"},
                                            {"linger.ms", "1"},
                                            {"message.timeout.ms", "10000"},
                                            {"socket.nagle.disable", "true"},
                                            {"log_level", "4"}};
    for (const char* k : {"bootstrap.servers", "security.protocol", "sasl.mechanisms",
                          "sasl.username", "sasl.password", "ssl.ca.location"}) {
      auto it = consumer_props.find(k);
      if (it != consumer_props.end()) p[k] = it->second;
    }
    Status st = SetProps(conf, p);
    if (!st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
      auto* slot = static_cast<rd_kafka_resp_err_t*>(m->_private);
      if (slot) *slot = m->err;
    });
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) return Status::InvalidArgument(std::string("forwarding producer: ") + err);
    return Status::Ok();
  }

  struct Item {
    std::string topic, key, payload;
    std::map<std::string, std::string> headers;
    rd_kafka_resp_err_t result = RD_KAFKA_RESP_ERR__IN_PROGRESS;
  };

  // Produces all and waits for every delivery report; returns the first error.
  Status Send(std::vector<Item>& items) {
    for (Item& it : items) {
      rd_kafka_headers_t* h = rd_kafka_headers_new(it.headers.size());
      for (const auto& [k, v] : it.headers) {
        rd_kafka_header_add(h, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
      }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk_, RD_KAFKA_V_TOPIC(it.topic.c_str()), RD_KAFKA_V_KEY(it.key.data(), it.key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(it.payload.data()), it.payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
          RD_KAFKA_V_OPAQUE(&it.result), RD_KAFKA_V_END);
#pragma GCC diagnostic pop
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_destroy(h);
        it.result = e;
      }
    }
    rd_kafka_flush(rk_, 15000);
    for (const Item& it : items) {
      if (it.result != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return Status::Unavailable("forward to " + it.topic + ": " + rd_kafka_err2str(it.result));
      }
    }
    return Status::Ok();
  }

 private:
  rd_kafka_t* rk_ = nullptr;
};

class KafkaConsumer final : public Consumer {
 public:
  KafkaConsumer(ConsumerOptions o, Inbox& inbox, DedupKeyFn d, Handler h, BatchHandler b, Logger& l)
      : options_(std::move(o)),
        inbox_(inbox),
        dedup_(std::move(d)),
        handler_(std::move(h)),
        batch_handler_(std::move(b)),
        log_(l) {}

  ~KafkaConsumer() override {
    if (rk_) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }

  Status Init() {
    if (!options_.properties.count("bootstrap.servers") || !options_.properties.count("group.id")) {
      return Status::InvalidArgument("consumer: kafka properties bootstrap.servers and group.id are required");
    }
    if (options_.topics.empty()) return Status::InvalidArgument("consumer: no topics");
    if (options_.batch_size < 1) return Status::InvalidArgument("consumer: batch_size must be >= 1");
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::map<std::string, std::string> p = {{"enable.auto.commit", "false"},
                                            {"enable.auto.offset.store", "false"},
                                            {"auto.offset.reset", "earliest"},
                                            {"session.timeout.ms", "10000"},
                                            {"heartbeat.interval.ms", "1000"},
                                            {"log_level", "4"}};
    for (const auto& [k, v] : options_.properties) p[k] = v;
    Status st = SetProps(conf, p);
    if (!st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaConsumer::OnRebalance);
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk_) return Status::InvalidArgument(std::string("consumer: ") + err);
    rd_kafka_poll_set_consumer(rk_);
    rd_kafka_topic_partition_list_t* subs = rd_kafka_topic_partition_list_new(8);
    for (const auto& t : options_.topics) {
      rd_kafka_topic_partition_list_add(subs, t.c_str(), RD_KAFKA_PARTITION_UA);
      for (std::size_t i = 1; i <= options_.retry_delays.size(); ++i) {
        rd_kafka_topic_partition_list_add(subs, (t + ".retry." + std::to_string(i)).c_str(),
                                          RD_KAFKA_PARTITION_UA);
      }
    }
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (e) return Status::InvalidArgument(std::string("subscribe: ") + rd_kafka_err2str(e));
    return forwarder_.Init(p);
  }

  void Stop() override { stop_ = true; }

  // What librdkafka does without a callback (take or give up the partitions),
  // plus a log line: operators want to see when a member owns what.
  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque) {
    auto* self = static_cast<KafkaConsumer*>(opaque);
    const bool cooperative = std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
    const bool assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
    self->log_.Info(assign ? "partitions assigned" : "partitions revoked",
                    {{"count", std::to_string(parts->cnt)}});
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

  ConsumerCounters counters() const override {
    return {applied_.load(), duplicates_.load(), retried_.load(), dead_lettered_.load()};
  }

  Status Run() override {
    log_.Info("consumer started", {{"topics", Join(options_.topics)}});
    milliseconds backoff{100};
    auto next_purge = std::chrono::steady_clock::now() + options_.purge_interval;
    while (!stop_) {
      if (options_.stamp_retention.count() > 0 && std::chrono::steady_clock::now() >= next_purge) {
        next_purge = std::chrono::steady_clock::now() + options_.purge_interval;
        PurgeStamps();
      }
      ResumeDue();
      std::vector<rd_kafka_message_t*> raw = PollBatch();
      if (raw.empty()) continue;
      Status st = HandleBatch(raw);
      for (auto* m : raw) rd_kafka_message_destroy(m);
      if (!st.ok()) {
        log_.Warn("batch not completed; it will be consumed again", {{"error", st.ToString()}});
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, milliseconds(5000));
      } else {
        backoff = milliseconds(100);
      }
    }
    log_.Info("consumer stopping", {{"applied", std::to_string(applied_.load())},
                                    {"duplicates", std::to_string(duplicates_.load())},
                                    {"retried", std::to_string(retried_.load())},
                                    {"dead_lettered", std::to_string(dead_lettered_.load())}});
    return Status::Ok();
  }

 private:
  static std::string Join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  }

  void PurgeStamps() {
    std::int64_t total = 0;
    for (int i = 0; i < 100 && !stop_; ++i) {  // bounded work per round
      auto n = inbox_.PurgeStamps(options_.stamp_retention, 1000);
      if (!n.ok()) {
        log_.Warn("stamp purge failed", {{"error", n.status().ToString()}});
        return;
      }
      total += *n;
      if (*n < 1000) break;
    }
    if (total > 0) log_.Info("purged inbox stamps", {{"rows", std::to_string(total)}});
  }

  std::vector<rd_kafka_message_t*> PollBatch() {
    std::vector<rd_kafka_message_t*> out;
    const auto deadline = std::chrono::steady_clock::now() + options_.batch_wait;
    while (static_cast<int>(out.size()) < options_.batch_size && !stop_) {
      int timeout = out.empty() ? 100
                                : static_cast<int>(std::max<long long>(
                                      0, std::chrono::duration_cast<milliseconds>(
                                             deadline - std::chrono::steady_clock::now())
                                             .count()));
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, timeout);
      if (!m) break;  // back to the loop: paused partitions may be due
      if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          log_.Warn("consumer error", {{"error", rd_kafka_message_errstr(m)}});
        }
        rd_kafka_message_destroy(m);
        continue;
      }
      out.push_back(m);
    }
    return out;
  }

  void Pause(const std::string& topic, int partition, std::int64_t offset, std::int64_t due_ms) {
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic.c_str(), partition)->offset = offset;
    // Seek first (a seek waits for the fetcher, which a pause would stop), so
    // the held message is fetched again after the resume.
    Seek(l);
    rd_kafka_pause_partitions(rk_, l);
    rd_kafka_topic_partition_list_destroy(l);
    paused_[{topic, partition}] = due_ms;
    log_.Log(LogLevel::kDebug, "retry not due yet; partition paused",
             {{"topic", topic}, {"partition", std::to_string(partition)},
              {"offset", std::to_string(offset)}, {"due_in_ms", std::to_string(due_ms - NowMs())}});
  }

  void ResumeDue() {
    const std::int64_t now = NowMs();
    for (auto it = paused_.begin(); it != paused_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(1);
      rd_kafka_topic_partition_list_add(l, it->first.first.c_str(), it->first.second);
      rd_kafka_resume_partitions(rk_, l);
      rd_kafka_topic_partition_list_destroy(l);
      log_.Log(LogLevel::kDebug, "partition resumed",
               {{"topic", it->first.first}, {"partition", std::to_string(it->first.second)}});
      it = paused_.erase(it);
    }
  }

  // Seeks partitions back so their messages from `from` on are consumed again.
  void Rewind(const std::map<std::pair<std::string, int>, std::int64_t>& from) {
    if (from.empty()) return;
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(static_cast<int>(from.size()));
    for (const auto& [tp, off] : from) {
      rd_kafka_topic_partition_list_add(l, tp.first.c_str(), tp.second)->offset = off;
    }
    Seek(l);
    rd_kafka_topic_partition_list_destroy(l);
  }

  void Seek(rd_kafka_topic_partition_list_t* l) {
    if (rd_kafka_error_t* e = rd_kafka_seek_partitions(rk_, l, 5000)) {
      log_.Warn("seek failed; messages may be redelivered later than expected",
                {{"error", rd_kafka_error_string(e)}});
      rd_kafka_error_destroy(e);
    }
  }

  Status HandleBatch(const std::vector<rd_kafka_message_t*>& raw) {
    // 1. Which messages to process now: a not-yet-due retry message pauses its
    //    partition (and later messages of that partition wait with it).
    std::vector<InboundMessage> msgs;
    std::set<std::pair<std::string, int>> held;
    std::map<std::pair<std::string, int>, std::int64_t> first_offset;
    const std::int64_t now = NowMs();
    for (auto* m : raw) {
      InboundMessage in = ToInbound(m);
      auto tp = std::make_pair(in.topic, in.partition);
      if (held.count(tp)) continue;
      first_offset.emplace(tp, in.offset);
      if (SplitRetry(in.topic).second > 0) {
        const std::string* due = in.Header(kDueAt);
        std::int64_t due_ms = due ? std::atoll(due->c_str()) : 0;
        if (due_ms > now) {
          Pause(in.topic, in.partition, in.offset, due_ms);
          held.insert(tp);
          continue;
        }
      }
      msgs.push_back(std::move(in));
    }
    if (msgs.empty()) return Status::Ok();

    // 2. Effects and stamps, one transaction.
    auto outcomes = inbox_.Process(msgs, dedup_, handler_, batch_handler_);
    if (!outcomes.ok()) {
      Rewind(first_offset);
      return outcomes.status();
    }

    // 3. Forward failures to retry / dead-letter topics and wait for the acks.
    std::vector<Forwarder::Item> forwards;
    std::uint64_t retried = 0, dead = 0, applied = 0, dups = 0;
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      const MessageOutcome& o = (*outcomes)[i];
      if (o.outcome == Outcome::kApplied) ++applied;
      if (o.outcome == Outcome::kDuplicate) ++dups;
      if (o.outcome != Outcome::kPermanent && o.outcome != Outcome::kTransient) continue;
      const InboundMessage& m = msgs[i];
      auto [base, retry_n] = SplitRetry(m.topic);
      Forwarder::Item it;
      it.key = m.key;
      it.payload = m.payload;
      it.headers = m.headers;
      if (!m.Header(kOrigTopic)) {
        it.headers[kOrigTopic] = m.topic;
        it.headers[kOrigPartition] = std::to_string(m.partition);
        it.headers[kOrigOffset] = std::to_string(m.offset);
        it.headers[kFirstFailure] = Rfc3339Now();
      }
      const int attempt = retry_n + 1;
      it.headers[kAttempt] = std::to_string(attempt);
      it.headers[kErrClass] = o.outcome == Outcome::kPermanent ? "permanent" : "transient";
      it.headers[kErrMessage] = o.error.substr(0, 1000);
      it.headers.erase(kDueAt);
      if (o.outcome == Outcome::kTransient &&
          static_cast<std::size_t>(attempt) <= options_.retry_delays.size()) {
        it.topic = base + ".retry." + std::to_string(attempt);
        it.headers[kDueAt] = std::to_string(
            NowMs() + options_.retry_delays[static_cast<std::size_t>(attempt - 1)].count());
        ++retried;
      } else {
        it.topic = base + options_.dlt_suffix;
        ++dead;
      }
      forwards.push_back(std::move(it));
    }
    if (!forwards.empty()) {
      Status st = forwarder_.Send(forwards);
      if (!st.ok()) {
        // The effects are committed (the inbox absorbs them on redelivery); the
        // failed messages must be consumed again, so no offset moves.
        Rewind(first_offset);
        return st;
      }
    }
    applied_ += applied;
    duplicates_ += dups;
    retried_ += retried;
    dead_lettered_ += dead;

    if (OUTBOX_FAULT(fault::kInboxAfterCommitBeforeOffsetCommit)) {
      Rewind(first_offset);
      return Status::Internal("fault point Inbox::AfterCommitBeforeOffsetCommit", true);
    }

    // 4. Commit offsets: everything processed is durable now.
    std::map<std::pair<std::string, int>, std::int64_t> next;
    for (const auto& m : msgs) {
      auto& v = next[{m.topic, m.partition}];
      v = std::max(v, m.offset + 1);
    }
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(static_cast<int>(next.size()));
    for (const auto& [tp, off] : next) {
      rd_kafka_topic_partition_list_add(l, tp.first.c_str(), tp.second)->offset = off;
    }
    rd_kafka_resp_err_t e = rd_kafka_commit(rk_, l, /*async=*/0);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
      // Not fatal: the messages will be redelivered and absorbed as duplicates.
      log_.Warn("offset commit failed", {{"error", rd_kafka_err2str(e)}});
    }
    log_.Log(LogLevel::kDebug, "batch done",
             {{"messages", std::to_string(msgs.size())},
              {"total_applied", std::to_string(applied_.load())},
              {"total_duplicates", std::to_string(duplicates_.load())}});
    return Status::Ok();
  }

  ConsumerOptions options_;
  Inbox& inbox_;
  DedupKeyFn dedup_;
  Handler handler_;
  BatchHandler batch_handler_;
  Logger& log_;
  rd_kafka_t* rk_ = nullptr;
  Forwarder forwarder_;
  std::map<std::pair<std::string, int>, std::int64_t> paused_;  // -> due ms
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> applied_{0}, duplicates_{0}, retried_{0}, dead_lettered_{0};
};

}  // namespace

Result<std::unique_ptr<Consumer>> Consumer::Create(ConsumerOptions options, Inbox& inbox,
                                                   DedupKeyFn dedup, Handler handler,
                                                   Logger& logger, BatchHandler batch_handler) {
  auto c = std::make_unique<KafkaConsumer>(std::move(options), inbox, std::move(dedup),
                                           std::move(handler), std::move(batch_handler), logger);
  OUTBOX_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Consumer>(std::move(c));
}

Result<ReplayResult> ReplayDeadLetters(const std::map<std::string, std::string>& properties,
                                       const std::string& dlt_topic, const ReplayFilter& filter,
                                       bool dry_run) {
  if (!properties.count("bootstrap.servers")) {
    return Status::InvalidArgument("replay: bootstrap.servers is required");
  }
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  std::map<std::string, std::string> p = {{"group.id", "outbox-dlt-replay"},
                                          {"enable.auto.commit", "false"},
                                          {"log_level", "3"}};
  for (const auto& [k, v] : properties) p[k] = v;
  Status st = SetProps(conf, p);
  if (!st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!rk) return Status::InvalidArgument(std::string("replay: ") + err);
  Forwarder fwd;
  OUTBOX_RETURN_IF_ERROR(fwd.Init(p));

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
  std::vector<Forwarder::Item> items;
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
        const std::string* orig = in.Header(kOrigTopic);
        const bool match = orig && (filter.key.empty() || filter.key == in.key) &&
                           in.timestamp >= filter.since && in.timestamp <= filter.until;
        if (match) {
          Forwarder::Item it;
          it.topic = *orig;
          it.key = in.key;
          it.payload = in.payload;
          for (const auto& [k, v] : in.headers) {
            if (k.rfind("outbox-original-", 0) == 0 || k.rfind("outbox-error-", 0) == 0 ||
                k == kAttempt || k == kFirstFailure || k == kDueAt) {
              continue;
            }
            it.headers[k] = v;
          }
          it.headers["outbox-replayed-from"] =
              dlt_topic + "/" + std::to_string(in.partition) + "/" + std::to_string(in.offset);
          items.push_back(std::move(it));
        }
        if (m->offset + 1 >= high[m->partition]) done[m->partition] = true;
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
