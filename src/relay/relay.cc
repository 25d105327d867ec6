// RelayImpl's creation, Run, readiness and liveness, and the waits its
// threads share (the broker outage gate's and the idle poller's).
#include <algorithm>
#include <thread>

#include "relay_impl.h"

namespace outbox {

using Steady = std::chrono::steady_clock;

Status ValidateRelayOptions(const RelayOptions& o) {
  auto bad = [](const std::string& key, const std::string& why) {
    return Status::InvalidArgument("relay." + key + " " + why);
  };
  if (o.relay_id.empty()) return bad("id", "must not be empty");
  if (o.workers < 1 || o.workers > 64) return bad("workers", "must be 1..64");
  if (o.batch_size < 1 || o.batch_size > 10000) return bad("batch_size", "must be 1..10000");
  if (o.batch_bytes < 1) return bad("batch_bytes", "must be >= 1");
  if (o.max_attempts < 1) return bad("max_attempts", "must be >= 1");
  if (o.backoff_base.count() < 1) return bad("backoff_base_ms", "must be >= 1");
  if (o.backoff_max < o.backoff_base) return bad("backoff_max_ms", "must be >= backoff_base_ms");
  // Written so that NaN fails too.
  if (!(o.backoff_jitter >= 0 && o.backoff_jitter <= 1)) return bad("backoff_jitter", "must be 0..1");
  if (o.poll_min.count() < 1) return bad("poll_min_ms", "must be >= 1");
  if (o.poll_max < o.poll_min) return bad("poll_max_ms", "must be >= poll_min_ms");
  if (o.poll_hot.count() < 0) return bad("poll_hot_ms", "must be >= 0");
  if (o.db_retry_max.count() < 1) return bad("db_retry_max_ms", "must be >= 1");
  if (o.purge_batch < 1) return bad("purge_batch", "must be >= 1");
  if (o.purge_interval.count() < 1) return bad("purge_interval_s", "must be >= 1");
  if (o.stats_interval.count() < 100) return bad("stats_interval_ms", "must be >= 100");
  if (o.source == RelaySource::kCdc) {
    auto cdc = [](const std::string& key, const std::string& why) {
      return Status::InvalidArgument("cdc." + key + " " + why);
    };
    if (o.cdc.slot.empty()) return cdc("slot", "must not be empty");
    if (o.cdc.batch_size < 1 || o.cdc.batch_size > 100000) return cdc("batch_size", "must be 1..100000");
    if (o.cdc.status_interval.count() < 10) return cdc("status_interval_ms", "must be >= 10");
    if (o.cdc.sweep_after.count() < 1) return cdc("sweep_after_ms", "must be >= 1");
    if (o.cdc.stream_stale_after <= o.cdc.status_interval) {
      return cdc("stream_stale_after_ms", "must be > cdc.status_interval_ms");
    }
    if (o.cdc.standby_retry.count() < 1) return cdc("standby_retry_ms", "must be >= 1");
    if (o.cdc.heartbeat_interval.count() < 1) return cdc("heartbeat_interval_ms", "must be >= 1");
    if (o.cdc.max_retained_wal_bytes < 0) return cdc("max_retained_wal_bytes", "must be >= 0");
  }
  return Status::Ok();
}

StoreParts PartsOf(StoreFactory all) {
  StoreParts parts;
  parts.queue = [all]() -> Result<std::unique_ptr<ClaimQueue>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return std::unique_ptr<ClaimQueue>(std::move(s).value());
  };
  parts.view = [all]() -> Result<std::unique_ptr<OutboxView>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return std::unique_ptr<OutboxView>(std::move(s).value());
  };
  parts.ledger = [all]() -> Result<std::unique_ptr<StreamLedger>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return AsLedger(std::move(s).value());
  };
  return parts;
}

Result<std::unique_ptr<Relay>> Relay::Create(RelayOptions options, StoreParts store,
                                             Transport& transport, RelayMetrics& metrics,
                                             Logger& logger) {
  return Create(std::move(options), std::move(store), ChangeSource(), transport, metrics, logger);
}

