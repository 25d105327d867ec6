// The relay's change stream (relay.source = cdc): one thread reads the slot,
// checks each decoded row against the table, publishes what may go now, records
// the outcomes on the rows, and only then confirms the slot's position.
//
// Invariants (docs/design.md, "CDC"):
//   - The slot's confirmed position moves only past batches whose outcomes are
//     recorded in the table (or that needed no record: published rows whose
//     mark failed are not confirmed — the stream is reopened and reads them
//     again; copies are absorbed by the inbox).
//   - The table decides: a row is published from the stream only while it is
//     PENDING, due, and (ordered) no earlier event of its aggregate is unsent.
//     Everything else is left to the sweeper, whose ordered claim keeps order.
//   - Nothing is written per event beyond the one fenced MarkSent (token 0):
//     no claim, no lease.
//   - Up to cdc.batches_in_flight batches are published at once: this thread
//     reads, checks and publishes batch k+1 while batch k waits for its acks.
//     Batches settle in commit order. A row in flight is PENDING in the
//     table, so the check holds every later row of its aggregate (parked)
//     until its outcome is recorded: per-aggregate order at any depth.
//   - One batch's outcomes are written by a helper (its own session) while
//     this thread goes on; its acked rows do not hold their aggregates in the
//     check (they are on their way to SENT), its failed ones do. At most one
//     batch is being marked.
#include <algorithm>
#include <deque>
#include <future>
#include <memory>
#include <map>
#include <random>

#include "outbox/relay.h"
#include "core/fault.h"
#include "plan.h"

