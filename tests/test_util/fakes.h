// Fakes of our interfaces, once, for every engine test (STYLE.md 18): an
// in-memory claim queue and transport for the relay, an in-memory inbox store
// and broker for the consumer, and forwarding wrappers that inject faults
// (leveldb's EnvWrapper: a test overrides one call, the rest forward).
//
// Thread-safety: every fake is safe from several threads (the engines call
// them from theirs); the fields tests read or set are atomics or guarded by
// `mu`, as each says.
#ifndef OUTBOX_TESTS_TEST_UTIL_FAKES_H_
#define OUTBOX_TESTS_TEST_UTIL_FAKES_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "outbox/clock.h"
#include "outbox/consumer.h"
#include "outbox/inbox.h"
#include "outbox/store.h"
#include "outbox/transport.h"

namespace outbox::test_util {

// --- Time. ---

// A clock that moves only when the test says: Advance(). Waits return when the
// fake time passes their deadline (they look again every real millisecond, so
// a notification is seen at once and an Advance within a millisecond).
// SleepFor blocks until the test advances past it: a relay on a stopped fake
// clock that must retry a mark (after a store error) waits for the test.
class FakeClock final : public Clock {
 public:
  time_point Now() const override { return start_ + std::chrono::nanoseconds(offset_ns_.load()); }
  std::cv_status WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                           time_point until) override;
  void SleepFor(std::chrono::nanoseconds d) override;
  std::chrono::system_clock::time_point WallNow() const override {
    return wall_start_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             std::chrono::nanoseconds(offset_ns_.load()));
  }
  void Advance(std::chrono::nanoseconds d) { offset_ns_ += d.count(); }

 private:
  const time_point start_ = std::chrono::steady_clock::now();
  const std::chrono::system_clock::time_point wall_start_ = std::chrono::system_clock::now();
  std::atomic<std::int64_t> offset_ns_{0};
};

// Joins `t` while moving `clock` on by `step` each real millisecond: for an
// engine asked to stop while a thread of it sleeps on the fake clock.
void JoinAdvancing(std::thread& t, FakeClock& clock, std::chrono::nanoseconds step);

// --- The relay's side. ---

// An in-memory outbox: every row claimable once until marked; shared by the
// FakeQueues each relay thread opens.
struct FakeTable {
  std::mutex mu;
  std::map<std::int64_t, int> attempts;  // seq -> attempts, rows not yet SENT (mu)
  std::int64_t claimed_at_once = 0;       // rows currently claimed (mu)
  std::atomic<int> claims{0}, marks{0};
};

// The engine's claim queue over a FakeTable. One batch in flight at a time;
// aggregates "a0".."a2" by seq; nothing may end FAILED (a test failure).
class FakeQueue final : public ClaimQueue {
 public:
  explicit FakeQueue(FakeTable& t) : t_(t) {}
  Result<ClaimResult> Claim(const ClaimOptions& o) override;
  Result<TransitionResult> MarkSent(std::span<const Ticket> tickets) override;
  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) override;
  Result<TransitionResult> MarkFailed(std::span<const FailItem> items) override;
  Result<bool> WaitForWork(std::chrono::milliseconds timeout) override;

 private:
  FakeTable& t_;
};

// Forwards every call to `base` (owned); a test derives and overrides the call
// it breaks.
class ClaimQueueWrapper : public ClaimQueue {
 public:
  explicit ClaimQueueWrapper(std::unique_ptr<ClaimQueue> base) : base_(std::move(base)) {}
  Result<ClaimResult> Claim(const ClaimOptions& o) override { return base_->Claim(o); }
  Result<TransitionResult> MarkSent(std::span<const Ticket> t) override {
    return base_->MarkSent(t);
  }
  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> i) override {
    return base_->Reschedule(i);
  }
  Result<TransitionResult> MarkFailed(std::span<const FailItem> i) override {
    return base_->MarkFailed(i);
  }
  Result<bool> WaitForWork(std::chrono::milliseconds t) override { return base_->WaitForWork(t); }
  bool ClaimsSeeEveryRow() const override { return base_->ClaimsSeeEveryRow(); }

 protected:
  std::unique_ptr<ClaimQueue> base_;
};

