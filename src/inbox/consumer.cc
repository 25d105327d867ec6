// The inbox engine: the consumer loop over InboxSource and InboxStore. Its
// decisions are in plan.cc; this file runs them, keeps the counters and metrics.
#include "outbox/consumer.h"
#include "outbox/thread_annotations.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "core/fault.h"
#include "outbox/cloudevents.h"
#include "outbox/time.h"
#include "plan.h"

namespace outbox {
namespace {

using std::chrono::milliseconds;
using SysClock = std::chrono::system_clock;
using namespace inbox_internal;

std::int64_t NowMs(const Clock& clock) {
  return std::chrono::duration_cast<milliseconds>(clock.WallNow().time_since_epoch()).count();
}

std::string Rfc3339Now(const Clock& clock) { return FormatRfc3339(clock.WallNow(), 3); }

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}


class Metrics {
 public:
  Metrics(MetricsRegistry* r, const ConsumerOptions& o) : registry_(r), labels_(o.metrics_labels) {
    if (!r) return;
    // The engine's own labels after the options' (consumer="..."), if any.
    auto with = [&](const std::string& own) {
      return labels_.empty() ? own : own.empty() ? labels_ : labels_ + "," + own;
    };
    applied_ = &r->AddCounter("outbox_inbox_applied_total", "Messages whose effect was applied",
                              with(""));
    duplicates_ = &r->AddCounter("outbox_inbox_duplicates_total",
                                 "Messages delivered again and absorbed by the inbox", with(""));
    for (const std::string& t : o.topics) {
      for (std::size_t i = 1; i <= o.retry_delays.size(); ++i) {
        const std::string rt = t + ".retry." + std::to_string(i);
        retried_[rt] = &r->AddCounter("outbox_inbox_retried_total",
                                      "Messages forwarded to a retry topic",
                                      with("topic=\"" + PrometheusLabelValue(rt) + "\""));
      }
    }
    dead_permanent_ = &r->AddCounter("outbox_inbox_dead_lettered_total",
                                     "Messages forwarded to the dead-letter topic",
                                     with("class=\"permanent\""));
    dead_transient_ = &r->AddCounter("outbox_inbox_dead_lettered_total",
                                     "Messages forwarded to the dead-letter topic",
                                     with("class=\"transient\""));
    truncated_ = &r->AddCounter("outbox_inbox_dead_letters_truncated_total",
                                "Messages too large to forward whole, dead-lettered as a bounded "
                                "record (value cut or left out; see outbox-truncated)",
                                with(""));
    batch_seconds_ = &r->AddHistogram(
        "outbox_inbox_batch_seconds", "Time to apply, forward and commit one batch",
        {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, with(""));
    parked_ = &r->AddCounter("outbox_inbox_parked_total",
                             "Messages parked in the inbox database (ordered mode)", with(""));
    other_groups_ = &r->AddCounter("outbox_inbox_other_groups_skipped_total",
                                   "Retry, dead-letter or replayed copies another consumer group "
                                   "failed (outbox-group), skipped",
                                   with(""));
    batches_failed_ = &r->AddCounter("outbox_inbox_batches_failed_total",
                                     "Batches that could not complete and are consumed again", with(""));
    // The registry may render after the consumer is gone: the read functions
    // share ownership of what they read.
    r->AddGaugeFunction("outbox_inbox_consumer_lag_messages",
                        "Messages behind the high watermark, per owned partition",
                        [live = live_] {
                          MutexLock l(live->mu);
                          return live->lag;
                        });
    r->AddGaugeFunction(
        "outbox_inbox_seconds_since_last_apply",
        "Seconds since the last applied effect (since start when none yet)",
        [live = live_, labels = labels_] {
          const auto last = live->last_apply_ms.load(std::memory_order_relaxed);
          // The system clock, not the consumer's: this gauge may be rendered
          // after the consumer (and an injected clock) are gone.
          return MetricsRegistry::GaugeSamples{
              {labels, static_cast<double>(NowMs(SystemClock()) - last) / 1000.0}};
        });
  }

  void Applied(std::uint64_t n) {
    if (n > 0) live_->last_apply_ms.store(NowMs(SystemClock()), std::memory_order_relaxed);
    if (applied_) applied_->Inc(n);
  }
  void Duplicates(std::uint64_t n) {
    if (duplicates_) duplicates_->Inc(n);
  }
  void Retried(const std::string& topic) {
    auto it = retried_.find(topic);
    if (it != retried_.end()) it->second->Inc();
  }
  void DeadLettered(Outcome cls) {
    Counter* c = cls == Outcome::kPermanent ? dead_permanent_ : dead_transient_;
    if (c) c->Inc();
  }
  void Truncated() {
    if (truncated_) truncated_->Inc();
  }
  void Parked(std::uint64_t n) {
    if (parked_) parked_->Inc(n);
  }
  void OtherGroups(std::uint64_t n) {
    if (other_groups_ && n > 0) other_groups_->Inc(n);
  }
  void Batch(double seconds, bool ok) {
    if (batch_seconds_ && ok) batch_seconds_->Observe(seconds);
    if (batches_failed_ && !ok) batches_failed_->Inc();
  }
  void Lag(const std::vector<PartitionLag>& lag) {
    if (!registry_) return;
    MetricsRegistry::GaugeSamples s;
    for (const auto& p : lag) {
      if (p.lag < 0) continue;
      s.emplace_back((labels_.empty() ? "" : labels_ + ",") + "topic=\"" + PrometheusLabelValue(p.tp.topic) + "\",partition=\"" +
                         std::to_string(p.tp.partition) + "\"",
                     static_cast<double>(p.lag));
    }
    MutexLock l(live_->mu);
    live_->lag = std::move(s);
  }

 private:
  MetricsRegistry* registry_;
  std::string labels_;
  Counter* applied_ = nullptr;
  Counter* duplicates_ = nullptr;
  std::map<std::string, Counter*> retried_;
  Counter* dead_permanent_ = nullptr;
  Counter* truncated_ = nullptr;
  Counter* dead_transient_ = nullptr;
  Histogram* batch_seconds_ = nullptr;
  Counter* batches_failed_ = nullptr;
  Counter* parked_ = nullptr;
  Counter* other_groups_ = nullptr;
  struct Live {
    Mutex mu;
    MetricsRegistry::GaugeSamples lag OUTBOX_GUARDED_BY(mu);
    std::atomic<std::int64_t> last_apply_ms{NowMs(SystemClock())};
  };
  std::shared_ptr<Live> live_ = std::make_shared<Live>();
};

class Engine final : public Consumer {
 public:
  Engine(ConsumerOptions o, InboxSource& source, InboxStore& store, DedupKeyFn d, Logger& l,
         MetricsRegistry* m)
      : options_(std::move(o)),
        source_(source),
        store_(store),
        dedup_(std::move(d)),
        log_(l),
        clock_(options_.clock != nullptr ? *options_.clock : SystemClock()),
        metrics_(m, options_) {}

