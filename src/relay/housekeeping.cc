// Housekeeping's thread (the row-count gauges, the SENT purge, the WAL cap's
// watch with source = cdc) and the listener's (LISTEN, waking idle workers).
#include <algorithm>

#include "plan.h"
#include "relay_impl.h"

namespace outbox {

using Steady = std::chrono::steady_clock;

void RelayImpl::ListenLoop() {
  std::unique_ptr<ClaimQueue> store;
  milliseconds backoff{200};
  while (!stopping_) {
    Beat(ListenSlot());
    if (!store) {
      auto s = store_.queue();
      if (!s.ok()) {
        SleepFor(backoff);
        backoff = std::min(backoff * 2, options_.db_retry_max);
        continue;
      }
      store = std::move(s).value();
    }
    auto woken = store->WaitForWork(milliseconds(500));
    if (!woken.ok()) {
      store.reset();  // reconnect (and LISTEN again) after a pause
      SleepFor(backoff);
      backoff = std::min(backoff * 2, options_.db_retry_max);
      continue;
    }
    backoff = milliseconds(200);
    if (*woken) {
      MutexLock lock(mu_);
      ++wake_seq_;
      cv_.notify_all();
    }
  }
}

void RelayImpl::WatchSlot(StreamLedger& ledger, const StoreStats* stats) {
  const CdcOptions& cdc = options_.cdc;
  auto slot = ledger.StreamSlotStatus(cdc.slot);
  if (!slot.ok()) {
    metrics_.db_errors.Inc();
    return;
  }
  metrics_.cdc_retained_wal.Set(static_cast<double>(slot->retained_wal_bytes));
  metrics_.cdc_lag.Set(slot->lag ? static_cast<double>(slot->lag->count()) / 1000.0 : 0.0);
  if (cdc.max_retained_wal_bytes > 0 && slot->exists &&
      slot->retained_wal_bytes > cdc.max_retained_wal_bytes) {
    wal_capped_ = true;  // the streaming relay drops the slot; standbys do not start one
  } else if (wal_capped_ && stats != nullptr && stats->oldest_unsent_age < cdc.sweep_after * 2) {
    // The sweepers have drained what piled up: stream again (a new slot).
    logger_.Info("outbox drained by polling after the WAL cap; streaming starts again",
                 {{"slot", cdc.slot},
                  {"oldest_unsent_ms", std::to_string(stats->oldest_unsent_age.count())}});
    wal_capped_ = false;
  }
}

std::optional<StoreStats> RelayImpl::RefreshGauges(OutboxView& view,
                                               Steady::time_point& next_stats) {
  if (clock_.Now() < next_stats) return std::nullopt;
  const auto started = clock_.Now();
  auto st = view.Stats();
  // Paced by its cost only when it answered: a failure (which may have taken a
  // timeout's length) is tried again next round, so that readiness follows the
  // database; and while the WAL cap holds, every round reads the oldest age
  // that lifts it.
  next_stats = st.ok() && !wal_capped_
                   ? relay_internal::NextStatsAt(options_, started, clock_.Now() - started)
                   : started + options_.stats_interval;
  if (!st.ok()) {
    (void)NoteDbError(st.status(), &refused_by_housekeeping_);
    db_ok_housekeeping_ = false;
    return std::nullopt;
  }
  if (!db_ok_housekeeping_) ClearRefusal(&refused_by_housekeeping_);
  db_ok_housekeeping_ = true;
  metrics_.pending.Set(static_cast<double>(st->pending));
  metrics_.processing.Set(static_cast<double>(st->processing));
  metrics_.failed_rows.Set(static_cast<double>(st->failed));
  metrics_.skipped_rows.Set(static_cast<double>(st->skipped));
  metrics_.oldest_unsent_age.Set(static_cast<double>(st->oldest_unsent_age.count()) / 1000.0);
  metrics_.held_aggregates.Set(static_cast<double>(st->held_aggregates));
  return *st;
}

void RelayImpl::PurgeRound(OutboxView& view, Steady::time_point& next_purge) {
  // Purge does not depend on Stats. Each round deletes batches for at most
  // kPurgeBudget; if rows are left it goes on next round (every stats
  // interval) instead of waiting a whole purge_interval, so it keeps up with
  // any ingest the database can take.
  if (clock_.Now() < next_purge) return;
  constexpr auto kPurgeBudget = std::chrono::seconds(1);
  const auto stop_at = clock_.Now() + kPurgeBudget;
  std::int64_t total = 0;
  bool more = false;
  while (!stopping_) {
    auto p = view.PurgeSent(options_.sent_retention, options_.purge_batch);
    if (!p.ok()) {
      if (NoteDbError(p.status())) {
        logger_.Error("purge refused: the relay's role lacks DELETE on the outbox table; SENT "
                      "rows are kept until it is granted",
                      {{"error", p.status().ToString()}});
      }
      break;
    }
    total += *p;
    metrics_.purged.Inc(static_cast<std::uint64_t>(*p));
    if (*p < options_.purge_batch) break;
    if (clock_.Now() >= stop_at) {
      more = true;
      break;
    }
  }
  next_purge = more ? clock_.Now() : clock_.Now() + options_.purge_interval;
  if (total > 0) logger_.Log(LogLevel::kDebug, "purged sent rows", {{"rows", std::to_string(total)}});
}

void RelayImpl::HousekeepingLoop() {
  std::unique_ptr<OutboxView> store;
  std::unique_ptr<StreamLedger> ledger;  // cdc: the slot's gauges and the WAL cap
  auto next_purge = clock_.Now() + std::chrono::seconds(5);
  auto next_stats = clock_.Now();
  // cdc: the slot's gauges and the WAL cap, on the ledger's own session (one
  // more than polling needs: the view's store may be another database's part).
  auto watch_slot = [&](const StoreStats* stats) {
    if (options_.source != RelaySource::kCdc || !store_.ledger) return;
    if (!ledger) {
      auto l = store_.ledger();
      if (!l.ok()) {
        (void)NoteDbError(l.status());
        return;
      }
      ledger = std::move(l).value();
    }
    WatchSlot(*ledger, stats);
  };
  while (!stopping_) {
    Beat(HousekeepingSlot());
    if (!store_.view) {  // no view (engine tests): no gauges, no purge
      db_ok_housekeeping_ = true;
      watch_slot(nullptr);
      metrics_.ready.Set(Ready() ? 1 : 0);
      SleepFor(options_.stats_interval);
      continue;
    }
    if (!store) {
      auto s = store_.view();
      if (!s.ok()) {
        (void)NoteDbError(s.status(), &refused_by_housekeeping_);
        db_ok_housekeeping_ = false;
        metrics_.ready.Set(0);
        SleepFor(options_.stats_interval);
        continue;
      }
      store = std::move(s).value();
    }
    const std::optional<StoreStats> st = RefreshGauges(*store, next_stats);
    watch_slot(st ? &*st : nullptr);
    PurgeRound(*store, next_purge);
    metrics_.ready.Set(Ready() ? 1 : 0);
    SleepFor(options_.stats_interval);
  }
}

}  // namespace outbox
