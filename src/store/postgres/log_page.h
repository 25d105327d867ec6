// The log store's decisions about one claim, pure (no database, no clock):
// which of its events are still open, what its end writes, and how many events
// a slot in a crash loop may hand out. The store (log_store.cc) does the SQL.
// Internal to src/store/postgres.
//
// A claim reads a page of each slot it holds: the events its slot's range
// (visible in hi, not in lo) has after done_pos, in pos order. Every event the
// page handed out must be settled (sent, retried, failed) before the page
// ends; the end then writes, in one statement fenced by the slots' tokens, the
// exception rows (a copy of each event that failed, is retried, or was read
// while an earlier event of its aggregate was an exception) and each slot's
// new position. A page whose events were all given back without counting an
// attempt (the broker was unreachable) writes nothing: the position stays and
// the same events are read again.
//
// Thread-safety: a Page is a value; not safe for concurrent use.
#ifndef OUTBOX_SRC_STORE_POSTGRES_LOG_PAGE_H_
#define OUTBOX_SRC_STORE_POSTGRES_LOG_PAGE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace outbox::pg::log {

// Events one slot hands out per page: `batch`, or, once its holders have died
// `max_attempts` times without moving its position (a crash loop), half as many
// with each further death, down to 1.
int PageLimit(int restarts, int max_attempts, int batch);

// Whether the first event of a slot's range is the one that kills its
// relays: the slot is in a crash loop and the page its last holder died in
// held that event alone (`events_then`: how many events the range has up to
// the previous death's limit, counted by the caller). It then becomes FAILED,
// as max_attempts does in the row store.
bool KillerStandsAlone(int restarts, int max_attempts, int events_then);

enum class Outcome { kOpen, kSent, kRetry, kFailed, kHeld };

struct Entry {
  std::int64_t pos = 0;
  int slot = 0;
  std::string txid;        // the log row's transaction
  bool exception = false;  // handed out from the exceptions table, not the log
  int attempts = 1;  // handed out this many times (a log event: its slot's restarts + 1)
  Outcome outcome = Outcome::kOpen;
  bool attempt_counts = true;  // kRetry: whether the attempt counts
  std::int64_t delay_ms = 0;   // kRetry: next attempt after this
  std::string error;           // kRetry, kFailed
};

// One end of a slot's range (docs/design.md, "The read in pos order"): a
// snapshot (text), and what bounds a read of the log by pos at it — the pos
// sequence's last value read before the snapshot (`pos_before`: the lo_pos of
// the range it begins), the value read after it (`pos_after`: no event visible
// in it has a higher pos; none: no such bound, a range an earlier build opened),
// and the transactions that may be running at it with events drawn before
// pos_before (`running`: xid → the pos after which its events lie).
struct RangeEnd {
  std::string snapshot;
  std::int64_t pos_before = 0;
  std::optional<std::int64_t> pos_after;
  std::map<std::string, std::int64_t> running;
};

// The `running` of a new upper end whose transactions that may be running are
// `xids`, for a range beginning at `lo`: each keeps lo's bound for it, or else
// lo's pos_before (it got its id after lo's, so drew every pos after it).
std::map<std::string, std::int64_t> RunningAt(const RangeEnd& lo,
                                              const std::vector<std::string>& xids);

// A straggler's span to read: the events of `txid` with pos in (from, to].
struct Straggler {
  std::string txid;
  std::int64_t from = 0;
  std::int64_t to = 0;
};

// The stragglers of a range beginning at `lo` whose pos done so far is
// `done_pos`: lo's running transactions whose span (bound, lo's pos_before],
// after done_pos, is not empty (which of them ended visible in hi, the read
// decides).
std::vector<Straggler> Stragglers(const RangeEnd& lo, std::int64_t done_pos);

// Where a slot's page ends: its range's upper end, and either the
// last pos done within the range or, when the range is done, lo = hi.
struct SlotCut {
  int slot = 0;
  std::int64_t token = 0;
  RangeEnd hi;
  std::int64_t done_pos = 0;
  bool range_done = false;
  bool reset =
      false;  // the slot's restart count goes back to 0 (it is not in a crash loop)
};

class Page {
 public:
  // An event the claim hands out, or one it keeps back as HELD.
  void Add(Entry e);
  void Hold(Entry e);
  void Cut(SlotCut c) { cuts_.push_back(std::move(c)); }

  bool Empty() const { return entries_.empty() && cuts_.empty(); }
  bool Has(std::int64_t pos) const { return entries_.count(pos) > 0; }
  const Entry* Find(std::int64_t pos) const;

  // Settles a handed-out event (an exception event's row is settled in the
  // database at once; the page only notes it). False when the page does not
  // have it, or holds it back.
  bool Settle(std::int64_t pos, Outcome outcome, bool attempt_counts = true,
              std::int64_t delay_ms = 0, std::string error = {});

  // A settled event back to open (the statement that recorded it failed).
  void Reopen(std::int64_t pos);
  // Every handed-out event is settled: the end may be written.
  bool Complete() const;
  // Nothing was sent, failed or held, and no retry counted an attempt: the end
  // writes nothing (a broker outage; the same events are read again).
  bool WritesNothing() const;
  // The log events to copy into the exceptions table at the end, in pos order.
  std::vector<Entry> Exceptions() const;
  const std::vector<SlotCut>& cuts() const { return cuts_; }
  // The smallest delay asked by a retry (for a page that writes nothing).
  std::int64_t MinDelayMs() const;

 private:
  std::map<std::int64_t, Entry> entries_;  // by pos
  std::vector<SlotCut> cuts_;
};

// When a claim looks for due exceptions of its slots (a statement of its own,
// about a third of a claim's time on the log): only when one can be due as far
// as the store knows — it wrote or settled one, took a slot over, found some
// at its last look, a retry it wrote comes due — and at least every kEvery for
// what others did (an operator's replay, an exception a dead holder left in
// flight). The times are the caller's clock; a value, not thread-safe.
class ExceptionLook {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // How late a replay by another process (outboxctl) is seen, at most.
  static constexpr std::chrono::milliseconds kEvery{1000};

  bool Due(TimePoint now) const {
    return at_once_ || now >= look_at_ || (!retries_.empty() && now >= *retries_.begin());
  }
  // A look ran at `now`; `found`: it handed something out (more may follow).
  void Looked(TimePoint now, bool found);
  // Something may be due at once (a slot taken, a follower released, a replay).
  void AtOnce() { at_once_ = true; }
  // A retry this store wrote or settled is due at `t`. The kMaxRetries earliest
  // are kept: a later one is found by the look every kEvery.
  void RetryAt(TimePoint t);
  static constexpr std::size_t kMaxRetries = 256;

 private:
  bool at_once_ = true;
  TimePoint look_at_{};
  std::multiset<TimePoint> retries_;
};

}  // namespace outbox::pg::log

#endif  // OUTBOX_SRC_STORE_POSTGRES_LOG_PAGE_H_
