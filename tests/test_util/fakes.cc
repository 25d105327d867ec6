#include "fakes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace outbox::test_util {

std::cv_status FakeClock::WaitUntil(std::condition_variable& cv,
                                    std::unique_lock<std::mutex>& lock, time_point until) {
  if (Now() >= until) return std::cv_status::timeout;
  cv.wait_for(lock, std::chrono::milliseconds(1));
  return Now() >= until ? std::cv_status::timeout : std::cv_status::no_timeout;
}

void FakeClock::SleepFor(std::chrono::nanoseconds d) {
  const time_point until = Now() + d;
  while (Now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void JoinAdvancing(std::thread& t, FakeClock& clock, std::chrono::nanoseconds step) {
  std::atomic<bool> joined{false};
  std::thread ticker([&] {
    while (!joined) {
      clock.Advance(step);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  t.join();
  joined = true;
  ticker.join();
}

Result<ClaimResult> FakeQueue::Claim(const ClaimOptions& o) {
  std::lock_guard<std::mutex> l(t_.mu);
  ++t_.claims;
  ClaimResult r;
  if (t_.claimed_at_once > 0) return r;  // one batch in flight at a time
  for (auto& [seq, attempts] : t_.attempts) {
    if (static_cast<int>(r.events.size()) >= o.batch_size) break;
    ClaimedEvent ce;
    ce.ticket = {seq, 1};
    ce.event.aggregate_type = "t";
    ce.event.aggregate_id = "a" + std::to_string(seq % 3);
    ce.attempts = ++attempts;
    r.events.push_back(ce);
  }
  t_.claimed_at_once = static_cast<std::int64_t>(r.events.size());
  return r;
}

Result<TransitionResult> FakeQueue::MarkSent(std::span<const Ticket> ts) {
  std::lock_guard<std::mutex> l(t_.mu);
  ++t_.marks;
  for (const auto& t : ts) t_.attempts.erase(t.seq);
  t_.claimed_at_once -= static_cast<std::int64_t>(ts.size());
  return TransitionResult{ts.size(), {}};
}

Result<TransitionResult> FakeQueue::Reschedule(std::span<const RescheduleItem> items) {
  std::lock_guard<std::mutex> l(t_.mu);
  for (const auto& it : items) {
    if (!it.attempt_counts) --t_.attempts[it.ticket.seq];
  }
  t_.claimed_at_once -= static_cast<std::int64_t>(items.size());
  return TransitionResult{items.size(), {}};
}

Result<TransitionResult> FakeQueue::MarkFailed(std::span<const FailItem> items) {
  std::lock_guard<std::mutex> l(t_.mu);
  ADD_FAILURE() << "nothing may end FAILED here";
  t_.claimed_at_once -= static_cast<std::int64_t>(items.size());
  return TransitionResult{items.size(), {}};
}

Result<bool> FakeQueue::WaitForWork(std::chrono::milliseconds timeout) {
  std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(20)));
  return false;
}

Result<ClaimResult> DownClaimQueue::Claim(const ClaimOptions& o) {
  if (down_.fetch_sub(1) > 0) return Status::Unavailable("database down (DownClaimQueue)");
  down_.store(0);
  return ClaimQueueWrapper::Claim(o);
}

std::vector<PublishResult> FakeTransport::Publish(std::span<const ClaimedEvent> events) {
  ++publishes;
  if (delay.load().count() > 0) clock->SleepFor(delay.load());
  std::vector<PublishResult> r(events.size());
  for (auto& x : r) {
    x = down ? PublishResult{PublishOutcome::kRetryable, "_MSG_TIMED_OUT", true}
             : PublishResult{PublishOutcome::kAcked, "", false};
  }
  return r;
}

Status FakeSource::Subscribe(const std::vector<std::string>& topics) {
  std::lock_guard<std::mutex> l(mu);
  subscribed = topics;
  return Status::Ok();
}

std::vector<InboundMessage> FakeSource::Poll(int max, std::chrono::milliseconds) {
  std::vector<InboundMessage> out;
  {
    std::lock_guard<std::mutex> l(mu);
    while (!pending.empty() && static_cast<int>(out.size()) < max) {
      out.push_back(pending.front());
      pending.pop_front();
    }
    if (!out.empty()) last_polled = out;
  }
  if (out.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return out;
}

Status FakeSource::Forward(std::span<const OutboundMessage> messages) {
  std::lock_guard<std::mutex> l(mu);
  if (fail_forward) return Status::Unavailable("broker down");
  forwarded.insert(forwarded.end(), messages.begin(), messages.end());
  return Status::Ok();
}

Status FakeSource::Commit(const std::map<TopicPartition, std::int64_t>& next) {
  std::lock_guard<std::mutex> l(mu);
  for (const auto& [tp, off] : next) committed[tp] = off;
  return Status::Ok();
}

void FakeSource::Rewind(const std::map<TopicPartition, std::int64_t>& to) {
  std::lock_guard<std::mutex> l(mu);
  ++rewinds;
  if (!replay_on_rewind) return;
  for (auto it = last_polled.rbegin(); it != last_polled.rend(); ++it) {
    auto at = to.find({it->topic, it->partition});
    if (at != to.end() && it->offset >= at->second) pending.push_front(*it);
  }
}

void FakeSource::Add(InboundMessage m) {
  std::lock_guard<std::mutex> l(mu);
  pending.push_back(std::move(m));
}

std::size_t FakeSource::Committed(const TopicPartition& tp) {
  std::lock_guard<std::mutex> l(mu);
  auto it = committed.find(tp);
  return it == committed.end() ? 0 : static_cast<std::size_t>(it->second);
}

Result<std::vector<MessageOutcome>> FakeInboxStore::Apply(std::span<const InboundMessage> msgs,
                                                          std::span<const std::string> keys,
                                                          std::span<const std::string> order_keys) {
  std::lock_guard<std::mutex> l(mu);
  std::vector<MessageOutcome> out;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].payload == "down") return Status::Unavailable("database down");
    if (msgs[i].payload == "poison") {
      ++poisoned_calls;
      return Status::Internal("index row requires 10024 bytes, maximum size is 8191 [SQLSTATE 54000]");
    }
  }
  std::set<std::string> blocked;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    if (!order_keys.empty() && blocked.count(order_keys[i])) {
      out.push_back({Outcome::kHeld, ""});
      continue;
    }
    const int tried = ++tries[keys[i]];
    if (msgs[i].payload == "permanent" || msgs[i].payload.rfind("permanent:", 0) == 0) {
      out.push_back({Outcome::kPermanent, "bad"});
    } else if (msgs[i].payload == "transient" ||
               (msgs[i].payload.rfind("fail-", 0) == 0 &&
                tried <= std::stoi(msgs[i].payload.substr(5)))) {
      out.push_back({Outcome::kTransient, "later"});
      if (!order_keys.empty()) blocked.insert(order_keys[i]);
    } else if (!stamps.insert(keys[i]).second) {
      out.push_back({Outcome::kDuplicate, ""});
    } else {
      applied.push_back(keys[i]);
      out.push_back({Outcome::kApplied, ""});
    }
  }
  return out;
}

