#include "stream_book.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace outbox::relay_internal {

std::vector<ClaimedEvent> StreamBook::ToCheck(std::vector<ClaimedEvent> fresh,
                                              TimePoint received_at, std::size_t* expired) {
  *expired = 0;
  checking_ = Hold{};
  if (parked_.empty()) return fresh;
  std::vector<ClaimedEvent> rows;
  rows.reserve(parked_.size() + fresh.size());
  for (ClaimedEvent& e : parked_) {
    auto it = park_info_.find(e.ticket.seq);
    assert(it != park_info_.end());
    if (it == park_info_.end()) continue;
    if (it->second.waiting && received_at - it->second.since >= limits_.sweep_after) {
      ++*expired;
      park_info_.erase(it);
      continue;
    }
    // Its commit-to-ack time counts the wait since the batch it was last
    // checked in (this batch's claim-to-ack starts at this batch's arrival).
    e.age_at_claim += std::chrono::duration_cast<std::chrono::microseconds>(received_at - it->second.seen);
    checking_.Add(it->second.hold);
    rows.push_back(std::move(e));
  }
  parked_.clear();
  for (ClaimedEvent& e : fresh) rows.push_back(std::move(e));
  return rows;
}

bool StreamBook::NeedsCheck(bool fresh_rows) {
  const bool check = fresh_rows || settled_since_check_ || in_flight_.empty();
  if (check) settled_since_check_ = false;
  return check;
}

std::size_t StreamBook::Park(std::vector<ClaimedEvent> rows, TimePoint now, TimePoint received_at) {
  assert(parked_.empty());
  std::map<std::int64_t, ParkedRow> info;
  std::size_t over = 0;
  for (ClaimedEvent& e : rows) {
    if (parked_.size() >= limits_.max_parked) {
      ++over;
      continue;
    }
    ParkedRow r{.behind = dispatched_,
                .waiting = false,
                .since = now,
                .seen = received_at,
                .hold = Hold{.lsn = read_lsn_, .covered = read_covered_}};
    if (auto it = park_info_.find(e.ticket.seq); it != park_info_.end()) {
      r = it->second;
      r.seen = received_at;
    }
    if (!r.waiting && settled_ >= r.behind) {
      r.waiting = true;
      r.since = now;
    }
    info[e.ticket.seq] = r;
    parked_.push_back(std::move(e));
  }
  park_info_ = std::move(info);
  return over;
}

void StreamBook::Dispatched(std::uint64_t lsn, std::int64_t covered_us, bool published) {
  in_flight_.push_back(Batch{.lsn = lsn, .covered = covered_us, .published = published, .hold = checking_});
  checking_ = Hold{};
  ++dispatched_;
  read_lsn_ = std::max(read_lsn_, lsn);
  read_covered_ = std::max(read_covered_, covered_us);
}

bool StreamBook::ShouldSettle(bool front_ready) const {
  if (in_flight_.empty()) return false;
  return in_flight_.size() >= limits_.max_in_flight || parked_.size() >= limits_.park_bound ||
         front_ready;
}

void StreamBook::SettledEmpty() {
  assert(!in_flight_.empty());
  const Batch b = in_flight_.front();
  in_flight_.pop_front();
  ++settled_;
  settled_since_check_ = true;
  Reach(b.lsn, b.covered);
}

void StreamBook::MarkingStarted(std::span<const Ticket> sent) {
  assert(!in_flight_.empty() && !marking_);
  const Batch b = in_flight_.front();
  in_flight_.pop_front();
  ++settled_;
  settled_since_check_ = true;
  marking_ = true;
  marking_hold_.Add(b.hold);
  acked_unmarked_.clear();
  for (const Ticket& t : sent) acked_unmarked_.push_back(t.seq);
  Reach(b.lsn, b.covered);
}

void StreamBook::MarkingDone(bool recorded) {
  if (!marking_) return;
  marking_ = false;
  acked_unmarked_.clear();
  if (recorded) {
    marking_hold_ = Hold{};
    settled_lsn_ = std::max(settled_lsn_, after_mark_lsn_);
    settled_covered_ = std::max(settled_covered_, after_mark_covered_);
  }
  after_mark_lsn_ = 0;
  after_mark_covered_ = 0;
}

void StreamBook::Reach(std::uint64_t lsn, std::int64_t covered) {
  if (marking_) {
    after_mark_lsn_ = std::max(after_mark_lsn_, lsn);
    after_mark_covered_ = std::max(after_mark_covered_, covered);
  } else {
    settled_lsn_ = std::max(settled_lsn_, lsn);
    settled_covered_ = std::max(settled_covered_, covered);
  }
}

StreamBook::Hold StreamBook::Held() const {
  Hold h = checking_;
  h.Add(marking_hold_);
  for (const Batch& b : in_flight_) h.Add(b.hold);
  for (const auto& [seq, r] : park_info_) h.Add(r.hold);
  return h;
}

std::uint64_t StreamBook::Confirmable() const { return std::min(settled_lsn_, Held().lsn); }

std::int64_t StreamBook::Covered() const { return std::min(settled_covered_, Held().covered); }

void StreamBook::Restart() {
  in_flight_.clear();
  marking_ = false;
  after_mark_lsn_ = 0;
  after_mark_covered_ = 0;
  acked_unmarked_.clear();
  checking_ = Hold{};
  marking_hold_ = Hold{};
  settled_lsn_ = 0;
  settled_covered_ = 0;
  read_lsn_ = 0;
  read_covered_ = 0;
  settled_since_check_ = true;
  dispatched_ = 0;
  settled_ = 0;
  parked_.clear();
  park_info_.clear();
}

}  // namespace outbox::relay_internal
