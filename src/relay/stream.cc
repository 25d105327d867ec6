// The relay's change stream (relay.source = cdc): one thread reads the slot,
// checks each decoded row against the table, publishes what may go now, records
// the outcomes on the rows, and only then confirms the slot's position.
//
// The decisions live in two pure parts, unit-tested: which rows to publish
// (PickStreamed, plan.h) and the bookkeeping — batches in flight, the batch
// being marked, parked rows, the positions that may be confirmed and
// reported (StreamBook, stream_book.h). This file is the pump that drives
// them: sessions, reads, publishes, marks, reports, the WAL cap.
//
// Invariants (docs/design.md, "CDC"):
//   - The slot's confirmed position moves only past batches whose outcomes are
//     recorded in the table, and never past a parked row (published rows whose
//     mark failed are not confirmed — the stream is reopened and reads them
//     again; copies are absorbed by the inbox).
//   - The table decides: a row is published from the stream only while it is
//     PENDING, due, and (ordered) no earlier event of its aggregate is unsent.
//     Everything else is left to the sweeper, whose ordered claim keeps order.
//   - Nothing is written per event beyond the one fenced MarkSent (token 0):
//     no claim, no lease.
//   - Up to cdc.batches_in_flight batches are published at once; they settle
//     in commit order. A row in flight is PENDING in the table, so the check
//     holds every later row of its aggregate (parked) until its outcome is
//     recorded: per-aggregate order at any depth.
//   - One batch's outcomes are written by a helper (its own session) while
//     this thread goes on; its acked rows do not hold their aggregates in the
//     check (they are on their way to SENT), its failed ones do. At most one
//     batch is being marked.
#include <algorithm>
#include <deque>
#include <future>
#include <memory>
#include <random>

#include "stream.h"

#include "core/fault.h"
#include "plan.h"
#include "stream_book.h"

namespace outbox::relay_internal {
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

relay_internal::StreamBook::Limits BookLimits(const CdcOptions& cdc) {
  relay_internal::StreamBook::Limits l;
  l.max_in_flight = static_cast<std::size_t>(std::max(1, cdc.batches_in_flight));
  l.park_bound = static_cast<std::size_t>(cdc.batch_size);
  l.max_parked = 4 * static_cast<std::size_t>(cdc.batch_size);
  l.sweep_after = cdc.sweep_after;
  return l;
}

}  // namespace

// The stream thread's state and steps; Run() is the loop. Thread-safety: the
// stream thread's alone, except the marking helper (StartMarking), which sees
// only the host's thread-safe calls and `mark_queue_`'s session, released
// only after the helper's future is collected. Lifetime: within RunStream().
class StreamPump {
 public:
  StreamPump(const StreamContext& context, StreamHost& host)
      : ctx_(context), host_(host), cdc_(context.options.cdc), who_(context.options.relay_id + "/stream"),
        holds_(context.options.on_failed == FailedPolicy::kHold), book_(BookLimits(cdc_)),
        rng_(std::random_device{}()) {
    limits_.max_events = static_cast<std::size_t>(cdc_.batch_size);
    limits_.max_bytes = context.options.batch_bytes;
  }
  void Run();

 private:
  // A batch whose publish may be in flight (the book holds its position).
  struct Publish {
    std::shared_ptr<std::vector<ClaimedEvent>> events;  // null: nothing published
    std::future<std::vector<PublishResult>> results;
    Steady::time_point received_at, check_at, checked_at;
    std::size_t fresh = 0, checked = 0;
    std::chrono::microseconds oldest{0};  // the largest commit-to-read age in the batch
    bool probing = false;
    bool Ready() const {
      return !results.valid() || results.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
  };
  enum class Step { kGoOn, kReopen, kOutage };

  bool EnsureLedger();
  void HandleWalCap();
  bool EnsureStream();
  bool SettleReady();
  Step SettleFront();
  bool StartMarking(relay_internal::Plan plan);
  bool CollectMarking(bool wait);
  bool ReadCheckPublish();
  bool CheckAndPublish(ChangeBatch& batch, Publish& p, bool probing);
  void MaybeReport();
  bool Report(bool want_reply);
  void DropInFlight();
  bool StopStreaming();
  void CloseStream(const char* why, const Status& st);
  void Pause();
  void Finish();