Result<std::unique_ptr<Relay>> Relay::Create(RelayOptions options, StoreParts store,
                                             ChangeSource source,
                                             Transport& transport, RelayMetrics& metrics,
                                             Logger& logger) {
  OUTBOX_RETURN_IF_ERROR(ValidateRelayOptions(options));
  if (!store.queue) return Status::InvalidArgument("the relay needs a store's claim queue");
  if (options.source == RelaySource::kCdc && (!source.open || !store.ledger)) {
    return Status::InvalidArgument("relay.source = cdc needs a change stream (this store has none)");
  }
  if (options.lease <= transport.MaxPublishTime()) {
    return Status::InvalidArgument(
        "relay.lease_ms (" + std::to_string(options.lease.count()) +
        ") must exceed the longest publish, " + std::to_string(transport.MaxPublishTime().count()) +
        " ms = " + transport.DescribeMaxPublishTime() +
        ", or a message could outlive its lease and be published again by another relay");
  }
  return std::unique_ptr<Relay>(new RelayImpl(std::move(options), std::move(store),
                                              std::move(source), transport, metrics, logger));
}

RelayImpl::RelayImpl(RelayOptions o, StoreParts s, ChangeSource c, Transport& t, RelayMetrics& m,
             Logger& l)
    : options_(std::move(o)),
      store_(std::move(s)),
      clock_(options_.clock != nullptr ? *options_.clock : SystemClock()),
      source_(std::move(c)),
      transport_(t),
      metrics_(m),
      logger_(l),
      beat_slots_(options_.workers + 3),
      beats_(std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(beat_slots_))),
      outage_(options_.backoff_base, options_.backoff_max),
      idle_(options_.poll_min, options_.poll_max, options_.poll_hot) {
  // Allocated here, never replaced: Alive() may run on another thread at any time.
  for (int i = 0; i < beat_slots_; ++i) beats_[static_cast<std::size_t>(i)] = kIdleBeat;
}

RelayImpl::~RelayImpl() {
  RequestStop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void RelayImpl::RequestStop() {
  stopping_ = true;
  MutexLock lock(mu_);
  cv_.notify_all();
}

bool RelayImpl::Ready() const {
  return db_ok_housekeeping_ && db_ok_workers_ > 0 && transport_.Healthy() && !broker_down_;
}

std::string RelayImpl::NotReadyReason() const {
  std::string why;
  if (!db_ok_housekeeping_ || db_ok_workers_ == 0) {
    MutexLock lock(mu_);
    const std::string& refused = db_ok_workers_ == 0 && !refused_by_workers_.empty() ? refused_by_workers_
                                                                                     : refused_by_housekeeping_;
    why = !refused.empty() ? refused
          : db_failed_once_ ? "database unreachable"
                            : "starting (waiting for the database's first answer)";
  }
  if (!transport_.Healthy()) {
    why += (why.empty() ? "" : "; ") + transport_.UnhealthyReason();
  } else if (broker_down_) {
    MutexLock lock(mu_);
    why += (why.empty() ? "" : "; ") + transport_.PeerName() +
           " unreachable: no acknowledgement for a whole batch (" + outage_.DownError() + ")";
  }
  return "not ready: " + (why.empty() ? std::string("starting") : why) + "\n";
}

bool RelayImpl::NoteDbError(const Status& st, std::string* refusal) {
  db_failed_once_ = true;  // before the count: a reader of the count sees the flag
  metrics_.db_errors.Inc();
  // The outbox's own schema or functions missing (42P01, 42883, 3F000): a
  // configuration error too, named on /readyz, but not a refused role.
  if (st.code() == Code::kFailedPrecondition && st.message().find("outboxctl migrate") != std::string::npos) {
    if (refusal) {
      MutexLock lock(mu_);
      *refusal = "the outbox schema is missing or not migrated (run outbox-relay --migrate or "
                 "outboxctl migrate; retrying): " + st.message().substr(0, st.message().find('\n'));
    }
    return false;
  }
  if (st.code() != Code::kPermissionDenied) return false;
  metrics_.db_permission_denied.Inc();
  if (refusal) {
    MutexLock lock(mu_);
    *refusal = "the database refused the relay's role (a configuration error, not an outage; retrying): " +
               st.message();
  }
  return true;
}

void RelayImpl::ClearRefusal(std::string* refusal) {
  MutexLock lock(mu_);
  refusal->clear();
}

void RelayImpl::Beat(int slot) {
  beats_[static_cast<std::size_t>(slot)].store(clock_.Now().time_since_epoch().count(),
                                               std::memory_order_relaxed);
}

bool RelayImpl::Alive(milliseconds max_silence) const {
  const auto now = clock_.Now().time_since_epoch().count();
  const auto limit = std::chrono::duration_cast<Steady::duration>(max_silence).count();
  for (int i = 0; i < beat_slots_; ++i) {
    const std::int64_t b = beats_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    if (b != kIdleBeat && now - b > limit) return false;
  }
  return true;
}

// The condition variable's waits are loops here (not predicate lambdas) so
// that the lock annotations see every guarded read under mu_.
void RelayImpl::WaitForWake(MutexLock& lock, std::uint64_t seen, Steady::time_point until) {
  while (!stopping_ && wake_seq_ == seen) {
    if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) return;
  }
}