Result<std::set<std::string>> FakeInboxStore::ParkedKeys(std::span<const std::string> order_keys) {
  std::lock_guard<std::mutex> l(mu);
  std::set<std::string> out;
  for (const auto& [id, p] : parked) {
    if (std::find(order_keys.begin(), order_keys.end(), p.order_key) != order_keys.end()) {
      out.insert(p.order_key);
    }
  }
  return out;
}

Status FakeInboxStore::Park(std::span<const ParkedMessage> messages) {
  std::lock_guard<std::mutex> l(mu);
  for (const ParkedMessage& m : messages) {
    bool known = false;
    for (const auto& [id, p] : parked) known = known || p.dedup_key == m.dedup_key;
    if (known) continue;
    ParkedMessage p = m;
    p.id = next_id++;
    due_at[p.id] = clock->Now() + m.delay;
    parked[p.id] = std::move(p);
  }
  return Status::Ok();
}

Result<std::vector<ParkedMessage>> FakeInboxStore::Due(int limit) {
  std::lock_guard<std::mutex> l(mu);
  std::map<std::string, std::int64_t> head;  // order key -> smallest id
  for (const auto& [id, p] : parked) head.emplace(p.order_key, id);
  std::vector<ParkedMessage> out;
  for (const auto& [id, p] : parked) {  // by id: queue order within each key
    if (due_at[head[p.order_key]] > clock->Now()) continue;
    if (static_cast<int>(out.size()) < limit) out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.order_key < b.order_key; });
  return out;
}

Status FakeInboxStore::Unpark(std::span<const std::int64_t> ids) {
  std::lock_guard<std::mutex> l(mu);
  for (auto id : ids) parked.erase(id);
  return Status::Ok();
}

Status FakeInboxStore::Reschedule(std::int64_t id, int attempts, const std::string& error,
                                  std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> l(mu);
  parked[id].attempts = attempts;
  parked[id].last_error = error;
  due_at[id] = clock->Now() + delay;
  return Status::Ok();
}

std::size_t FakeInboxStore::Parked() {
  std::lock_guard<std::mutex> l(mu);
  return parked.size();
}

std::vector<std::string> FakeInboxStore::Applied() {
  std::lock_guard<std::mutex> l(mu);
  return applied;
}

}  // namespace outbox::test_util