  void Stop() override { stop_ = true; }

  ConsumerCounters counters() const override {
    return {applied_.load(), duplicates_.load(), retried_.load(), dead_lettered_.load()};
  }

  std::string NotReadyReason() const override {
    std::string why, broker;
    {
      MutexLock l(health_mu_);
      why = db_down_;
      broker = broker_down_;
    }
    if (broker.empty()) broker = source_.NotReadyReason();
    if (!broker.empty()) why += (why.empty() ? "" : "; ") + broker;
    return why;
  }

  Status Run() override {
    log_.Info("consumer started", {{"topics", Join(options_.topics)}});
    milliseconds backoff{100};
    auto next_purge = clock_.Now() + options_.purge_interval;
    auto next_lag = clock_.Now();
    while (!stop_) {
      if (options_.stamp_retention.count() > 0 && clock_.Now() >= next_purge) {
        next_purge = clock_.Now() + options_.purge_interval;
        PurgeStamps();
      }
      if (clock_.Now() >= next_lag) {
        next_lag = clock_.Now() + std::chrono::seconds(1);
        metrics_.Lag(source_.Lag());
      }
      ResumeDue();
      if (options_.ordered) DrainParked();
      std::vector<InboundMessage> batch = source_.Poll(options_.batch_size, options_.batch_wait);
      if (batch.empty()) continue;
      const auto start = clock_.Now();
      Status st = HandleBatch(batch);
      metrics_.Batch(std::chrono::duration<double>(clock_.Now() - start).count(), st.ok());
      if (!st.ok()) {
        log_.Warn("batch not completed; it will be consumed again", {{"error", st.ToString()}});
        clock_.SleepFor(backoff);
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
  void PurgeStamps() {
    std::int64_t total = 0;
    for (int i = 0; i < 100 && !stop_; ++i) {  // bounded work per round
      auto n = store_.PurgeStamps(options_.stamp_retention, 1000);
      if (!n.ok()) {
        log_.Warn("stamp purge failed", {{"error", n.status().ToString()}});
        return;
      }
      total += *n;
      if (*n < 1000) break;
    }
    if (total > 0) log_.Info("purged inbox stamps", {{"rows", std::to_string(total)}});
  }

  void ResumeDue() {
    const std::int64_t now = NowMs(clock_);
    for (auto it = paused_.begin(); it != paused_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      source_.Resume(it->first);
      it = paused_.erase(it);
    }
  }

  // The steps of a batch, each a plan the engine carries out: intake (what
  // now, what waits), effects and stamps, forwards, offsets.
  Status HandleBatch(const std::vector<InboundMessage>& msgs) {
    Intake in = PlanIntake(msgs, NowMs(clock_), dedup_, options_.group);
    const std::map<TopicPartition, std::int64_t> rewind = PauseNotDue(in);
    if (std::none_of(in.taken.begin(), in.taken.end(), [](bool t) { return t; })) return Status::Ok();
    if (Status st = ApplyEffects(msgs, in); !st.ok()) {
      NoteDatabase(st);
      source_.Rewind(rewind);
      return st;
    }
    NoteDatabase(Status::Ok());
    // Failures to retry / dead-letter topics; wait for the acks.
    Forwards fw = PlanForwards(msgs, in.outcomes, options_, NowMs(clock_), Rfc3339Now(clock_));
    if (!fw.messages.empty()) {
      Status st = source_.Forward(fw.messages);
      NoteBroker(st);
      if (!st.ok()) {
        // The effects are committed (the inbox absorbs them on redelivery); the
        // failed messages must be consumed again, so no offset moves.
        source_.Rewind(rewind);
        return st;
      }
    }
    CountOutcomes(in, fw);
    metrics_.OtherGroups(in.other_groups);
    if (OUTBOX_FAULT(fault::kInboxAfterCommitBeforeOffsetCommit)) {
      source_.Rewind(rewind);
      return Status::Internal("fault point Inbox::AfterCommitBeforeOffsetCommit", true);
    }
    // Offsets: everything taken is durable now.
    Status cs = source_.Commit(PlanCommit(msgs, in.taken));
    if (cs.ok()) NoteBroker(cs);  // the broker answers: an earlier forward's failure is past
    if (!cs.ok()) {
      // Not fatal: the messages will be redelivered and absorbed as duplicates.
      log_.Warn("offset commit failed", {{"error", cs.ToString()}});
    }
    log_.Log(LogLevel::kDebug, "batch done",
             {{"messages", std::to_string(msgs.size())},
              {"total_applied", std::to_string(applied_.load())},
              {"total_duplicates", std::to_string(duplicates_.load())}});
    return Status::Ok();
  }

  // Pauses the partitions whose next retry is not due yet; returns where to
  // consume again if the batch fails (a partition held at its first message is
  // already where the pause put it).
  std::map<TopicPartition, std::int64_t> PauseNotDue(const Intake& in) {
    for (const auto& [tp, at] : in.pauses) {
      source_.Pause(tp, at.first);
      paused_[tp] = at.second;
      log_.Log(LogLevel::kDebug, "retry not due yet; partition paused",
               {{"topic", tp.topic}, {"partition", std::to_string(tp.partition)},
                {"offset", std::to_string(at.first)},
                {"due_in_ms", std::to_string(at.second - NowMs(clock_))}});
    }
    std::map<TopicPartition, std::int64_t> rewind = in.first_offsets;
    for (const auto& [tp, at] : in.pauses) {
      if (rewind[tp] == at.first) rewind.erase(tp);
    }
    return rewind;
  }

  // Effects and stamps, into `in.outcomes`. Ordered mode: a message whose key
  // has parked messages is parked behind them instead, and the failed ones
  // park with their followers. An error: nothing of it counts (rewind).
  Status ApplyEffects(const std::vector<InboundMessage>& msgs, Intake& in) {
    std::vector<bool> pre_parked(msgs.size(), false);
    std::vector<std::string> dedup_keys(msgs.size());
    for (std::size_t j = 0; j < in.apply.size(); ++j) dedup_keys[in.apply[j]] = in.keys[j];
    std::vector<std::size_t> apply = in.apply;
    if (options_.ordered && !apply.empty()) {
      std::vector<std::string> order_keys;
      for (std::size_t i : apply) order_keys.push_back(OrderKey(msgs[i]));
      auto parked = store_.ParkedKeys(order_keys);
      if (!parked.ok()) return parked.status();
      std::erase_if(apply, [&](std::size_t i) {
        if (!parked->count(OrderKey(msgs[i]))) return false;
        pre_parked[i] = true;
        in.outcomes[i] = MessageOutcome{Outcome::kHeld, ""};
        return true;
      });
    }
    if (!apply.empty()) {
      std::vector<InboundMessage> to_store;
      std::vector<std::string> keys, order_keys;
      for (std::size_t i : apply) {
        to_store.push_back(msgs[i]);
        keys.push_back(dedup_keys[i]);
        if (options_.ordered) order_keys.push_back(OrderKey(msgs[i]));
      }
      auto outcomes = ApplyOrSplit(to_store, keys, order_keys, last_failure_);
      if (!outcomes.ok()) return outcomes.status();
      for (std::size_t j = 0; j < apply.size(); ++j) {
        in.outcomes[apply[j]] = std::move((*outcomes)[j]);
      }
    }
    if (options_.ordered) {
      std::vector<ParkedMessage> park = PlanParking(msgs, in, dedup_keys, pre_parked, options_);
      OUTBOX_RETURN_IF_ERROR(store_.Park(park));
      metrics_.Parked(park.size());
    }
    return Status::Ok();
  }

  // The store's Apply, and the rule that no message holds a partition
  // (ApplyBySplitting): a failure the same as the last one (`last_failure`,
  // cleared by a success) splits the messages until the failing ones stand
  // alone.
  Result<std::vector<MessageOutcome>> ApplyOrSplit(std::span<const InboundMessage> msgs,
                                                   std::span<const std::string> keys,
                                                   std::span<const std::string> order_keys,
                                                   std::string& last_failure) {
    auto outcomes = store_.Apply(msgs, keys, order_keys);
    if (outcomes.ok()) {
      last_failure.clear();
      return outcomes;
    }
    const Status failed = outcomes.status();
    const bool again = SplitsOn(failed) && failed.ToString() == last_failure;
    last_failure = failed.ToString();
    if (!again) return failed;
    log_.Warn("a batch failed twice the same way: applying it in parts until the failing message "
              "stands alone",
              {{"messages", std::to_string(msgs.size())}, {"error", failed.ToString()}});
    outcomes = ApplyBySplitting(msgs.size(), order_keys, failed, [&](std::span<const std::size_t> idx) {
      std::vector<InboundMessage> part;
      std::vector<std::string> part_keys, part_order;
      for (std::size_t i : idx) {
        part.push_back(msgs[i]);
        part_keys.push_back(keys[i]);
        if (!order_keys.empty()) part_order.push_back(order_keys[i]);
      }
      return store_.Apply(part, part_keys, part_order);
    });
    if (outcomes.ok()) last_failure.clear();
    return outcomes;
  }

  // What NotReadyReason() says: a store error that means the database cannot
  // be used (not one message's failure) until a store call succeeds.
  void NoteDatabase(const Status& st) {
    const bool outage = st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded ||
                        st.code() == Code::kPermissionDenied || st.code() == Code::kFailedPrecondition;
    if (!st.ok() && !outage) return;
    MutexLock l(health_mu_);
    db_down_ = st.ok() ? "" : "inbox database unavailable: " + FirstLine(st.ToString(), 500);
  }
  void NoteBroker(const Status& st) {
    MutexLock l(health_mu_);
    broker_down_ = st.ok() ? "" : "broker unreachable: " + FirstLine(st.ToString(), 500);
  }

  // The batch's counts and metrics: applied, duplicates, retried, dead-lettered, cut.
  void CountOutcomes(const Intake& in, const Forwards& fw) {
    std::uint64_t applied = 0, dups = 0;
    for (const auto& o : in.outcomes) {
      if (o && o->outcome == Outcome::kApplied) ++applied;
      if (o && o->outcome == Outcome::kDuplicate) ++dups;
    }
    for (const OutboundMessage& m : fw.messages) NoteCut(m);
    for (std::size_t i = 0; i < fw.messages.size(); ++i) {
      if (fw.kinds[i] == ForwardKind::kRetry) {
        ++retried_;
        metrics_.Retried(fw.messages[i].topic);
      } else {
        ++dead_lettered_;
        metrics_.DeadLettered(fw.classes[i]);
      }
    }
    applied_ += applied;
    duplicates_ += dups;
    metrics_.Applied(applied);
    metrics_.Duplicates(dups);
  }

  // A forwarded copy that had to be cut (BoundForward): one line and a count.
  void NoteCut(const OutboundMessage& m) {
    const std::string* cut = m.Header(kTruncated);
    if (!cut) return;
    metrics_.Truncated();
    const auto header = [&](const char* name) {
      const std::string* v = m.Header(name);
      return v ? *v : std::string();
    };
    log_.Warn("message too large to forward whole: dead-lettered as a bounded record",
              {{"topic", header(kOrigTopic)}, {"partition", header(kOrigPartition)},
               {"offset", header(kOrigOffset)}, {"value_bytes", header(kOrigSize)},
               {"dead_letter_topic", m.topic}, {"cut", *cut}});
  }

  // Ordered mode: applies the parked messages whose key's head is due, in
  // queue order; a failure reschedules or dead-letters. Bounded work per call.
  void DrainParked() {
    for (int round = 0; round < 20 && !stop_; ++round) {
      auto due = store_.Due(options_.batch_size);
      if (!due.ok()) {
        log_.Warn("parked messages not read", {{"error", due.status().ToString()}});
        return;
      }
      if (due->empty()) return;
      std::vector<InboundMessage> msgs;
      std::vector<std::string> keys, order_keys;
      for (const ParkedMessage& p : *due) {
        msgs.push_back(p.message);
        keys.push_back(p.dedup_key);
        order_keys.push_back(p.order_key);
      }
      auto outcomes = ApplyOrSplit(msgs, keys, order_keys, last_parked_failure_);
      if (!outcomes.ok()) {
        log_.Warn("parked messages not applied", {{"error", outcomes.status().ToString()}});
        return;
      }
      ParkedPlan plan = PlanParked(*due, *outcomes, options_, Rfc3339Now(clock_));
      Status st = store_.Unpark(plan.unpark);
      for (const auto& r : plan.retries) {
        if (st.ok()) st = store_.Reschedule(r.id, r.attempts, r.error, r.delay);
      }
      if (st.ok() && !plan.dead_letters.empty()) {
        st = source_.Forward(plan.dead_letters);
        if (st.ok()) st = store_.Unpark(plan.dead_ids);
      }
      if (!st.ok()) {
        // Applied ones left parked are absorbed as duplicates next time.
        log_.Warn("parked messages not settled", {{"error", st.ToString()}});
        return;
      }
      applied_ += plan.applied;
      duplicates_ += plan.duplicates;
      metrics_.Applied(plan.applied);
      metrics_.Duplicates(plan.duplicates);
      for (const OutboundMessage& m : plan.dead_letters) NoteCut(m);
      dead_lettered_ += plan.dead_letters.size();
      for (Outcome c : plan.dead_classes) metrics_.DeadLettered(c);
      retried_ += plan.retries.size();
      // Another round only when a key's queue moved (its next head is due now).
      if (plan.unpark.empty() && plan.dead_ids.empty()) return;
    }
  }

  ConsumerOptions options_;
  InboxSource& source_;
  InboxStore& store_;
  DedupKeyFn dedup_;
  Logger& log_;
  Clock& clock_;  // options_.clock or SystemClock()
  Metrics metrics_;
  std::map<TopicPartition, std::int64_t> paused_;  // -> due ms
  std::string last_failure_, last_parked_failure_;  // ApplyOrSplit's memory of each path
  mutable Mutex health_mu_;
  std::string db_down_ OUTBOX_GUARDED_BY(health_mu_);
  std::string broker_down_ OUTBOX_GUARDED_BY(health_mu_);
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> applied_{0}, duplicates_{0}, retried_{0}, dead_lettered_{0};
};

}  // namespace

std::vector<std::string> SubscribedTopics(const ConsumerOptions& options) {
  std::vector<std::string> out;
  for (const auto& t : options.topics) {
    out.push_back(t);
    for (std::size_t i = 1; i <= options.retry_delays.size(); ++i) {
      out.push_back(t + ".retry." + std::to_string(i));
    }
  }
  return out;
}

Result<std::unique_ptr<Consumer>> Consumer::Create(ConsumerOptions options, InboxSource& source,
                                                   InboxStore& store, DedupKeyFn dedup,
                                                   Logger& logger, MetricsRegistry* metrics) {
  if (options.topics.empty()) return Status::InvalidArgument("consumer: topics is empty");
  if (options.batch_size < 1) {
    return Status::InvalidArgument("consumer: batch_size must be >= 1");
  }
  if (!dedup) return Status::InvalidArgument("consumer: no dedup key function");
  if (options.forward_max_bytes < kMinForwardMaxBytes || options.forward_max_bytes > kMaxForwardMaxBytes) {
    return Status::InvalidArgument("consumer: forward_max_bytes must be " + std::to_string(kMinForwardMaxBytes) +
                                   ".." + std::to_string(kMaxForwardMaxBytes) + ", got " +
                                   std::to_string(options.forward_max_bytes));
  }
  OUTBOX_RETURN_IF_ERROR(source.Subscribe(SubscribedTopics(options)));
  return std::unique_ptr<Consumer>(std::make_unique<Engine>(std::move(options), source, store,
                                                            std::move(dedup), logger, metrics));
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kApplied: return "applied";
    case Outcome::kDuplicate: return "duplicate";
    case Outcome::kPermanent: return "permanent";
    case Outcome::kTransient: return "transient";
    case Outcome::kHeld: return "held";
  }
  return "unknown";
}

ErrorClass SqlHandlerErrorClass(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return ErrorClass::kTransient;
  const std::string_view cls = sqlstate.substr(0, 2);
  const bool transient = cls == "08" || cls == "40" || cls == "53" || cls == "57" || cls == "58" ||
                         cls == "XX" || sqlstate == "55P03" || sqlstate == "70100";
  return transient ? ErrorClass::kTransient : ErrorClass::kPermanent;
}

DedupKeyFn DedupByEventId() {
  return [](const InboundMessage& m) -> Result<std::string> {
    if (const std::string* id = m.Header("outbox-event-id"); id && !id->empty()) return *id;
    // A CloudEvents id is unique within its source only: the key is both.
    for (const char* prefix : {kCloudEventsKafkaPrefix, kCloudEventsAmqpPrefix, kCloudEventsHttpPrefix}) {
      const std::string* id = m.Header(std::string(prefix) + "id");
      if (!id || id->empty()) continue;
      const std::string* source = m.Header(std::string(prefix) + "source");
      return "ce:" + (source ? *source : std::string()) + " " + *id;
    }
    return Status::InvalidArgument("message has no outbox-event-id header (nor a CloudEvents id)");
  };
}

}  // namespace outbox