bool RelayImpl::SleepFor(milliseconds d) {
  MutexLock lock(mu_);
  WaitForWake(lock, wake_seq_, clock_.Now() + d);
  return !stopping_;
}

void RelayImpl::IdleWait(int index, milliseconds claim_cost, bool ran_out,
                         relay_internal::IdlePoller* own) {
  MutexLock lock(mu_);
  const std::uint64_t seen = wake_seq_;
  if (own != nullptr) {  // it polls its own share: nobody else can poll for it
    const auto now = clock_.Now();
    if (ran_out) {
      own->RanOut(0, now);
      own_found_at_ = now;
    }
    own->Heat(own_found_at_, std::min(options_.poll_min * options_.workers, options_.poll_max));
    WaitForWake(lock, seen, now + own->Next(0, now, claim_cost).sleep);
    return;
  }
  if (ran_out) idle_.RanOut(index, clock_.Now());
  for (;;) {
    const auto now = clock_.Now();
    const relay_internal::IdlePoller::Wait wait = idle_.Next(index, now, claim_cost);
    if (wait.polls) {
      WaitForWake(lock, seen, now + wait.sleep);
      return;
    }
    // Another worker polls; wait for a notification, for the poller's role to
    // be free (an idle worker found work, or the poller left: the first waiter
    // to see it polls next, after the interval, not at once), or the safety net.
    const std::uint64_t handovers = handover_seq_;
    const auto until = now + wait.sleep;
    while (!stopping_ && wake_seq_ == seen && handover_seq_ == handovers) {
      if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) return;
    }
    if (stopping_ || wake_seq_ != seen) return;
    claim_cost = milliseconds(0);
  }
}

void RelayImpl::OwnFound(relay_internal::IdlePoller& own) {
  MutexLock lock(mu_);
  own_found_at_ = clock_.Now();
  own.Found(own_found_at_);
}

void RelayImpl::EndIdle(bool full) {
  MutexLock lock(mu_);
  // The poller's role is free, whoever found the work: when a waiting worker
  // found it (its safety net, a notification), the poller may be in a sleep
  // of up to poll_max, and the next poll is due at poll_min.
  idle_.Found(clock_.Now());
  // A full batch may have left more: every idle worker claims now. Else the
  // claim took all there was: one of them takes over the polling.
  if (full) {
    ++wake_seq_;
  } else {
    ++handover_seq_;
  }
  cv_.notify_all();
}

void RelayImpl::LeavePolling(int index) {
  MutexLock lock(mu_);
  if (!idle_.Leave(index)) return;
  ++handover_seq_;
  cv_.notify_all();
}

