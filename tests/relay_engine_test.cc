// The relay engine's loop with in-process fakes of its claim queue and transport (no
// database, no broker): the shutdown deadline with a batch still in flight, and
// the shared backoff of a broker outage. Runs under ASan and TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "fakes.h"
#include "outbox/relay.h"

namespace outbox {
namespace {

using namespace std::chrono_literals;

using test_util::ClaimQueueWrapper;
using test_util::DownClaimQueue;
using test_util::FakeQueue;
using test_util::FakeTable;
using test_util::FakeTransport;

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
// publish longer than the allowed silence; true again after it returns. On a
// fake clock: the relay's seconds pass in a few hundred real milliseconds.
TEST(RelayEngine, AliveIsFalseOnlyWhileAThreadHangs) {
  Engine e(3);
  test_util::FakeClock clock;
  FakeTransport& transport = e.transport;
  transport.clock = &clock;
  transport.down = true;
  RelayOptions o = Options();
  o.clock = &clock;
  o.workers = 2;
  o.stats_interval = 100ms;  // housekeeping's round (its legitimate silence)
  auto relay = e.Make(o);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  EXPECT_TRUE((*relay)->Alive(1ms)) << "not running yet";
  std::thread runner([&] { (void)(*relay)->Run(); });
  // The relay's time moves in 5 ms steps, each after a real millisecond.
  const auto pass = [&](std::chrono::milliseconds d) {
    for (auto t = 0ms; t < d; t += 5ms) {
      clock.Advance(5ms);
      std::this_thread::sleep_for(1ms);
    }
  };
  pass(300ms);
  EXPECT_TRUE((*relay)->Alive(1000ms)) << "an outage is not a hang";
  transport.delay = 3000ms;  // the next publish hangs for 3 s of the relay's time
  transport.down = false;
  const int before = transport.publishes.load();
  for (int i = 0; i < 2000 && transport.publishes.load() == before; ++i) pass(5ms);
  ASSERT_GT(transport.publishes.load(), before);
  pass(1500ms);
  EXPECT_FALSE((*relay)->Alive(1000ms)) << "a worker has been in one publish for 1.5 s";
  transport.delay = 0ms;
  pass(3000ms);  // that publish returned 1.5 s ago
  EXPECT_TRUE((*relay)->Alive(1000ms));
  (*relay)->RequestStop();
  std::atomic<bool> joined{false};
  std::thread ticker([&] {
    while (!joined) pass(5ms);
  });
  runner.join();
  joined = true;
  ticker.join();
}

// While the broker is down, attempts are given back and nothing ends FAILED
// (max_attempts 2); the workers back off together instead of spinning. On a
// fake clock: stopped, it gets at most one publish per worker and then no more
// (a spinning relay would make them as fast as it can; the first failing
// publish and the shared backoff it starts race the other workers' claims, so
// up to `workers` may pass before the backoff is recorded); moved 600 ms in
// 5 ms steps, it gets one probe per backoff (20, 40, 80, 80, ... ms), not one
// per worker per poll.
TEST(RelayEngine, AnOutageCountsNoAttemptsAndWorkersBackOffTogether) {
  Engine e(5);
  test_util::FakeClock clock;
  FakeTable& table = e.table;
  FakeTransport& transport = e.transport;
  transport.down = true;
  RelayOptions o = Options();
  o.clock = &clock;
  auto relay = e.Make(o);
  ASSERT_TRUE(relay.ok());
  std::thread runner([&] { (void)(*relay)->Run(); });
  for (int i = 0; i < 5000 && transport.publishes.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_GE(transport.publishes.load(), 1);
  // Real time passes; the relay's is stopped. Wait until the count holds still
  // for 200 ms (the racing workers have met the backoff), then for 300 ms more.
  int settled = transport.publishes.load();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(200ms);
    const int now = transport.publishes.load();
    if (now == settled) break;
    settled = now;
  }
  EXPECT_LE(settled, o.workers) << "at most one publish per worker before the backoff holds them";
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(transport.publishes.load(), settled) << "no publish while no time passes";
  for (int step = 0; step < 120; ++step) {  // 600 ms of the relay's time
    clock.Advance(5ms);
    std::this_thread::sleep_for(2ms);
  }
  const int during = transport.publishes.load() - settled;
  {
    std::lock_guard<std::mutex> l(table.mu);
    for (const auto& [seq, attempts] : table.attempts) EXPECT_LE(attempts, 1) << seq;
  }
  // 20 + 40 + 80 + 80 + ... ms: about 9 probes in 600 ms, whatever the workers.
  EXPECT_GE(during, 4) << "the probes go on while the broker is down";
  EXPECT_LE(during, 12) << "publishes during the outage";
  EXPECT_GE(e.metrics.outage_batches.Value(), 2u);
  transport.down = false;
  for (int i = 0; i < 2000 && table.marks.load() == 0; ++i) {
    clock.Advance(5ms);
    std::this_thread::sleep_for(1ms);
  }
  (*relay)->RequestStop();
  runner.join();
  EXPECT_TRUE(table.attempts.empty()) << "delivered after the outage";
}

// The database refuses the first claims (a fault-injecting wrapper around the
// fake queue): the workers back off, reopen their queues and deliver every row
// afterwards.
TEST(RelayEngine, ClaimsFailingForAWhileDeliverEveryRowOnceAfterwards) {
  Engine e(9);
  std::atomic<int> claims_down{12};
  StoreParts parts;
  parts.queue = [&]() -> Result<std::unique_ptr<ClaimQueue>> {
    return std::unique_ptr<ClaimQueue>(
        new DownClaimQueue(std::make_unique<FakeQueue>(e.table), claims_down));
  };
  RelayOptions o = Options();
  o.db_retry_max = 20ms;
  auto relay = Relay::Create(o, std::move(parts), e.transport, e.metrics, e.logger);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  std::thread runner([&] { (void)(*relay)->Run(); });
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> l(e.table.mu);
      if (e.table.attempts.empty()) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  (*relay)->RequestStop();
  runner.join();
  EXPECT_LE(claims_down.load(), 0) << "every refused claim was tried";
  EXPECT_GE(e.metrics.db_errors.Value(), 1u);
  std::lock_guard<std::mutex> l(e.table.mu);
  EXPECT_TRUE(e.table.attempts.empty()) << "every row delivered after the database came back";
}

}  // namespace
}  // namespace outbox
