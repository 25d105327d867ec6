// The relay engine's loop with in-process fakes of Store and Transport (no
// database, no broker): the shutdown deadline with a batch still in flight, and
// the shared backoff of a broker outage. Runs under ASan and TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "outbox/relay.h"

namespace outbox {
namespace {

using namespace std::chrono_literals;

// An in-memory outbox: every row claimable once until marked; thread-safe
// because each worker opens its own Store over one shared table.
struct FakeTable {
  std::mutex mu;
  std::map<std::int64_t, int> attempts;  // seq -> attempts, rows not yet SENT
  std::int64_t claimed_at_once = 0;       // rows currently claimed
  std::atomic<int> claims{0}, marks{0};
};

// The engine sees only the claim queue: the fake is nothing more.
class FakeQueue final : public ClaimQueue {
 public:
  explicit FakeQueue(FakeTable& t) : t_(t) {}
  Result<ClaimResult> Claim(const ClaimOptions& o) override {
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
  Result<TransitionResult> MarkSent(std::span<const Ticket> ts) override {
    std::lock_guard<std::mutex> l(t_.mu);
    ++t_.marks;
    for (const auto& t : ts) t_.attempts.erase(t.seq);
    t_.claimed_at_once -= static_cast<std::int64_t>(ts.size());
    return TransitionResult{ts.size(), {}};
  }
  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) override {
    std::lock_guard<std::mutex> l(t_.mu);
    for (const auto& it : items) {
      if (!it.attempt_counts) --t_.attempts[it.ticket.seq];
    }
    t_.claimed_at_once -= static_cast<std::int64_t>(items.size());
    return TransitionResult{items.size(), {}};
  }
  Result<TransitionResult> MarkFailed(std::span<const FailItem> items) override {
    std::lock_guard<std::mutex> l(t_.mu);
    ADD_FAILURE() << "nothing may end FAILED here";
    t_.claimed_at_once -= static_cast<std::int64_t>(items.size());
    return TransitionResult{items.size(), {}};
  }
  Result<bool> WaitForWork(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(20)));
    return false;
  }

 private:
  FakeTable& t_;
};

// Acks after `delay`, or reports every event as "broker unavailable" while down.
class FakeTransport final : public Transport {
 public:
  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    ++publishes;
    std::this_thread::sleep_for(delay.load());
    std::vector<PublishResult> r(events.size());
    for (auto& x : r) {
      x = down ? PublishResult{PublishOutcome::kRetryable, "_MSG_TIMED_OUT", true}
               : PublishResult{PublishOutcome::kAcked, "", false};
    }
    return r;
  }
  std::chrono::milliseconds MaxPublishTime() const override { return 1000ms; }
  bool Healthy() const override { return !down; }
  std::atomic<std::chrono::milliseconds> delay{0ms};
  std::atomic<bool> down{false};
  std::atomic<int> publishes{0};
};

RelayOptions Options() {
  RelayOptions o;
  o.relay_id = "test";
  o.workers = 4;
  o.batch_size = 10;
  o.lease = 5000ms;
  o.listen = false;
  o.poll_min = 1ms;
  o.poll_max = 5ms;
  o.backoff_base = 20ms;
  o.backoff_max = 80ms;
  o.max_attempts = 2;
  return o;
}

// A relay over the fakes: `rows` rows waiting, the broker as `transport` says.
struct Engine {
  explicit Engine(int rows) {
    for (int i = 1; i <= rows; ++i) table.attempts[i] = 0;
  }
  Result<std::unique_ptr<Relay>> Make(const RelayOptions& o) {
    StoreParts parts;  // the queue only: no gauges, no purge, no stream
    parts.queue = [this]() -> Result<std::unique_ptr<ClaimQueue>> {
      return std::unique_ptr<ClaimQueue>(new FakeQueue(table));
    };
    return Relay::Create(o, std::move(parts), transport, metrics, logger);
  }
  FakeTable table;
  FakeTransport transport;
  MetricsRegistry registry;
  RelayMetrics metrics{registry};
  NullLogger logger;
};