bool RelayImpl::FullBatch(const std::vector<ClaimedEvent>& events) const {
  if (static_cast<int>(events.size()) >= options_.batch_size) return true;
  // The claim stops before a row that would go over batch_bytes; which row
  // that was is not known here, so past half the bound counts as full (a wrong
  // guess costs the idle workers one claim each, or the next event a poll).
  std::int64_t bytes = 0;
  for (const auto& e : events) bytes += static_cast<std::int64_t>(e.event.payload.size());
  return bytes * 2 >= options_.batch_bytes;
}

milliseconds RelayImpl::NextOutageDelay() const {
  MutexLock lock(mu_);
  return outage_.NextDelay();
}

bool RelayImpl::BrokerTurn(bool* probing) {
  MutexLock lock(mu_);
  Steady::time_point until;
  switch (outage_.TakeTurn(clock_.Now(), options_.poll_max, &until)) {
    case relay_internal::OutageGate::Turn::kClaim:
      return true;
    case relay_internal::OutageGate::Turn::kProbe:
      *probing = true;
      return true;
    case relay_internal::OutageGate::Turn::kWait:
      break;
  }
  while (!stopping_ && outage_.InOutage()) {
    if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) break;
  }
  return false;
}

void RelayImpl::EndBrokerProbe() {
  MutexLock lock(mu_);
  outage_.EndProbe();
  cv_.notify_all();
}

void RelayImpl::EndBrokerRound(bool outage, milliseconds at_least, bool broker_answered,
                               bool probing, std::string_view error) {
  MutexLock lock(mu_);
  outage_.EndRound(clock_.Now(), outage, at_least, broker_answered, probing, error);
  broker_down_ = outage_.Down();
  cv_.notify_all();
}

Status RelayImpl::Run() {
  const bool cdc = options_.source == RelaySource::kCdc;
  logger_.Info("relay starting", {{"relay_id", options_.relay_id},
                                  {"source", cdc ? "cdc" : "poll"},
                                  {"workers", std::to_string(options_.workers)},
                                  {"batch_size", std::to_string(options_.batch_size)},
                                  {"ordered", options_.ordered ? "true" : "false"}});
  auto spawn = [&](int slot, auto fn) {
    {
      MutexLock lock(mu_);
      ++running_;
    }
    Beat(slot);
    threads_.emplace_back([this, slot, fn] {
      fn();
      beats_[static_cast<std::size_t>(slot)] = kIdleBeat;
      MutexLock lock(mu_);
      --running_;
      cv_.notify_all();
    });
  };
  for (int i = 0; i < options_.workers; ++i) spawn(i, [this, i] { WorkerLoop(i); });
  spawn(HousekeepingSlot(), [this] { HousekeepingLoop(); });
  // In cdc mode new rows come from the stream; notifications would only wake
  // the sweepers for rows they must leave to it.
  if (options_.listen && !cdc) spawn(ListenSlot(), [this] { ListenLoop(); });
  if (cdc) spawn(StreamSlot(), [this] { StreamLoop(); });

  {
    MutexLock lock(mu_);
    while (!stopping_) cv_.wait(lock.native());
    logger_.Info("relay stopping: no new claims; finishing in-flight batches",
                 {{"timeout_ms", std::to_string(options_.shutdown_timeout.count())}});
    const auto deadline = clock_.Now() + options_.shutdown_timeout;
    while (running_ != 0 &&
           clock_.WaitUntil(cv_, lock.native(), deadline) != std::cv_status::timeout) {
    }
    if (running_ != 0) {
      // The threads keep running (they only touch members; ~Relay joins them).
      // The daemon exits the process now: the rows still in flight are safe,
      // their leases expire and another relay takes them.
      return Status::DeadlineExceeded("in-flight batches did not finish within shutdown_timeout");
    }
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  metrics_.ready.Set(0);
  logger_.Info("relay stopped cleanly");
  return Status::Ok();
}

void RelayImpl::StreamLoop() {
  relay_internal::RunStream({options_, clock_, logger_, metrics_, transport_, source_, store_}, *this);
}

}  // namespace outbox
