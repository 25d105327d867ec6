// StreamBook: the change stream's bookkeeping as a pure state machine — the
// batches in flight, the batch being marked, the settled position, the parked
// rows and the commit time the sweepers may rely on. No I/O and no clock of
// its own: the pump (stream.cc) reads the slot, checks rows, publishes and
// marks, and tells the book what happened; the book says what may be
// confirmed and reported. Unit-tested in tests/stream_book_test.cc.
//
// The rules it keeps (docs/design.md, "CDC"):
//   - Batches settle in the order they were read. A batch's position counts
//     only once every earlier batch settled and its own outcomes are recorded
//     (its marks committed): Confirmable() never passes an unsettled row.
//   - Parked rows (checked, not publishable yet) come back before newer rows,
//     in commit order, until they have waited `sweep_after`; then they are
//     the sweeper's. The wait counts from when the batches read before the
//     row have settled: a row behind the stream's own rows in flight waits
//     for them (with several batches in flight, a long transaction's rows
//     wait behind its first ones), not for the sweeper.
//   - Neither the slot's position nor the commit time reported to the
//     sweepers passes a parked row (checked, meant to be published later),
//     nor — once it is checked again and published — until the batch it went
//     out in has its marks recorded: the sweepers take only rows committed
//     before both, so they do not race the stream for it (that made copies
//     of a long transaction's rows with several batches in flight), and a new
//     stream reads it again. A row given up (sweep_after, max_parked) holds
//     nothing.
//   - Restart() (a new stream, an outage, a failed mark) forgets everything
//     but nothing else: what was not settled is read again from the slot.
//
// Thread-safety: not thread-safe; the stream thread owns it.
#ifndef OUTBOX_SRC_RELAY_STREAM_BOOK_H_
#define OUTBOX_SRC_RELAY_STREAM_BOOK_H_

#include <chrono>
#include <cstdint>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

#include "outbox/event.h"
#include "outbox/store.h"

namespace outbox::relay_internal {

class StreamBook {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Limits {
    std::size_t max_in_flight = 1;  // batches whose publish may be in flight
    std::size_t park_bound = 500;   // settle before reading on once this many are parked
    std::size_t max_parked = 2000;  // rows past it go to the sweeper at once
    std::chrono::nanoseconds sweep_after{std::chrono::seconds(5)};
  };

  explicit StreamBook(Limits limits) : limits_(limits) {}

  // --- Reading ---

  // A batch arrived at `received_at` with `fresh` decoded rows. Returns the
  // rows to check: the parked ones still within sweep_after (first, with the
  // wait since their last check added to age_at_claim), then `fresh`.
  // *expired counts the parked rows given up to the sweeper.
  std::vector<ClaimedEvent> ToCheck(std::vector<ClaimedEvent> fresh, TimePoint received_at,
                                    std::size_t* expired);
  // True when the check must run: new rows came, something settled since the
  // last check, or nothing is in flight. Otherwise the parked rows' answers
  // cannot have changed (they wait for rows in flight).
  bool NeedsCheck(bool fresh_rows);
  // The check's verdict: `rows` are parked (kept from an earlier park, their
  // first park time). Returns how many went to the sweeper over max_parked.
  // REQUIRES: ToCheck() since the last Park() (the parked rows were taken).
  std::size_t Park(std::vector<ClaimedEvent> rows, TimePoint now, TimePoint received_at);
  std::size_t parked_count() const { return parked_.size(); }
  // Rows the stream's check must not count as holding their aggregates: the
  // marking batch's acked rows, on their way to SENT.
  const std::vector<std::int64_t>& acked_unmarked() const { return acked_unmarked_; }

  // --- The pipeline ---

  // A checked batch joins the pipeline (`published`: rows went to the broker).
  // Its position (lsn, covered; 0 = none) counts once it settles.
  void Dispatched(std::uint64_t lsn, std::int64_t covered_us, bool published);
  std::size_t in_flight() const { return in_flight_.size(); }
  // Whether to settle the front batch now: the pipeline is full, a batch's
  // worth of rows is parked (reading on would only park more), or its acks
  // are in (`front_ready`).
  bool ShouldSettle(bool front_ready) const;
  // The front batch settled with nothing to mark (nothing published): its
  // position is reached.
  void SettledEmpty();
  // The front batch's acks were planned; `sent` go to SENT. REQUIRES: no
  // marking under way (MarkingDone first). The marking starts; the batch's
  // position counts once it is recorded.
  void MarkingStarted(std::span<const Ticket> sent);
  bool marking() const { return marking_; }
  // The marking ended: recorded (the position it waited for is settled), or
  // not (nothing of it counts, and its rows keep holding: the caller
  // restarts the stream).
  void MarkingDone(bool recorded);

  // --- Positions ---

  // The slot may be confirmed up to here: every batch up to it is settled,
  // and no parked row lies past it (0 = nothing yet).
  std::uint64_t Confirmable() const;
  // Database time up to which every commit is settled, held likewise before
  // the oldest parked row (0 = nothing to report).
  std::int64_t Covered() const;

  // Forgets the pipeline, the marking, the parked rows and the positions:
  // a new stream starts at the slot's confirmed position. A marking under
  // way must have been waited for by the caller.
  void Restart();

 private:
  // Positions that stay at or before these (none: the largest values).
  struct Hold {
    std::uint64_t lsn = UINT64_MAX;
    std::int64_t covered = INT64_MAX;
    void Add(const Hold& h) {
      lsn = std::min(lsn, h.lsn);
      covered = std::min(covered, h.covered);
    }
  };
  struct Batch {
    std::uint64_t lsn = 0;
    std::int64_t covered = 0;
    bool published = false;
    Hold hold;  // of the once-parked rows checked in it, until its marks are recorded
  };
  struct ParkedRow {
    std::uint64_t behind = 0;  // the batches read before it (their count)
    bool waiting = false;      // those have settled: its wait counts from `since`
    TimePoint since;
    TimePoint seen;  // arrival of the batch it was last checked in
    Hold hold;       // what was read before it was first parked
  };
  void Reach(std::uint64_t lsn, std::int64_t covered);
  Hold Held() const;  // every hold at once

  const Limits limits_;
  std::deque<Batch> in_flight_;
  bool marking_ = false;
  std::uint64_t after_mark_lsn_ = 0;  // reached once the marking is recorded
  std::int64_t after_mark_covered_ = 0;
  std::vector<std::int64_t> acked_unmarked_;
  Hold checking_;      // the parked rows taken into the check under way
  Hold marking_hold_;  // the marking batch's
  std::uint64_t settled_lsn_ = 0;
  std::int64_t settled_covered_ = 0;
  std::uint64_t read_lsn_ = 0;  // the furthest position read (dispatched)
  std::int64_t read_covered_ = 0;
  bool settled_since_check_ = true;
  std::uint64_t dispatched_ = 0, settled_ = 0;  // batches, since the last restart
  std::vector<ClaimedEvent> parked_;
  std::map<std::int64_t, ParkedRow> park_info_;  // by seq
};

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_STREAM_BOOK_H_
