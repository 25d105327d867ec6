// The change stream's bookkeeping (src/relay/stream_book.h), without a
// database, a slot or a broker: the order of batches and rows, the positions
// that may be confirmed and reported, restarts at every step.
#include "stream_book.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>

namespace outbox::relay_internal {
namespace {

using std::chrono::milliseconds;
using TimePoint = StreamBook::TimePoint;

const TimePoint kT0 = TimePoint() + std::chrono::hours(1);

ClaimedEvent Row(std::int64_t seq) {
  ClaimedEvent e;
  e.ticket = {seq, 0};
  e.event.aggregate_id = "a" + std::to_string(seq % 3);
  return e;
}

std::vector<ClaimedEvent> Rows(std::initializer_list<std::int64_t> seqs) {
  std::vector<ClaimedEvent> v;
  for (std::int64_t s : seqs) v.push_back(Row(s));
  return v;
}

std::vector<std::int64_t> Seqs(const std::vector<ClaimedEvent>& v) {
  std::vector<std::int64_t> s;
  for (const auto& e : v) s.push_back(e.ticket.seq);
  return s;
}

StreamBook::Limits Lim(std::size_t in_flight = 4) {
  StreamBook::Limits l;
  l.max_in_flight = in_flight;
  l.park_bound = 3;
  l.max_parked = 5;
  l.sweep_after = milliseconds(1000);
  return l;
}

TEST(StreamBook, BatchesSettleInTheOrderTheyWereRead) {
  StreamBook b(Lim());
  b.Dispatched(100, 10, false);
  b.Dispatched(200, 20, true);
  b.Dispatched(300, 30, false);
  EXPECT_EQ(b.Confirmable(), 0u) << "nothing settled yet";
  b.SettledEmpty();
  EXPECT_EQ(b.Confirmable(), 100u);
  EXPECT_EQ(b.Covered(), 10);
  const std::vector<Ticket> sent = {{7, 0}};
  b.MarkingStarted(sent);
  EXPECT_EQ(b.acked_unmarked(), std::vector<std::int64_t>{7}) << "acked rows do not hold their aggregates";
  b.SettledEmpty();  // the next batch settles while the previous one is marked
  EXPECT_EQ(b.Confirmable(), 100u) << "not past a batch whose marks are not recorded";
  EXPECT_EQ(b.Covered(), 10);
  b.MarkingDone(true);
  EXPECT_EQ(b.Confirmable(), 300u) << "both positions count once the marks are recorded";
  EXPECT_EQ(b.Covered(), 30);
  EXPECT_TRUE(b.acked_unmarked().empty());
}

TEST(StreamBook, AMarkingThatWasNotRecordedConfirmsNothingOfItsBatch) {
  StreamBook b(Lim());
  b.Dispatched(100, 10, false);
  b.SettledEmpty();
  b.Dispatched(200, 20, true);
  b.Dispatched(300, 30, false);
  const std::vector<Ticket> sent = {{7, 0}, {8, 0}};
  b.MarkingStarted(sent);
  b.SettledEmpty();
  b.MarkingDone(false);
  EXPECT_EQ(b.Confirmable(), 100u) << "the batch is read again from the slot";
  EXPECT_EQ(b.Covered(), 10);
  EXPECT_TRUE(b.acked_unmarked().empty()) << "its rows hold their aggregates again";
}

TEST(StreamBook, APositionInsideATransactionIsNoPosition) {
  StreamBook b(Lim());
  b.Dispatched(100, 10, false);
  b.SettledEmpty();
  b.Dispatched(0, 0, true);  // the first half of a large transaction
  b.MarkingStarted({});
  b.MarkingDone(true);
  EXPECT_EQ(b.Confirmable(), 100u);
  EXPECT_EQ(b.Covered(), 10);
}

TEST(StreamBook, AParkedRowHoldsTheSlotAndTheSweepersHorizonUntilItsMarkIsRecorded) {
  StreamBook b(Lim());
  b.Dispatched(100, 10, false);
  b.SettledEmpty();
  // Batch 2 (lsn 200): row 5 waits for an earlier event of its aggregate.
  std::size_t expired = 0;
  auto rows = b.ToCheck(Rows({5, 6}), kT0, &expired);
  EXPECT_EQ(b.Park(Rows({5}), kT0, kT0), 0u);
  b.Dispatched(200, 20, true);
  b.MarkingStarted({});
  b.MarkingDone(true);
  b.Dispatched(300, 30, false);
  b.SettledEmpty();
  EXPECT_EQ(b.Confirmable(), 100u) << "a new stream must read row 5 again";
  EXPECT_EQ(b.Covered(), 10) << "a sweeper must not take row 5 while the stream means to publish it";
  // Checked again: publishable now, in batch 4 (lsn 400).
  rows = b.ToCheck({}, kT0 + milliseconds(10), &expired);
  EXPECT_EQ(Seqs(rows), std::vector<std::int64_t>{5});
  EXPECT_EQ(b.Park({}, kT0 + milliseconds(10), kT0 + milliseconds(10)), 0u);
  EXPECT_EQ(b.Confirmable(), 100u) << "being checked";
  b.Dispatched(400, 40, true);
  EXPECT_EQ(b.Confirmable(), 100u) << "published, not acked";
  EXPECT_EQ(b.Covered(), 10);
  const std::vector<Ticket> sent = {{5, 0}};
  b.MarkingStarted(sent);
  EXPECT_EQ(b.Confirmable(), 100u) << "acked, its mark not recorded";
  b.MarkingDone(true);
  EXPECT_EQ(b.Confirmable(), 400u);
  EXPECT_EQ(b.Covered(), 40);
}

// Position 100 settled; row 5 parked in batch 200 (nothing published), which settled.
void ParkRow5(StreamBook& b) {
  b.Dispatched(100, 10, false);
  b.SettledEmpty();
  std::size_t expired = 0;
  (void)b.ToCheck(Rows({5}), kT0, &expired);
  b.Park(Rows({5}), kT0, kT0);
  b.Dispatched(200, 20, false);
  b.SettledEmpty();
}

TEST(StreamBook, ARowCheckedAgainAndNotPublishedHoldsUntilItsBatchSettles) {
  StreamBook b(Lim());
  ParkRow5(b);
  std::size_t expired = 0;
  // Checked again: a sweeper took it meanwhile (left to the sweeper): nothing
  // published, the batch settles at once and the hold goes with it.
  (void)b.ToCheck({}, kT0 + milliseconds(10), &expired);
  b.Park({}, kT0 + milliseconds(10), kT0 + milliseconds(10));
  b.Dispatched(300, 30, false);
  EXPECT_EQ(b.Confirmable(), 100u);
  b.SettledEmpty();
  EXPECT_EQ(b.Confirmable(), 300u);
}

TEST(StreamBook, AMarkingNotRecordedKeepsItsRowsHoldingUntilTheRestart) {
  StreamBook b(Lim());
  ParkRow5(b);
  std::size_t expired = 0;
  (void)b.ToCheck({}, kT0, &expired);
  b.Park({}, kT0, kT0);
  b.Dispatched(300, 30, true);
  b.MarkingStarted({});
  b.MarkingDone(false);
  EXPECT_EQ(b.Confirmable(), 100u) << "row 5 was published, its mark not recorded";
  b.Restart();
  EXPECT_EQ(b.Confirmable(), 0u);
}

TEST(StreamBook, ParkedRowsComeBackFirstInCommitOrderWithTheirWaitCounted) {
  StreamBook b(Lim());
  std::size_t expired = 0;
  auto rows = b.ToCheck(Rows({1, 2, 3}), kT0, &expired);
  b.Park(Rows({2, 3}), kT0, kT0);
  b.Dispatched(100, 10, true);
  rows = b.ToCheck(Rows({4, 5}), kT0 + milliseconds(40), &expired);
  EXPECT_EQ(Seqs(rows), (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(expired, 0u);
  EXPECT_EQ(rows[0].age_at_claim, std::chrono::microseconds(40'000));
  EXPECT_EQ(rows[2].age_at_claim, std::chrono::microseconds(0));
}

TEST(StreamBook, ARowParkedLongerThanSweepAfterIsTheSweepersAndHoldsNothing) {
  StreamBook b(Lim());
  std::size_t expired = 0;
  (void)b.ToCheck(Rows({5}), kT0, &expired);
  b.Park(Rows({5}), kT0, kT0);
  b.Dispatched(200, 20, false);
  // Parked again and again: the time counts from the first park.
  for (int i = 1; i <= 3; ++i) {
    const TimePoint t = kT0 + milliseconds(300 * i);
    auto rows = b.ToCheck({}, t, &expired);
    ASSERT_EQ(Seqs(rows), std::vector<std::int64_t>{5});
    b.Park(std::move(rows), t, t);
  }
  b.SettledEmpty();
  EXPECT_EQ(b.Confirmable(), 0u);
  auto rows = b.ToCheck({}, kT0 + milliseconds(1000), &expired);
  EXPECT_TRUE(rows.empty());
  EXPECT_EQ(expired, 1u);
  EXPECT_EQ(b.parked_count(), 0u);
  EXPECT_EQ(b.Confirmable(), 200u) << "given up, it holds nothing";
  EXPECT_EQ(b.Covered(), 20);
}

TEST(StreamBook, TheWaitBehindTheStreamsOwnBatchesInFlightDoesNotCount) {
  StreamBook b(Lim());
  b.Dispatched(100, 10, true);  // row 1 of a long transaction, in flight
  std::size_t expired = 0;
  (void)b.ToCheck(Rows({2, 3}), kT0, &expired);
  b.Park(Rows({2, 3}), kT0, kT0);  // behind row 1
  b.Dispatched(200, 20, false);
  // The first batch's publish takes 5 s (a slow broker): no sweep_after yet.
  auto rows = b.ToCheck({}, kT0 + milliseconds(5000), &expired);
  EXPECT_EQ(expired, 0u);
  ASSERT_EQ(Seqs(rows), (std::vector<std::int64_t>{2, 3}));
  b.Park(std::move(rows), kT0 + milliseconds(5000), kT0 + milliseconds(5000));
  b.MarkingStarted({});  // row 1 settles; the wait starts at the next check
  rows = b.ToCheck({}, kT0 + milliseconds(5100), &expired);
  EXPECT_EQ(expired, 0u);
  b.Park(std::move(rows), kT0 + milliseconds(5100), kT0 + milliseconds(5100));
  rows = b.ToCheck({}, kT0 + milliseconds(6000), &expired);
  EXPECT_EQ(expired, 0u) << "900 ms of its own wait";
  b.Park(std::move(rows), kT0 + milliseconds(6000), kT0 + milliseconds(6000));
  rows = b.ToCheck({}, kT0 + milliseconds(6100), &expired);
  EXPECT_EQ(expired, 2u) << "1,000 ms: the sweeper's";
  EXPECT_TRUE(rows.empty());
}

TEST(StreamBook, RowsPastMaxParkedGoToTheSweeperAtOnce) {
  StreamBook b(Lim());
  EXPECT_EQ(b.Park(Rows({1, 2, 3, 4, 5, 6, 7}), kT0, kT0), 2u);
  EXPECT_EQ(b.parked_count(), 5u);
}

TEST(StreamBook, TheCheckRunsAgainOnlyWhenItsAnswerCanHaveChanged) {
  StreamBook b(Lim());
  EXPECT_TRUE(b.NeedsCheck(false)) << "nothing in flight";
  b.Dispatched(100, 10, true);
  EXPECT_FALSE(b.NeedsCheck(false)) << "nothing new, nothing settled";
  EXPECT_TRUE(b.NeedsCheck(true)) << "new rows";
  b.MarkingStarted({});
  EXPECT_TRUE(b.NeedsCheck(false)) << "a batch settled";
}

TEST(StreamBook, ItSettlesWhenThePipelineIsFullOrABatchWorthIsParked) {
  StreamBook b(Lim(2));
  EXPECT_FALSE(b.ShouldSettle(true)) << "nothing in flight";
  b.Dispatched(100, 10, true);
  EXPECT_FALSE(b.ShouldSettle(false));
  EXPECT_TRUE(b.ShouldSettle(true)) << "its acks are in";
  b.Park(Rows({1, 2, 3}), kT0, kT0);
  EXPECT_TRUE(b.ShouldSettle(false)) << "a batch's worth parked";
  std::size_t expired = 0;
  (void)b.ToCheck({}, kT0, &expired);
  b.Park({}, kT0, kT0);
  ASSERT_EQ(b.parked_count(), 0u);
  EXPECT_FALSE(b.ShouldSettle(false));
  b.Dispatched(200, 20, true);
  EXPECT_TRUE(b.ShouldSettle(false)) << "the pipeline is full";
}

// A restart (a new stream, an outage, a mark not recorded) after any number of
// steps leaves nothing behind, and the next stream's positions are its own.
TEST(StreamBook, ARestartAtEveryStepForgetsEverything) {
  const std::vector<Ticket> sent = {{1, 0}};
  std::vector<std::function<void(StreamBook&)>> steps = {
      [](StreamBook& b) { b.Dispatched(100, 10, false); },
      [](StreamBook& b) { b.Park(Rows({3}), kT0, kT0); },
      [](StreamBook& b) { b.Dispatched(200, 20, true); },
      [](StreamBook& b) { b.SettledEmpty(); },
      [&](StreamBook& b) { b.MarkingStarted(sent); },
      [](StreamBook& b) { b.MarkingDone(true); },
      [](StreamBook& b) {
        std::size_t x = 0;
        b.Park(b.ToCheck({}, kT0, &x), kT0, kT0);
      },
  };
  for (std::size_t k = 0; k <= steps.size(); ++k) {
    StreamBook b(Lim());
    for (std::size_t i = 0; i < k; ++i) steps[i](b);
    b.Restart();
    EXPECT_EQ(b.Confirmable(), 0u) << k;
    EXPECT_EQ(b.Covered(), 0) << k;
    EXPECT_EQ(b.in_flight(), 0u) << k;
    EXPECT_EQ(b.parked_count(), 0u) << k;
    EXPECT_FALSE(b.marking()) << k;
    EXPECT_TRUE(b.acked_unmarked().empty()) << k;
    b.Dispatched(50, 5, false);
    b.SettledEmpty();
    EXPECT_EQ(b.Confirmable(), 50u) << k;
    EXPECT_EQ(b.Covered(), 5) << k;
  }
}

// Random runs against the invariants, stated without the book's own state:
// the confirmable position is never at or past a batch that is read and not
// recorded, nor at or past the batch a parked row came in; it never moves
// back between restarts; and once everything is recorded and nothing is
// parked, it is the last position read.
TEST(StreamBook, RandomRunsNeverConfirmPastAnUnsettledRow) {
  std::mt19937 rng(20261202);
  for (int run = 0; run < 300; ++run) {
    StreamBook b(Lim(1 + rng() % 4));
    struct Read {
      std::uint64_t lsn;
      bool published;
      std::uint64_t hold;  // rows once parked, checked in it: the limit they keep (0 = none)
    };
    std::deque<Read> in_flight;             // read, not settled
    std::vector<std::uint64_t> unrecorded;  // settled into a marking not yet recorded
    std::map<std::int64_t, std::uint64_t> parked;  // seq -> lsn of the batch it came in
    std::vector<std::uint64_t> marking_holds;      // of the batch being marked
    std::uint64_t lsn = 0, last_confirmable = 0, last_read = 0;
    std::int64_t seq = 0;
    TimePoint now = kT0;
    for (int step = 0; step < 60; ++step) {
      const int what = static_cast<int>(rng() % 7);
      if (what == 0 && in_flight.size() < 4) {  // read a batch; some rows parked
        std::vector<ClaimedEvent> fresh;
        for (int i = static_cast<int>(rng() % 3); i > 0; --i) fresh.push_back(Row(++seq));
        std::size_t expired = 0;
        auto rows = b.ToCheck(std::move(fresh), now, &expired);
        std::vector<ClaimedEvent> park;
        for (auto& e : rows) {
          if (rng() % 2) park.push_back(e);
        }
        const std::uint64_t batch_lsn = (rng() % 4 == 0) ? 0 : (lsn += 100);
        std::map<std::int64_t, std::uint64_t> still;
        std::set<std::int64_t> parked_again;
        for (const auto& e : park) parked_again.insert(e.ticket.seq);
        std::uint64_t hold = 0;  // rows leaving the park into this batch keep their limit
        for (const auto& e : rows) {
          auto it = parked.find(e.ticket.seq);
          if (it == parked.end() || parked_again.count(e.ticket.seq)) continue;
          hold = hold == 0 ? it->second : std::min(hold, it->second);
        }
        for (const auto& e : park) {
          still[e.ticket.seq] = parked.count(e.ticket.seq) ? parked[e.ticket.seq] : (batch_lsn ? batch_lsn : lsn + 1);
        }
        if (b.Park(std::move(park), now, now) > 0) {
          // over max_parked: the last ones are the sweeper's
          while (still.size() > b.parked_count()) still.erase(std::prev(still.end()));
        }
        parked = still;
        const bool published = rng() % 2;
        b.Dispatched(batch_lsn, static_cast<std::int64_t>(batch_lsn), published);
        in_flight.push_back({batch_lsn, published, hold});
        if (batch_lsn) last_read = batch_lsn;
      } else if (what == 1 && !in_flight.empty() && !in_flight.front().published) {
        b.SettledEmpty();
        if (b.marking()) unrecorded.push_back(in_flight.front().lsn);
        in_flight.pop_front();
      } else if (what == 2 && !in_flight.empty() && in_flight.front().published && !b.marking()) {
        b.MarkingStarted({});
        unrecorded.push_back(in_flight.front().lsn);
        if (in_flight.front().hold) marking_holds.push_back(in_flight.front().hold);
        in_flight.pop_front();
      } else if (what == 3 && b.marking()) {
        const bool ok = rng() % 5 != 0;
        b.MarkingDone(ok);
        unrecorded.clear();
        marking_holds.clear();
        if (!ok) {
          b.Restart();
          in_flight.clear();
          parked.clear();
          last_confirmable = 0;
          last_read = 0;
        }
      } else if (what == 4) {
        b.Restart();
        in_flight.clear();
        unrecorded.clear();
        marking_holds.clear();
        parked.clear();
        last_confirmable = 0;
        last_read = 0;
      } else if (what == 5) {
        now += milliseconds(400);
      }
      const std::uint64_t c = b.Confirmable();
      for (const Read& r : in_flight) {
        if (r.lsn) {
          ASSERT_LT(c, r.lsn) << "run " << run << " step " << step << ": past a batch in flight";
        }
        if (r.hold) {
          ASSERT_LT(c, r.hold) << "run " << run << " step " << step << ": past a row once parked, in flight";
        }
      }
      for (std::uint64_t h : marking_holds) {
        ASSERT_LT(c, h) << "run " << run << " step " << step << ": past a row once parked, being marked";
      }
      for (std::uint64_t u : unrecorded) {
        if (u) {
          ASSERT_LT(c, u) << "run " << run << " step " << step << ": past a batch not recorded";
        }
      }
      for (const auto& [s, l] : parked) {
        ASSERT_LT(c, l) << "run " << run << " step " << step << ": past parked row " << s;
      }
      ASSERT_GE(c, last_confirmable) << "run " << run << " step " << step << ": moved back";
      ASSERT_EQ(b.Covered(), static_cast<std::int64_t>(c)) << "run " << run << " step " << step;
      last_confirmable = c;
    }
    // Drain: settle and record everything, then publish every parked row.
    while (!in_flight.empty()) {
      if (b.marking()) b.MarkingDone(true);
      if (in_flight.front().published) {
        b.MarkingStarted({});
      } else {
        b.SettledEmpty();
      }
      in_flight.pop_front();
    }
    b.MarkingDone(true);
    std::size_t expired = 0;
    (void)b.ToCheck({}, now, &expired);
    b.Park({}, now, now);
    b.Dispatched(0, 0, true);  // the once-parked rows go out, and are marked
    b.MarkingStarted({});
    b.MarkingDone(true);
    EXPECT_EQ(b.Confirmable(), last_read) << "run " << run << ": all recorded, nothing parked";
  }
}

}  // namespace
}  // namespace outbox::relay_internal