namespace outbox {
namespace {

using Steady = std::chrono::steady_clock;

std::string Ms(Steady::duration d) {
  return std::to_string(std::chrono::duration<double, std::milli>(d).count());
}

template <class T>
std::unique_ptr<T> OpenOrNull(const std::function<Result<std::unique_ptr<T>>()>& factory) {
  auto s = factory();
  return s.ok() ? std::move(s).value() : nullptr;
}

}  // namespace

void Relay::StreamLoop() {
  const std::string who = options_.relay_id + "/stream";
  const CdcOptions& cdc = options_.cdc;
  std::mt19937_64 rng(std::random_device{}());
  const bool holds = options_.on_failed == FailedPolicy::kHold;
  ChangeStreamLimits limits;
  limits.max_events = static_cast<std::size_t>(cdc.batch_size);
  limits.max_bytes = options_.batch_bytes;
  limits.wait = milliseconds(100);

  std::unique_ptr<StreamLedger> store;  // the ledger's session
  std::unique_ptr<ChangeStream> stream;
  // Decoded rows not publishable yet (behind an earlier unsent event of their
  // aggregate, or waiting for a retry), asked about again every few ms; after
  // sweep_after (or past a bound) they are the sweeper's. Memory only: the
  // rows are PENDING in the table whatever happens to the relay.
  std::vector<ClaimedEvent> parked;
  std::map<std::int64_t, Steady::time_point> parked_since;
  std::map<std::int64_t, Steady::time_point> parked_seen;  // arrival of the batch it was last checked in
  const std::size_t max_parked = 4 * static_cast<std::size_t>(cdc.batch_size);
  std::unique_ptr<ClaimQueue> mark_store;  // the helper's session
  std::future<bool> marking;          // the previous batch's transitions
  std::uint64_t after_mark_lsn = 0;   // settled once `marking` succeeds
  std::int64_t after_mark_covered = 0;
  std::vector<std::int64_t> acked_unmarked;  // the marking batch's acked rows (seqs)
  std::uint64_t settled = 0;      // confirmable: every batch up to it is settled
  std::int64_t covered_us = 0;    // database time up to which every commit is settled
  Steady::time_point last_status, last_activity;
  bool logged_standby = false, logged_down = false, logged_outage = false;
  bool cap_handled = false;  // this cap episode's slot drop is done (or another relay's)
  milliseconds backoff{200};

  // Batches read and checked, in commit order, whose publish may still be in
  // flight. The front one settles first: its acks are marked (one batch
  // marking at a time) and only then its position counts as reached.
  struct InFlight {
    std::shared_ptr<std::vector<ClaimedEvent>> events;  // null: nothing published
    std::future<std::vector<PublishResult>> results;
    std::uint64_t lsn = 0;
    std::int64_t covered = 0;
    Steady::time_point received_at, check_at, checked_at;
    std::size_t fresh = 0, decoded = 0;
    std::chrono::microseconds oldest{0};  // the largest commit-to-read age in the batch
    bool probing = false;
    bool Ready() const {
      return !results.valid() || results.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
  };
  std::deque<InFlight> in_flight;
  bool settled_since_check = true;
  const std::size_t max_in_flight = static_cast<std::size_t>(std::max(1, cdc.batches_in_flight));
  enum class StepResult { kGoOn, kReopen, kOutage };
  // Waits for every publish in flight and forgets the batches: nothing of
  // theirs is recorded or confirmed, so they are read again from the slot (or
  // swept); acked copies are absorbed by the inbox.
  auto drop_in_flight = [&] {
    for (InFlight& f : in_flight) {
      if (!f.results.valid()) continue;
      auto results = f.results.get();
      for (const PublishResult& r : results) {
        if (r.outcome == PublishOutcome::kAcked) metrics_.published.Inc();
      }
      if (f.probing) EndBrokerProbe();
    }
    in_flight.clear();
  };
  // Waits for the batch being marked; true when its outcomes are recorded.
  auto finish_marking = [&]() -> bool {
    if (!marking.valid()) return true;
    const bool ok = marking.get();
    acked_unmarked.clear();
    if (ok) {
      settled = std::max(settled, after_mark_lsn);
      covered_us = std::max(covered_us, after_mark_covered);
    } else {
      mark_store.reset();
    }
    after_mark_lsn = 0;
    after_mark_covered = 0;
    return ok;
  };
  // A new position: settled at once, or once the batch being marked is.
  auto reached = [&](std::uint64_t lsn, std::int64_t covered) {
    if (marking.valid()) {
      after_mark_lsn = std::max(after_mark_lsn, lsn);
      after_mark_covered = std::max(after_mark_covered, covered);
    } else {
      settled = std::max(settled, lsn);
      covered_us = std::max(covered_us, covered);
    }
  };
  // Ends streaming: what is in flight is dropped (read again from the slot
  // later), the marking under way is waited for, the parked rows forgotten
  // (they are PENDING in the table). True when a stream was open.
  auto stop_streaming = [&]() -> bool {
    drop_in_flight();
    (void)finish_marking();
    parked.clear();
    parked_since.clear();
    parked_seen.clear();
    if (!stream) return false;
    stream.reset();
    metrics_.cdc_streaming.Set(0);
    return true;
  };
  auto close_stream = [&](const char* why, const Status& st) {
    if (!stop_streaming()) return;
    metrics_.cdc_restarts.Inc();
    logger_.Warn("change stream closed; it reopens at the slot's confirmed position",
                 {{"worker", who}, {"why", why}, {"error", st.ToString()}});
  };
  auto pause = [&] {
    SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.db_retry_max);
  };
  // Confirms the settled position and records the stream's progress for the
  // sweepers; false when the stream must be reopened.
  auto report = [&](bool want_reply) -> bool {
    Status st = stream->Confirm(settled, want_reply);
    if (!st.ok()) {
      close_stream("confirm", st);
      return false;
    }
    {
      // Nothing settled yet (a first keepalive or batch still on its way):
      // the announcement is renewed, so that the stream does not look stale.
      Status saved = settled > 0 && covered_us > 0
                         ? store->SaveStreamProgress({cdc.slot, options_.relay_id, settled, covered_us})
                         : store->OpenStreamProgress(cdc.slot, options_.relay_id);
      if (!saved.ok()) {
        metrics_.db_errors.Inc();
        store.reset();  // reconnect; the sweepers treat the stream as stale meanwhile
      } else {
        stream_reported_ = true;
      }
    }
    metrics_.cdc_confirmed_lsn.Set(static_cast<double>(settled));
    last_status = clock_.Now();
    return true;
  };

  // Settles the oldest batch in flight: waits for its acks, plans the
  // transitions, hands them to the marking helper (after the previous batch's
  // marks are recorded) and reaches its position. kReopen / kOutage: the
  // stream was closed (after dropping what was in flight).
  auto settle_front = [&]() -> StepResult {
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    settled_since_check = true;
    if (!f.events) {
      reached(f.lsn, f.covered);
      return StepResult::kGoOn;
    }
    const std::vector<PublishResult> results = f.results.get();
    const auto acked_at = clock_.Now();
    (void)OUTBOX_FAULT(fault::kStreamAfterPublish);
    const std::vector<ClaimedEvent>& events = *f.events;
    relay_internal::Plan plan =
        relay_internal::PlanTransitions(events, results, options_, NextOutageDelay(), rng);
    EndBrokerRound(plan.outage, !plan.sent.empty() || plan.held_back > 0, f.probing);
    relay_internal::RecordPublish(metrics_, logger_, who, events, results, plan,
                                  acked_at - f.received_at, &logged_outage);
    if (plan.outage) {
      // Nothing was written for this batch: its rows are still PENDING.
      // Read them again after the shared outage backoff (the sweepers take
      // over once the stream's progress is stale).
      stop_streaming();
      metrics_.cdc_restarts.Inc();
      return StepResult::kOutage;
    }
    const auto mark_wait_from = clock_.Now();
    bool recorded = finish_marking();
    const auto mark_waited = clock_.Now() - mark_wait_from;
    if (recorded && !mark_store && !(mark_store = OpenOrNull(store_.queue))) {
      metrics_.db_errors.Inc();
      recorded = false;
    }
    if (!recorded) {
      // Outcomes not recorded: do not confirm past them. Reopen and read the
      // batch again (its published rows come again; the inbox absorbs them).
      store.reset();
      close_stream("record outcomes", Status::Unavailable("transition not recorded"));
      return StepResult::kReopen;
    }
    // Only the rows going to SENT: an acked row held back behind an earlier
    // failure goes again, and so does its aggregate.
    for (const Ticket& t : plan.sent) acked_unmarked.push_back(t.seq);
    metrics_.rescheduled.Inc(plan.reschedule.size());
    metrics_.failed_fatal.Inc(plan.failed.size() - plan.max_attempts);
    metrics_.failed_max_attempts.Inc(plan.max_attempts);
    logger_.Log(LogLevel::kDebug, "stream batch",
                {{"worker", who}, {"decoded", std::to_string(f.fresh)},
                 {"checked", std::to_string(f.decoded)},
                 {"published", std::to_string(events.size())},
                 {"parked", std::to_string(parked.size())},
                 {"in_flight", std::to_string(in_flight.size())},
                 {"read_age_ms", Ms(f.oldest)},
                 {"check_ms", Ms(f.checked_at - f.check_at)},
                 {"publish_ms", Ms(acked_at - f.checked_at)},
                 {"mark_wait_ms", Ms(mark_waited)}});
    ClaimQueue* ms = mark_store.get();
    marking = std::async(std::launch::async, [this, ms, who, plan = std::move(plan)] {
      // Streamed rows hold no lease: a mark that does not go through soon is
      // given up and the batch read again from the slot. Until then the slot
      // cannot be confirmed — and a PostgreSQL shutdown waits for that
      // confirmation (up to wal_sender_timeout).
      const auto deadline =
          clock_.Now() + std::clamp<milliseconds>(options_.cdc.status_interval * 5,
                                                  milliseconds(500), milliseconds(5000));
      return ApplyTransition(who, "mark sent", [&] { return ms->MarkSent(plan.sent); },
                             plan.sent.size(), fault::kStreamMarkSent, deadline) &&
             ApplyTransition(who, "reschedule", [&] { return ms->Reschedule(plan.reschedule); },
                             plan.reschedule.size(), std::string_view{}, deadline) &&
             ApplyTransition(who, "mark failed", [&] { return ms->MarkFailed(plan.failed); },
                             plan.failed.size(), std::string_view{}, deadline);
    });
    reached(f.lsn, f.covered);
    // Collect a finished marking without waiting for it.
    if (marking.valid() && marking.wait_for(std::chrono::seconds(0)) == std::future_status::ready &&
        !finish_marking()) {
      close_stream("record outcomes", Status::Unavailable("transition not recorded"));
      return StepResult::kReopen;
    }
    return StepResult::kGoOn;
  };

  while (!stopping_) {
    Beat(StreamSlot());
    if (!store) {
      auto s = store_.ledger();
      if (!s.ok()) {
        // Without the table the stream cannot go on — and must not sit idle
        // on the slot: a shutting-down server waits for its reader to confirm
        // or leave (up to wal_sender_timeout) before it stops.
        close_stream("database session", s.status());
        metrics_.db_errors.Inc();
        pause();
        continue;
      }
      store = std::move(s).value();
    }
    if (wal_capped_) {
      if (!cap_handled) {
        // Our own walsender may take a moment to exit after the disconnect:
        // while it does, the slot is still "in use". Another relay's is its
        // business (it sees the cap too); an idle slot is anyone's to drop.
        const bool had = stop_streaming();
        Status dropped = Status::Ok();
        for (int i = 0; i < (had ? 50 : 1) && cdc.drop_slot && !stopping_; ++i) {
          dropped = cdc.drop_slot();
          if (dropped.code() != Code::kFenced) break;
          SleepFor(milliseconds(100));
        }
        if (dropped.ok()) {
          Status forgot = store->DropStreamProgress(cdc.slot);
          metrics_.cdc_wal_cap_stops.Inc();
          logger_.Error("replication slot retains more WAL than cdc.max_retained_wal_bytes: "
                        "streaming stopped and the slot dropped; the sweepers drain the outbox "
                        "by polling, then a new slot starts",
                        {{"slot", cdc.slot},
                         {"max_retained_wal_bytes", std::to_string(cdc.max_retained_wal_bytes)},
                         {"progress", forgot.ok() ? "cleared" : forgot.ToString()}});
          cap_handled = true;
        } else if (dropped.code() == Code::kFenced && !had) {
          cap_handled = true;  // the relay reading it drops it
        } else {
          logger_.Warn("could not drop the replication slot over the WAL cap; retrying",
                       {{"slot", cdc.slot}, {"error", dropped.ToString()}});
        }
      }
      SleepFor(cdc.standby_retry);
      continue;
    }
    cap_handled = false;
    if (!stream) {
      auto s = stream_factory_();
      if (!s.ok()) {
        if (s.status().code() == Code::kFenced) {
          if (!logged_standby) {
            logger_.Info("standing by: another relay reads the replication slot",
                         {{"worker", who}, {"slot", cdc.slot}});
            logged_standby = true;
          }
          SleepFor(cdc.standby_retry);
          continue;
        }
        if (!logged_down) {
          logger_.Warn("change stream unavailable; retrying with backoff (the sweepers poll "
                       "once its progress is stale)",
                       {{"worker", who}, {"error", s.status().ToString()}});
          logged_down = true;
        }
        pause();
        continue;
      }
      stream = std::move(s).value();
      logged_standby = logged_down = false;
      backoff = milliseconds(200);
      settled = 0;
      covered_us = 0;
      if (stream->created_slot()) {
        metrics_.cdc_slot_created.Inc();
        logger_.Warn(stream->recreated_lost_slot()
                         ? "replication slot was invalidated (max_slot_wal_keep_size); created it "
                           "again: what was committed meanwhile is swept by polling"
                         : "created the replication slot; rows committed before it are swept by "
                           "polling",
                     {{"slot", stream->slot()}});
      }
      // Tell the sweepers before reading: until the first report (a keepalive
      // round trip and a status interval away, longer under load) they would
      // see no stream and take the rows it is about to read.
      if (Status opened = store->OpenStreamProgress(cdc.slot, options_.relay_id); !opened.ok()) {
        metrics_.db_errors.Inc();
        store.reset();
        close_stream("announce the stream", opened);
        pause();
        continue;
      }
      stream_reported_ = true;
      logger_.Info("streaming", {{"worker", who}, {"slot", stream->slot()}});
      metrics_.cdc_streaming.Set(1);
      // Report at once, asking for the server's position (a keepalive), so
      // that progress is known without waiting for the first commit.
      last_activity = clock_.Now() - cdc.heartbeat_interval;
      last_status = clock_.Now() - cdc.status_interval;
    }

    // Settle the batches whose acks are in, oldest first. Wait for the oldest
    // when the pipeline is full — or when a batch's worth of rows is parked:
    // they wait for rows in flight, and reading further ahead would only
    // park more (the aggregates of consecutive batches overlap).
    {
      const std::size_t park_bound = static_cast<std::size_t>(cdc.batch_size);
      StepResult r = StepResult::kGoOn;
      while (!in_flight.empty() && r == StepResult::kGoOn &&
             (in_flight.size() >= max_in_flight || parked.size() >= park_bound ||
              in_flight.front().Ready())) {
        r = settle_front();
      }
      if (r != StepResult::kGoOn) {
        if (r == StepResult::kReopen) pause();
        continue;
      }
      // Collect a finished marking without waiting for it: the positions
      // reached meanwhile become settled (and the sweepers' horizon moves).
      if (marking.valid() &&
          marking.wait_for(std::chrono::seconds(0)) == std::future_status::ready &&
          !finish_marking()) {
        close_stream("record outcomes", Status::Unavailable("transition not recorded"));
        pause();
        continue;
      }
    }

    bool probing = false;
    if (!BrokerTurn(&probing)) continue;
    limits.wait = parked.empty() && in_flight.empty() ? milliseconds(100) : milliseconds(5);
    auto batch = stream->Next(limits);
    const auto received_at = clock_.Now();
    if (!batch.ok()) {
      if (probing) EndBrokerProbe();
      close_stream("read", batch.status());
      pause();
      continue;
    }

    const std::size_t fresh = batch->events.size();
    // Nothing new read and nothing settled since the last check: the parked
    // rows' answers cannot have changed (they wait for rows in flight).
    const bool recheck = fresh > 0 || settled_since_check || in_flight.empty();
    if (recheck) settled_since_check = false;
    if (!recheck) {
      if (probing) EndBrokerProbe();
      probing = false;
      batch->events.clear();
    } else if (!parked.empty()) {
      // Parked rows precede the new ones in commit order.
      const auto now = clock_.Now();
      std::vector<ClaimedEvent> merged;
      merged.reserve(parked.size() + batch->events.size());
      for (ClaimedEvent& e : parked) {
        const auto waited = now - parked_since[e.ticket.seq];
        if (waited >= cdc.sweep_after) continue;
        // Its commit-to-ack time counts the wait since the batch it was last
        // checked in (this batch's claim-to-ack starts at this batch's arrival).
        if (auto it = parked_seen.find(e.ticket.seq); it != parked_seen.end()) {
          e.age_at_claim +=
              std::chrono::duration_cast<std::chrono::microseconds>(received_at - it->second);
        }
        merged.push_back(std::move(e));
      }
      const std::size_t expired = parked.size() - merged.size();
      metrics_.cdc_left_to_sweeper.Inc(expired);
      parked.clear();
      for (ClaimedEvent& e : batch->events) merged.push_back(std::move(e));
      batch->events = std::move(merged);
    }
    InFlight f;
    f.lsn = batch->confirmable_lsn;
    f.covered = batch->covered_until_us;
    f.received_at = received_at;
    f.fresh = fresh;
    f.probing = probing;
    if (batch->events.empty()) {
      if (probing) EndBrokerProbe();
      f.probing = false;
    } else {
      last_activity = received_at;
      f.decoded = batch->events.size();
      std::vector<std::int64_t> seqs;
      seqs.reserve(f.decoded);
      for (const ClaimedEvent& e : batch->events) {
        seqs.push_back(e.ticket.seq);
        f.oldest = std::max(f.oldest, e.age_at_claim);
      }
      metrics_.cdc_streamed.Inc(fresh);
      f.check_at = clock_.Now();
      // Rows in flight are PENDING in the table: they hold their aggregates
      // here, so a later row of theirs waits (parked) until their outcome is
      // recorded. Rows acked and being marked do not hold.
      auto states = store->StreamStates(seqs, holds, acked_unmarked);
      f.checked_at = clock_.Now();
      if (!states.ok()) {
        if (probing) EndBrokerProbe();
        metrics_.db_errors.Inc();
        store.reset();
        close_stream("read row states", states.status());
        pause();
        continue;
      }
      relay_internal::StreamPick pick = relay_internal::PickStreamed(
          std::move(batch->events), *states, options_.ordered, holds);
      metrics_.cdc_left_to_sweeper.Inc(pick.left_to_sweeper);
      {
        std::map<std::int64_t, Steady::time_point> since, seen;
        const auto now = clock_.Now();
        for (ClaimedEvent& e : pick.park) {
          if (parked.size() >= max_parked) {
            metrics_.cdc_left_to_sweeper.Inc();
            continue;
          }
          auto it = parked_since.find(e.ticket.seq);
          since[e.ticket.seq] = it == parked_since.end() ? now : it->second;
          seen[e.ticket.seq] = received_at;
          parked.push_back(std::move(e));
        }
        parked_since = std::move(since);
        parked_seen = std::move(seen);
      }
      if (pick.publish.empty()) {
        if (probing) EndBrokerProbe();
        f.probing = false;
      } else {
        f.events = std::make_shared<std::vector<ClaimedEvent>>(std::move(pick.publish));
        f.results = std::async(std::launch::async, [this, events = f.events] {
          return transport_.Publish(*events);
        });
      }
    }
    const bool probe_in_flight = f.probing;
    in_flight.push_back(std::move(f));
    if (probe_in_flight) {
      // While the broker is being probed after an outage, one batch at a time.
      StepResult r = StepResult::kGoOn;
      while (!in_flight.empty() && r == StepResult::kGoOn) r = settle_front();
      if (r != StepResult::kGoOn) {
        if (r == StepResult::kReopen) pause();
        continue;
      }
    }
    const auto now = clock_.Now();
    if (now - last_status >= cdc.status_interval) {
      const bool heartbeat = now - last_activity >= cdc.heartbeat_interval;
      if (heartbeat) last_activity = now;
      if (!report(heartbeat)) pause();
    }
  }
  // Stopping: settle what is in flight (its acks are marked), then confirm.
  while (!in_flight.empty() && settle_front() == StepResult::kGoOn) {
  }
  drop_in_flight();
  const bool marked = finish_marking();
  if (stream && store && marked) (void)report(false);  // spare the next reader what is settled
  metrics_.cdc_streaming.Set(0);
}

}  // namespace outbox