// The database goes away for a while: the next `claims_down` claims (counted
// across every wrapper sharing the counter) fail as an outage would.
class DownClaimQueue final : public ClaimQueueWrapper {
 public:
  DownClaimQueue(std::unique_ptr<ClaimQueue> base, std::atomic<int>& claims_down)
      : ClaimQueueWrapper(std::move(base)), down_(claims_down) {}
  Result<ClaimResult> Claim(const ClaimOptions& o) override;

 private:
  std::atomic<int>& down_;
};

// Acks after `delay`, or reports every event as "broker unavailable" while down.
class FakeTransport final : public Transport {
 public:
  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override;
  std::chrono::milliseconds MaxPublishTime() const override {
    return std::chrono::milliseconds(1000);
  }
  bool Healthy() const override { return !down; }
  std::atomic<std::chrono::milliseconds> delay{std::chrono::milliseconds(0)};
  std::atomic<bool> down{false};
  std::atomic<int> publishes{0};
  Clock* clock = &SystemClock();  // what `delay` is measured on
};

// --- The consumer's side. ---

// A broker in memory: Poll hands out `pending` in order; forwards and commits
// are recorded (all fields under `mu`).
class FakeSource final : public InboxSource {
 public:
  std::mutex mu;
  std::deque<InboundMessage> pending;  // handed out by Poll, in order
  std::vector<OutboundMessage> forwarded;
  std::map<TopicPartition, std::int64_t> committed;
  std::vector<std::string> subscribed;
  int rewinds = 0;
  bool fail_forward = false;
  // Rewind hands the last polled messages from the rewind offsets out again,
  // as a broker would (off: a rewound batch is gone).
  bool replay_on_rewind = false;
  std::vector<InboundMessage> last_polled;

  Status Subscribe(const std::vector<std::string>& topics) override;
  std::vector<InboundMessage> Poll(int max, std::chrono::milliseconds timeout) override;
  Status Forward(std::span<const OutboundMessage> messages) override;
  Status Commit(const std::map<TopicPartition, std::int64_t>& next) override;
  void Rewind(const std::map<TopicPartition, std::int64_t>& to) override;
  void Pause(const TopicPartition&, std::int64_t) override {}
  void Resume(const TopicPartition&) override {}
  std::vector<PartitionLag> Lag() override { return {{{"t", 0}, 7}}; }

  void Add(InboundMessage m);
  std::size_t Committed(const TopicPartition& tp);
};

// Stamps and the parked queue in memory (fields under `mu`). Payload
// "permanent" (or "permanent:...") / "transient" fail; "fail-N" fails its
// first N tries; "down" fails the whole call as a database outage would;
// "poison" fails the whole call, whatever else it holds, as a statement that
// no transaction with that message can pass (counted in poisoned_calls).
class FakeInboxStore final : public InboxStore {
 public:
  std::mutex mu;
  std::set<std::string> stamps;
  std::vector<std::string> applied;  // keys, in order
  std::map<std::string, int> tries;  // per dedup key
  std::map<std::int64_t, ParkedMessage> parked;
  std::map<std::int64_t, std::chrono::steady_clock::time_point> due_at;
  Clock* clock = &SystemClock();  // the database's time: parked messages' due times
  std::int64_t next_id = 1;
  int poisoned_calls = 0;

  Status Migrate() override { return Status::Ok(); }
  Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> msgs,
                                            std::span<const std::string> keys,
                                            std::span<const std::string> order_keys) override;
  Result<std::int64_t> PurgeStamps(std::chrono::seconds, int) override { return 0; }
  Result<std::set<std::string>> ParkedKeys(std::span<const std::string> order_keys) override;
  Status Park(std::span<const ParkedMessage> messages) override;
  Result<std::vector<ParkedMessage>> Due(int limit) override;
  Status Unpark(std::span<const std::int64_t> ids) override;
  Status Reschedule(std::int64_t id, int attempts, const std::string& error,
                    std::chrono::milliseconds delay) override;

  std::size_t Parked();
  std::vector<std::string> Applied();
};

}  // namespace outbox::test_util

#endif  // OUTBOX_TESTS_TEST_UTIL_FAKES_H_
