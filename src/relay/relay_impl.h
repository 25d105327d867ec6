// RelayImpl: the engine behind outbox::Relay (include/outbox/relay.h). Its
// parts live in one file each:
//   relay.cc         creation, Run, readiness and liveness, the shared waits
//   worker.cc        a worker's round: broker turn, claim, publish, settle
//   housekeeping.cc  the gauges, the purge, the WAL cap's watch, the listener
//   stream.cc        the change stream's pump (relay.source = cdc; stream.h)
//   metrics.cc       RelayMetrics and a batch's metrics and logs
// Its decisions are pure functions and classes beside them: plan.h (a
// batch's transitions), outage_gate.h (the shared broker backoff),
// idle_poller.h (who polls while idle), stream_book.h (the stream's book).
//
// Thread-safety: as Relay. The fields marked OUTBOX_GUARDED_BY(mu_) are read
// and written under mu_; the atomics from any thread; the rest is set by the
// constructor and then only read.
#ifndef OUTBOX_SRC_RELAY_RELAY_IMPL_H_
#define OUTBOX_SRC_RELAY_RELAY_IMPL_H_

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idle_poller.h"
#include "outage_gate.h"
#include "stream.h"
#include "outbox/relay.h"
#include "outbox/thread_annotations.h"

namespace outbox {

class RelayImpl final : public Relay, private relay_internal::StreamHost {
 public:
  RelayImpl(RelayOptions o, StoreParts s, ChangeSource c, Transport& t, RelayMetrics& m, Logger& l);
  ~RelayImpl() override;  // stops and joins every thread Run() started

  Status Run() override;
  void RequestStop() override;
  bool Ready() const override;
  std::string NotReadyReason() const override;
  bool Alive(milliseconds max_silence) const override;

 private:
  struct Worker;  // one worker's loop state (worker.cc)
  void WorkerLoop(int index);
  ClaimOptions WorkerClaimOptions();
  void WorkerDbFailed(Worker& w, const Status& st);
  void WorkerDbSucceeded(Worker& w);
  // Publishes a claimed batch and records its outcomes: marks, metrics, logs.
  void PublishAndSettle(Worker& w, ClaimQueue& store, std::vector<ClaimedEvent>& events,
                        bool probing, std::chrono::steady_clock::time_point claimed_at);
  // A database call failed with `st`: counted (db_errors, and
  // db_permission_denied for a PermissionDenied). Returns true for a
  // PermissionDenied; `*refusal`, when given, then keeps its message for
  // NotReadyReason().
  bool NoteDbError(const Status& st, std::string* refusal = nullptr);
  void ClearRefusal(std::string* refusal);
  // The stream's thread (relay.source = cdc): the pump (stream.h) sees the
  // relay only through StreamContext and this relay's StreamHost calls.
  void StreamLoop();
  bool Stopping() const override { return stopping_; }
  void BeatStream() override { Beat(StreamSlot()); }
  bool WalCapped() const override { return wal_capped_; }
  void StreamAnnounced() override { stream_reported_ = true; }
  // cdc: the slot's gauges, and the WAL cap (sets / clears wal_capped_).
  void WatchSlot(StreamLedger& ledger, const StoreStats* stats);
  // A fenced transition, retried on database errors until `deadline`; false if
  // it could not be recorded (the rows are left to lease expiry / the sweeper).
  bool ApplyTransition(const std::string& who, const char* what,
                       const std::function<Result<TransitionResult>()>& call, std::size_t n,
                       std::string_view fault_point, std::chrono::steady_clock::time_point deadline) override;
  void HousekeepingLoop();
  // The row-count gauges, when `next_stats` has come (then moved on, paced by
  // the query's cost: relay_internal::NextStatsAt); the stats read, or nullopt
  // when not due or failed. Housekeeping's thread only.
  std::optional<StoreStats> RefreshGauges(OutboxView& view,
                                          std::chrono::steady_clock::time_point& next_stats);
  // Housekeeping's purge round, when due: SENT rows past retention, for at
  // most a second (then again next round, not a purge_interval later).
  void PurgeRound(OutboxView& view, std::chrono::steady_clock::time_point& next_purge);
  void ListenLoop();
  // The threads' heartbeats for Alive(): one slot per thread (workers first,
  // then housekeeping, listener, stream), steady-clock nanoseconds of the last
  // loop round, kIdleBeat when not running.
  void Beat(int slot);
  int HousekeepingSlot() const { return options_.workers; }
  int ListenSlot() const { return options_.workers + 1; }
  int StreamSlot() const { return options_.workers + 2; }
  // Sleeps up to `d` or until stop is requested; returns false if stopping.
  bool SleepFor(milliseconds d) override;
  // Waits on cv_ until stopping, a wake after `seen`, or `until`.
  void WaitForWake(MutexLock& lock, std::uint64_t seen, std::chrono::steady_clock::time_point until)
      OUTBOX_REQUIRES(mu_);
  // The broker outage gate (outage_gate.h), shared by all workers and the
  // stream. BrokerTurn: true if this worker may claim now (*probing: it is
  // the one that tests the broker after a backoff); false after waiting a
  // while (call again).
  bool BrokerTurn(bool* probing) override;
  void EndBrokerProbe() override;
  // After a published batch (OutageGate::EndRound); wakes the waiting workers.
  void EndBrokerRound(bool outage, milliseconds at_least, bool broker_answered, bool probing,
                      std::string_view error) override;
  milliseconds NextOutageDelay() const override;
  // Idle polling (idle_poller.h): an idle worker's wait after an empty claim;
  // EndIdle when an idle worker found work (`full`: its batch was full, so
  // every idle worker claims now); LeavePolling when a worker backs off.
  // `own`: the worker's own poller, when its claims see only its share
  // (OwnIdle): it then polls for itself, at its own interval.
  void IdleWait(int index, milliseconds claim_cost, bool ran_out,
                relay_internal::IdlePoller* own = nullptr);
  // The worker's own idle poller if `store`'s claims see only its share, else null.
  relay_internal::IdlePoller* OwnIdle(Worker& w, const ClaimQueue& store);
  // A worker with its own poller found work after idling.
  void OwnFound(relay_internal::IdlePoller& own);
  void EndIdle(bool full);
  void LeavePolling(int index);
  // True when a claim stopped at batch_size or batch_bytes (more may be due).
  bool FullBatch(const std::vector<ClaimedEvent>& events) const;

