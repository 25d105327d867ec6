#include "log_page.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace outbox::pg::log {

int PageLimit(int restarts, int max_attempts, int batch) {
  if (restarts < max_attempts) return batch;
  const int halvings = std::min(restarts - max_attempts + 1, 30);
  return std::max(1, batch >> halvings);
}

bool KillerStandsAlone(int restarts, int max_attempts, int events_then) {
  return restarts >= max_attempts && events_then == 1;
}

void Page::Add(Entry e) {
  e.outcome = Outcome::kOpen;
  entries_[e.pos] = std::move(e);
}

void Page::Hold(Entry e) {
  e.outcome = Outcome::kHeld;
  entries_[e.pos] = std::move(e);
}

const Entry* Page::Find(std::int64_t pos) const {
  auto it = entries_.find(pos);
  return it == entries_.end() ? nullptr : &it->second;
}

bool Page::Settle(std::int64_t pos, Outcome outcome, bool attempt_counts,
                  std::int64_t delay_ms, std::string error) {
  auto it = entries_.find(pos);
  if (it == entries_.end() || it->second.outcome == Outcome::kHeld) {
    return false;
  }
  Entry& e = it->second;
  e.outcome = outcome;
  e.attempt_counts = attempt_counts;
  e.delay_ms = delay_ms;
  e.error = std::move(error);
  return true;
}

void Page::Reopen(std::int64_t pos) {
  auto it = entries_.find(pos);
  if (it != entries_.end() && it->second.outcome != Outcome::kHeld) {
    Entry& e = it->second;
    e.outcome = Outcome::kOpen;
    e.attempt_counts = true;
    e.delay_ms = 0;
    e.error.clear();
  }
}

bool Page::Complete() const {
  return std::none_of(entries_.begin(), entries_.end(),
                      [](const auto& kv) { return kv.second.outcome == Outcome::kOpen; });
}

bool Page::WritesNothing() const {
  bool any_log = false;
  for (const auto& [pos, e] : entries_) {
    if (e.exception) continue;
    any_log = true;
    if (e.outcome != Outcome::kRetry || e.attempt_counts) return false;
  }
  return any_log;
}

std::vector<Entry> Page::Exceptions() const {
  std::vector<Entry> out;
  for (const auto& [pos, e] : entries_) {
    if (!e.exception && e.outcome != Outcome::kSent) out.push_back(e);
  }
  return out;
}

std::int64_t Page::MinDelayMs() const {
  std::int64_t m = std::numeric_limits<std::int64_t>::max();
  for (const auto& [pos, e] : entries_) {
    if (e.outcome == Outcome::kRetry) m = std::min(m, e.delay_ms);
  }
  return m == std::numeric_limits<std::int64_t>::max() ? 0 : m;
}

std::map<std::string, std::int64_t> RunningAt(const RangeEnd& lo,
                                              const std::vector<std::string>& xids) {
  std::map<std::string, std::int64_t> out;
  for (const std::string& x : xids) {
    auto it = lo.running.find(x);
    out[x] = it != lo.running.end() ? it->second : lo.pos_before;
  }
  return out;
}

std::vector<Straggler> Stragglers(const RangeEnd& lo, std::int64_t done_pos) {
  std::vector<Straggler> out;
  for (const auto& [txid, bound] : lo.running) {
    const std::int64_t from = std::max(bound, done_pos);
    if (from < lo.pos_before) out.push_back({txid, from, lo.pos_before});
  }
  return out;
}

void ExceptionLook::RetryAt(TimePoint t) {
  retries_.insert(t);
  if (retries_.size() > kMaxRetries) retries_.erase(std::prev(retries_.end()));
}

void ExceptionLook::Looked(TimePoint now, bool found) {
  at_once_ = found;
  look_at_ = now + kEvery;
  retries_.erase(retries_.begin(), retries_.upper_bound(now));  // due ones were looked for
}

}  // namespace outbox::pg::log