  const StreamContext& ctx_;
  StreamHost& host_;
  const CdcOptions& cdc_;
  const std::string who_;
  const bool holds_;
  relay_internal::StreamBook book_;
  std::mt19937_64 rng_;
  ChangeStreamLimits limits_;
  std::unique_ptr<StreamLedger> ledger_;   // the ledger's session
  std::unique_ptr<ChangeStream> stream_;
  std::unique_ptr<ClaimQueue> mark_queue_;  // the marking helper's session
  std::future<bool> marking_;              // the marking batch's transitions
  std::deque<Publish> in_flight_;           // aligned with the book's batches
  Steady::time_point last_status_, last_activity_;
  bool logged_standby_ = false, logged_down_ = false, logged_outage_ = false;
  bool cap_handled_ = false;      // this cap episode's slot is dropped (by us or another relay)
  bool logged_cap_held_ = false;  // this cap episode's "slot in use" is logged
  milliseconds backoff_{200};
  // A stream that fails soon after each opening (say its slot's position
  // precedes the publication: every read fails) must not keep announcing
  // itself, or the sweepers would wait for it forever. After this many
  // sessions in a row shorter than cdc.stream_stale_after it stands aside
  // (no progress written: the sweepers take its rows once the progress is
  // stale) until a session lives that long.
  static constexpr int kShortSessionsToStandAside = 3;
  int short_sessions_ = 0;
  Steady::time_point opened_at_;
  bool StandingAside() const { return short_sessions_ >= kShortSessionsToStandAside; }
  // Called while a stream is open: a session that lived stream_stale_after
  // ends the episode (announces again, backoff from the start).
  void NoteHealthy();
};

void RunStream(const StreamContext& context, StreamHost& host) { StreamPump(context, host).Run(); }

void StreamPump::Run() {
  while (!host_.Stopping()) {
    host_.BeatStream();
    if (!EnsureLedger()) continue;
    if (host_.WalCapped()) {
      HandleWalCap();
      continue;
    }
    cap_handled_ = logged_cap_held_ = false;
    if (!EnsureStream() || !SettleReady() || !ReadCheckPublish()) continue;
    MaybeReport();
  }
  Finish();
}

// The ledger's session; false (after a pause) while the database is away.
bool StreamPump::EnsureLedger() {
  if (ledger_) return true;
  auto s = ctx_.store.ledger();
  if (!s.ok()) {
    // Without the table the stream cannot go on — and must not sit idle on
    // the slot: a shutting-down server waits for its reader to confirm or
    // leave (up to wal_sender_timeout) before it stops.
    CloseStream("database session", s.status());
    ctx_.metrics.db_errors.Inc();
    Pause();
    return false;
  }
  ledger_ = std::move(s).value();
  return true;
}

// The slot retains more WAL than the cap: stop streaming and retire the slot
// (the sweepers drain by polling; a new slot starts once housekeeping clears
// the cap). Tried every cdc.standby_retry until the slot is dropped or gone:
// a reader holding it may be another relay (which sees the cap and drops it
// too), a reader without the cap, or this relay's own walsender still
// exiting after an outage closed the stream — so "in use" is never taken as
// "someone else will drop it".
void StreamPump::HandleWalCap() {
  if (!cap_handled_) {
    // Our own walsender may take a moment to exit after the disconnect: while
    // it does, the slot is still "in use".
    const bool had = StopStreaming();
    Status dropped = Status::Ok();
    for (int i = 0; i < (had ? 50 : 1) && ctx_.source.retire_slot && !host_.Stopping(); ++i) {
      dropped = ctx_.source.retire_slot();
      if (dropped.code() != Code::kFenced) break;
      host_.SleepFor(milliseconds(100));
    }
    if (dropped.ok()) {
      Status forgot = ledger_->DropStreamProgress(cdc_.slot);
      ctx_.metrics.cdc_wal_cap_stops.Inc();
      ctx_.logger.Error("replication slot retains more WAL than cdc.max_retained_wal_bytes: "
                       "streaming stopped and the slot dropped; the sweepers drain the outbox "
                       "by polling, then a new slot starts",
                       {{"slot", cdc_.slot},
                        {"max_retained_wal_bytes", std::to_string(cdc_.max_retained_wal_bytes)},
                        {"progress", forgot.ok() ? "cleared" : forgot.ToString()}});
      cap_handled_ = true;
    } else if (dropped.code() == Code::kNotFound) {
      (void)ledger_->DropStreamProgress(cdc_.slot);  // idempotent: in case the dropper could not
      ctx_.logger.Info("replication slot over cdc.max_retained_wal_bytes is already dropped "
                      "(by another relay); the sweepers drain the outbox by polling",
                      {{"slot", cdc_.slot}});
      cap_handled_ = true;
    } else if (dropped.code() == Code::kFenced) {
      if (!logged_cap_held_) {
        ctx_.logger.Warn("replication slot over cdc.max_retained_wal_bytes is in use by another "
                        "reader; it is dropped as soon as the reader lets go",
                        {{"slot", cdc_.slot}, {"error", dropped.ToString()}});
        logged_cap_held_ = true;
      }
    } else {
      ctx_.logger.Warn("could not drop the replication slot over the WAL cap; retrying",
                      {{"slot", cdc_.slot}, {"error", dropped.ToString()}});
    }
  }
  host_.SleepFor(cdc_.standby_retry);
}

// An open stream, announced to the sweepers; false (after a wait) while the
// slot is another relay's or the stream cannot be opened.
bool StreamPump::EnsureStream() {
  if (stream_) return true;
  auto s = ctx_.source.open();
  if (!s.ok()) {
    if (s.status().code() == Code::kFenced) {
      if (!logged_standby_) {
        ctx_.logger.Info("standing by: another relay reads the replication slot",
                        {{"worker", who_}, {"slot", cdc_.slot}});
        logged_standby_ = true;
      }
      host_.SleepFor(cdc_.standby_retry);
      return false;
    }
    if (!logged_down_) {
      ctx_.logger.Warn("change stream unavailable; retrying with backoff (the sweepers poll "
                      "once its progress is stale)",
                      {{"worker", who_}, {"error", s.status().ToString()}});
      logged_down_ = true;
    }
    Pause();
    return false;
  }
  stream_ = std::move(s).value();
  opened_at_ = ctx_.clock.Now();
  logged_standby_ = logged_down_ = false;
  // The backoff starts over once the stream has lived (NoteHealthy), not at
  // opening: a stream that fails right after opening backs off.
  book_.Restart();
  if (stream_->created_slot()) {
    ctx_.metrics.cdc_slot_created.Inc();
    ctx_.logger.Warn(stream_->recreated_lost_slot()
                        ? "replication slot was invalidated (max_slot_wal_keep_size); created it "
                          "again: what was committed meanwhile is swept by polling"
                        : "created the replication slot; rows committed before it are swept by "
                          "polling",
                    {{"slot", stream_->slot()}});
  }
  // Tell the sweepers before reading: until the first report (a keepalive
  // round trip and a status interval away, longer under load) they would see
  // no stream and take the rows it is about to read. Not while standing aside.
  if (StandingAside()) {
    // Once per episode: at every later reopening the count has only grown.
    if (short_sessions_ == kShortSessionsToStandAside) {
      ctx_.logger.Warn("change stream failed soon after opening several times in a row; not "
                      "announcing it, so the sweepers deliver its rows, until it streams for "
                      "cdc.stream_stale_after",
                      {{"worker", who_}, {"slot", stream_->slot()},
                       {"short_sessions", std::to_string(short_sessions_)}});
    }
  } else if (Status opened = ledger_->OpenStreamProgress(cdc_.slot, ctx_.options.relay_id);
             !opened.ok()) {
    ctx_.metrics.db_errors.Inc();
    ledger_.reset();
    CloseStream("announce the stream", opened);
    Pause();
    return false;
  }
  host_.StreamAnnounced();
  ctx_.logger.Info("streaming", {{"worker", who_}, {"slot", stream_->slot()}});
  ctx_.metrics.cdc_streaming.Set(1);
  // Report at once, asking for the server's position (a keepalive), so that
  // progress is known without waiting for the first commit.
  last_activity_ = ctx_.clock.Now() - cdc_.heartbeat_interval;
  last_status_ = ctx_.clock.Now() - cdc_.status_interval;
  return true;
}

// Settles the batches whose acks are in, oldest first; waits for the oldest
// when the book says so (pipeline full, a batch's worth parked). False when
// the stream was closed (after a pause if it is to be reopened).
bool StreamPump::SettleReady() {
  Step step = Step::kGoOn;
  while (step == Step::kGoOn && book_.ShouldSettle(!in_flight_.empty() && in_flight_.front().Ready())) {
    step = SettleFront();
  }
  if (step == Step::kReopen) Pause();
  if (step != Step::kGoOn) return false;
  // Collect a finished marking without waiting for it: the positions reached
  // meanwhile become settled (and the sweepers' horizon moves).
  if (!CollectMarking(false)) {
    CloseStream("record outcomes", Status::Unavailable("transition not recorded"));
    Pause();
    return false;
  }
  return true;
}

// Settles the oldest batch in flight: waits for its acks, plans the
// transitions and hands them to the marking helper (after the previous
// batch's marks are recorded). kReopen / kOutage: the stream was closed.
StreamPump::Step StreamPump::SettleFront() {
  Publish p = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (!p.events) {
    book_.SettledEmpty();
    return Step::kGoOn;
  }
  const std::vector<PublishResult> results = p.results.get();
  const auto acked_at = ctx_.clock.Now();
  (void)OUTBOX_FAULT(fault::kStreamAfterPublish);
  const std::vector<ClaimedEvent>& events = *p.events;
  relay_internal::Plan plan =
      relay_internal::PlanTransitions(events, results, ctx_.options, host_.NextOutageDelay(), rng_);
  host_.EndBrokerRound(plan.outage, plan.outage_delay, !plan.sent.empty() || plan.held_back > 0,
                    p.probing, results.empty() ? std::string_view() : std::string_view(results.front().error));
  relay_internal::RecordPublish(ctx_.metrics, ctx_.logger, who_, ctx_.transport.PeerName(), events,
                                results, plan, acked_at - p.received_at, &logged_outage_);
  if (plan.outage) {
    // Nothing was written for this batch: its rows are still PENDING. Read
    // them again after the shared outage backoff (the sweepers take over
    // once the stream's progress is stale).
    StopStreaming();
    ctx_.metrics.cdc_restarts.Inc();
    return Step::kOutage;
  }
  const auto mark_wait_from = ctx_.clock.Now();
  bool recorded = CollectMarking(true);
  const auto mark_waited = ctx_.clock.Now() - mark_wait_from;
  if (recorded && !mark_queue_ && !(mark_queue_ = OpenOrNull(ctx_.store.queue))) {
    ctx_.metrics.db_errors.Inc();
    recorded = false;
  }
  if (!recorded) {
    // Outcomes not recorded: do not confirm past them. Reopen and read the
    // batch again (its published rows come again; the inbox absorbs them).
    ledger_.reset();
    CloseStream("record outcomes", Status::Unavailable("transition not recorded"));
    return Step::kReopen;
  }
  ctx_.metrics.rescheduled.Inc(plan.reschedule.size());
  ctx_.metrics.failed_fatal.Inc(plan.failed.size() - plan.max_attempts);
  ctx_.metrics.failed_max_attempts.Inc(plan.max_attempts);
  ctx_.logger.Log(LogLevel::kDebug, "stream batch",
                 {{"worker", who_}, {"decoded", std::to_string(p.fresh)},
                  {"checked", std::to_string(p.checked)},
                  {"published", std::to_string(events.size())},
                  {"parked", std::to_string(book_.parked_count())},
                  {"in_flight", std::to_string(in_flight_.size())},
                  {"read_age_ms", Ms(p.oldest)},
                  {"check_ms", Ms(p.checked_at - p.check_at)},
                  {"publish_ms", Ms(acked_at - p.checked_at)},
                  {"mark_wait_ms", Ms(mark_waited)}});
  if (!StartMarking(std::move(plan))) {
    CloseStream("record outcomes", Status::Unavailable("transition not recorded"));
    return Step::kReopen;
  }
  return Step::kGoOn;
}

// Hands the plan's transitions to the helper; the front batch's position
// counts once they are recorded. False when a marking that already ended
// failed.
bool StreamPump::StartMarking(relay_internal::Plan plan) {
  // Only the rows going to SENT stop holding their aggregates: an acked row
  // held back behind an earlier failure goes again, and so does its aggregate.
  book_.MarkingStarted(plan.sent);
  ClaimQueue* q = mark_queue_.get();
  StreamHost* host = &host_;
  Clock* clock = &ctx_.clock;
  const milliseconds status_interval = cdc_.status_interval;
  marking_ = std::async(std::launch::async, [host, clock, q, status_interval, who = who_, plan = std::move(plan)] {
    // Streamed rows hold no lease: a mark that does not go through soon is
    // given up and the batch read again from the slot. Until then the slot
    // cannot be confirmed — and a PostgreSQL shutdown waits for that
    // confirmation (up to wal_sender_timeout).
    const auto deadline =
        clock->Now() + std::clamp<milliseconds>(status_interval * 5, milliseconds(500), milliseconds(5000));
    return host->ApplyTransition(who, "mark sent", [&] { return q->MarkSent(plan.sent); },
                                 plan.sent.size(), fault::kStreamMarkSent, deadline) &&
           host->ApplyTransition(who, "reschedule", [&] { return q->Reschedule(plan.reschedule); },
                                 plan.reschedule.size(), std::string_view{}, deadline) &&
           host->ApplyTransition(who, "mark failed", [&] { return q->MarkFailed(plan.failed); },
                                 plan.failed.size(), std::string_view{}, deadline);
  });
  return CollectMarking(false);
}

// Ends the marking under way when it has finished (or waits for it, `wait`);
// true unless it ended unrecorded (then the helper's session is dropped).
bool StreamPump::CollectMarking(bool wait) {
  if (!marking_.valid()) return true;
  if (!wait && marking_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return true;
  const bool ok = marking_.get();
  book_.MarkingDone(ok);
  if (!ok) mark_queue_.reset();
  return ok;
}

// One read from the slot: the parked rows and the new ones are checked
// against the table, the publishable ones go to the broker, and the batch
// joins the pipeline. False when the stream was closed or the broker's
// backoff holds this round.
bool StreamPump::ReadCheckPublish() {
  bool probing = false;
  if (!host_.BrokerTurn(&probing)) return false;
  limits_.wait = book_.parked_count() == 0 && in_flight_.empty() ? milliseconds(100) : milliseconds(5);
  auto batch = stream_->Next(limits_);
  Publish p;
  p.received_at = ctx_.clock.Now();
  if (!batch.ok()) {
    if (probing) host_.EndBrokerProbe();
    CloseStream("read", batch.status());
    Pause();
    return false;
  }
  if (!CheckAndPublish(*batch, p, probing)) return false;
  book_.Dispatched(batch->confirmable_lsn, batch->covered_until_us, p.events != nullptr);
  const bool probe_in_flight = p.probing;
  in_flight_.push_back(std::move(p));
  if (probe_in_flight) {
    // While the broker is being probed after an outage, one batch at a time.
    Step step = Step::kGoOn;
    while (!in_flight_.empty() && step == Step::kGoOn) step = SettleFront();
    if (step == Step::kReopen) Pause();
    if (step != Step::kGoOn) return false;
  }
  return true;
}

// Checks the rows to check (parked and new) and starts the publish of what
// may go now; parks the rest. False when the check failed (stream closed).
bool StreamPump::CheckAndPublish(ChangeBatch& batch, Publish& p, bool probing) {
  p.fresh = batch.events.size();
  p.probing = probing;
  std::vector<ClaimedEvent> rows;
  if (book_.NeedsCheck(p.fresh > 0)) {
    std::size_t expired = 0;
    rows = book_.ToCheck(std::move(batch.events), p.received_at, &expired);
    ctx_.metrics.cdc_left_to_sweeper.Inc(expired);
  }
  if (rows.empty()) {
    if (probing) host_.EndBrokerProbe();
    p.probing = false;
    return true;
  }
  last_activity_ = p.received_at;
  p.checked = rows.size();
  std::vector<std::int64_t> seqs;
  seqs.reserve(rows.size());
  for (const ClaimedEvent& e : rows) {
    seqs.push_back(e.ticket.seq);
    p.oldest = std::max(p.oldest, e.age_at_claim);
  }
  ctx_.metrics.cdc_streamed.Inc(p.fresh);
  p.check_at = ctx_.clock.Now();
  // Rows in flight are PENDING in the table: they hold their aggregates here,
  // so a later row of theirs waits (parked) until their outcome is recorded.
  // Rows acked and being marked do not hold.
  auto states = ledger_->StreamStates(seqs, holds_, book_.acked_unmarked());
  p.checked_at = ctx_.clock.Now();
  if (!states.ok()) {
    if (probing) host_.EndBrokerProbe();
    ctx_.metrics.db_errors.Inc();
    ledger_.reset();
    CloseStream("read row states", states.status());
    Pause();
    return false;
  }
  relay_internal::StreamPick pick =
      relay_internal::PickStreamed(std::move(rows), *states, ctx_.options.ordered, holds_);
  ctx_.metrics.cdc_left_to_sweeper.Inc(pick.left_to_sweeper);
  ctx_.metrics.cdc_left_to_sweeper.Inc(book_.Park(std::move(pick.park), ctx_.clock.Now(), p.received_at));
  if (pick.publish.empty()) {
    if (probing) host_.EndBrokerProbe();
    p.probing = false;
    return true;
  }
  p.events = std::make_shared<std::vector<ClaimedEvent>>(std::move(pick.publish));
  p.results = std::async(std::launch::async, [this, events = p.events] {
    return ctx_.transport.Publish(*events);
  });
  return true;
}

void StreamPump::MaybeReport() {
  const auto now = ctx_.clock.Now();
  if (now - last_status_ < cdc_.status_interval) return;
  const bool heartbeat = now - last_activity_ >= cdc_.heartbeat_interval;
  if (heartbeat) last_activity_ = now;
  if (!Report(heartbeat)) Pause();
}

// A session that has lived cdc.stream_stale_after ends a run of short ones:
// the stream is announced to the sweepers again.
void StreamPump::NoteHealthy() {
  if (ctx_.clock.Now() - opened_at_ < cdc_.stream_stale_after) return;
  if (StandingAside()) {
    ctx_.logger.Info("change stream has streamed for cdc.stream_stale_after; announcing it again",
                    {{"worker", who_}, {"slot", stream_->slot()}});
  }
  short_sessions_ = 0;
  backoff_ = milliseconds(200);
}

// Confirms what the book says may be confirmed and records the stream's
// progress for the sweepers; false when the stream must be reopened.
bool StreamPump::Report(bool want_reply) {
  const std::uint64_t lsn = book_.Confirmable();
  const std::int64_t covered = book_.Covered();
  Status st = stream_->Confirm(lsn, want_reply);
  if (!st.ok()) {
    CloseStream("confirm", st);
    return false;
  }
  NoteHealthy();
  if (StandingAside()) {  // the sweepers deliver meanwhile: no progress written
    ctx_.metrics.cdc_confirmed_lsn.Set(static_cast<double>(lsn));
    last_status_ = ctx_.clock.Now();
    return true;
  }
  // Nothing settled yet (a first keepalive or batch still on its way): the
  // announcement is renewed, so that the stream does not look stale.
  Status saved = lsn > 0 && covered > 0
                     ? ledger_->SaveStreamProgress({cdc_.slot, ctx_.options.relay_id, lsn, covered})
                     : ledger_->OpenStreamProgress(cdc_.slot, ctx_.options.relay_id);
  if (!saved.ok()) {
    ctx_.metrics.db_errors.Inc();
    ledger_.reset();  // reconnect; the sweepers treat the stream as stale meanwhile
  } else {
    host_.StreamAnnounced();
  }
  ctx_.metrics.cdc_confirmed_lsn.Set(static_cast<double>(lsn));
  last_status_ = ctx_.clock.Now();
  return true;
}

// Waits for every publish in flight and forgets the batches: nothing of
// theirs is recorded or confirmed, so they are read again from the slot (or
// swept); acked copies are absorbed by the inbox.
void StreamPump::DropInFlight() {
  for (Publish& p : in_flight_) {
    if (!p.results.valid()) continue;
    for (const PublishResult& res : p.results.get()) {
      if (res.outcome == PublishOutcome::kAcked) ctx_.metrics.published.Inc();
    }
    if (p.probing) host_.EndBrokerProbe();
  }
  in_flight_.clear();
}

// Ends streaming: what is in flight is dropped (read again from the slot
// later), the marking under way is waited for, the book starts over (parked
// rows are PENDING in the table). True when a stream was open.
bool StreamPump::StopStreaming() {
  DropInFlight();
  (void)CollectMarking(true);
  book_.Restart();
  if (!stream_) return false;
  stream_.reset();
  ctx_.metrics.cdc_streaming.Set(0);
  return true;
}

void StreamPump::CloseStream(const char* why, const Status& st) {
  if (!StopStreaming()) return;
  ctx_.metrics.cdc_restarts.Inc();
  short_sessions_ = ctx_.clock.Now() - opened_at_ < cdc_.stream_stale_after ? short_sessions_ + 1 : 0;
  ctx_.logger.Warn("change stream closed; it reopens at the slot's confirmed position",
                  {{"worker", who_}, {"why", why}, {"error", st.ToString()}});
}

void StreamPump::Pause() {
  host_.SleepFor(backoff_);
  backoff_ = std::min(backoff_ * 2, ctx_.options.db_retry_max);
}

// Stopping: settle what is in flight (its acks are marked), then confirm.
void StreamPump::Finish() {
  while (!in_flight_.empty() && SettleFront() == Step::kGoOn) {
  }
  DropInFlight();
  const bool marked = CollectMarking(true);
  if (stream_ && ledger_ && marked) (void)Report(false);  // spare the next reader what is settled
  ctx_.metrics.cdc_streaming.Set(0);
}

}  // namespace outbox::relay_internal