  RelayOptions options_;
  StoreParts store_;
  Clock& clock_;  // options_.clock or SystemClock()
  ChangeSource source_;  // empty unless source = kCdc
  Transport& transport_;
  RelayMetrics& metrics_;
  Logger& logger_;
  std::atomic<bool> stopping_{false};
  static constexpr std::int64_t kIdleBeat = INT64_MAX;
  const int beat_slots_;                                       // workers + 3
  const std::unique_ptr<std::atomic<std::int64_t>[]> beats_;  // made by the constructor
  std::vector<std::thread> threads_;  // started and joined by Run(); ~RelayImpl joins leftovers
  int running_ OUTBOX_GUARDED_BY(mu_) = 0;  // threads not yet finished
  std::atomic<int> db_ok_workers_{0};
  std::atomic<bool> db_ok_housekeeping_{false};
  // Set by the first database error: until then a relay whose first answers
  // have not come yet is "starting", not "database unreachable".
  std::atomic<bool> db_failed_once_{false};
  // cdc: housekeeping saw the slot over max_retained_wal_bytes (set), or the
  // outbox drained after a cap stop (cleared); read by StreamLoop.
  std::atomic<bool> wal_capped_{false};
  // cdc: set once this relay's stream has announced itself (OpenStreamProgress); until then
  // (at most cdc.stream_stale_after) the sweepers wait, so that a starting
  // relay does not claim what its stream is about to publish.
  std::atomic<bool> stream_reported_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::uint64_t wake_seq_ OUTBOX_GUARDED_BY(mu_) = 0;  // bumped to end idle sleeps (all claim)
  std::uint64_t handover_seq_ OUTBOX_GUARDED_BY(mu_) = 0;  // bumped when the poller's role is free
  relay_internal::OutageGate outage_ OUTBOX_GUARDED_BY(mu_);
  // outage_.Down(), readable without the lock (Ready() is called often): from
  // the batch the relay classified as an outage until a batch is acked,
  // /readyz answers 503 naming the broker and the error (librdkafka may still
  // see its connections up when the path black-holes).
  std::atomic<bool> broker_down_{false};
  relay_internal::IdlePoller idle_ OUTBOX_GUARDED_BY(mu_);
  // When a worker polling only its own share last found work or ran out of it
  // (the others' own pollers are heated from it).
  std::chrono::steady_clock::time_point own_found_at_ OUTBOX_GUARDED_BY(mu_){};
  // The last PermissionDenied of the workers' claims and of housekeeping's
  // stats, each until that side succeeds again.
  std::string refused_by_workers_ OUTBOX_GUARDED_BY(mu_);
  std::string refused_by_housekeeping_ OUTBOX_GUARDED_BY(mu_);
};

}  // namespace outbox

#endif  // OUTBOX_SRC_RELAY_RELAY_IMPL_H_