// A worker still publishing when the shutdown deadline passes must not touch
// Run()'s stack afterwards; the Relay's destructor waits for it.
TEST(RelayEngine, ShutdownDeadlineWithABatchInFlightIsSafeAndTheDestructorJoins) {
  Engine e(5);
  FakeTable& table = e.table;
  FakeTransport& transport = e.transport;
  transport.delay = 400ms;
  RelayOptions o = Options();
  o.shutdown_timeout = 20ms;
  auto relay = e.Make(o);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  Status result;
  std::thread runner([&] { result = (*relay)->Run(); });
  while (transport.publishes.load() == 0) std::this_thread::sleep_for(1ms);
  (*relay)->RequestStop();
  runner.join();  // Run() has returned: its frame is gone, the batch is not done
  EXPECT_EQ(result.code(), Code::kDeadlineExceeded) << result.ToString();
  EXPECT_EQ(table.marks.load(), 0);
  relay->reset();  // joins the worker, which marks its batch first
  EXPECT_EQ(table.marks.load(), 1);
  EXPECT_TRUE(table.attempts.empty());
}

// Alive() (the systemd watchdog's check): true while every thread goes round
// its loop, also while the broker is down; false while a worker hangs in a
// publish longer than the allowed silence; true again after it returns.
TEST(RelayEngine, AliveIsFalseOnlyWhileAThreadHangs) {
  Engine e(3);
  FakeTransport& transport = e.transport;
  transport.down = true;
  RelayOptions o = Options();
  o.workers = 2;
  o.stats_interval = 100ms;  // housekeeping's round (its legitimate silence)
  auto relay = e.Make(o);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  EXPECT_TRUE((*relay)->Alive(1ms)) << "not running yet";
  std::thread runner([&] { (void)(*relay)->Run(); });
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE((*relay)->Alive(1000ms)) << "an outage is not a hang";
  transport.delay = 3000ms;  // the next publish hangs for 3 s
  transport.down = false;
  const int before = transport.publishes.load();
  for (int i = 0; i < 1000 && transport.publishes.load() == before; ++i) std::this_thread::sleep_for(2ms);
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE((*relay)->Alive(1000ms)) << "a worker has been in one publish for 1.5 s";
  transport.delay = 0ms;
  std::this_thread::sleep_for(3000ms);  // that publish returned 1.5 s ago
  EXPECT_TRUE((*relay)->Alive(1000ms));
  (*relay)->RequestStop();
  runner.join();
}

// While the broker is down, attempts are given back and nothing ends FAILED
// (max_attempts 2); the workers back off together instead of spinning: far
// fewer publishes than a worker per poll_min would make.
TEST(RelayEngine, AnOutageCountsNoAttemptsAndWorkersBackOffTogether) {
  Engine e(5);
  FakeTable& table = e.table;
  FakeTransport& transport = e.transport;
  transport.down = true;
  auto relay = e.Make(Options());
  ASSERT_TRUE(relay.ok());
  std::thread runner([&] { (void)(*relay)->Run(); });
  std::this_thread::sleep_for(600ms);
  const int during = transport.publishes.load();
  {
    std::lock_guard<std::mutex> l(table.mu);
    for (const auto& [seq, attempts] : table.attempts) EXPECT_LE(attempts, 1) << seq;
  }
  // Backoff 20 -> 40 -> 80 ms: about 10 probes in 600 ms; a spinning relay
  // would make hundreds.
  EXPECT_LT(during, 40) << "publishes during the outage";
  EXPECT_GE(e.metrics.outage_batches.Value(), 2u);
  transport.down = false;
  for (int i = 0; i < 500 && table.marks.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  (*relay)->RequestStop();
  runner.join();
  EXPECT_TRUE(table.attempts.empty()) << "delivered after the outage";
}

}  // namespace
}  // namespace outbox
