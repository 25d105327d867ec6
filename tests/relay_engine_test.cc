// The relay engine's loop with in-process fakes of its claim queue and transport (no
// database, no broker): the shutdown deadline with a batch still in flight, and
// the shared backoff of a broker outage. Runs under ASan and TSan.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
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
      std::unique_ptr<ClaimQueue> q = std::make_unique<FakeQueue>(table);
      return wrap ? wrap(std::move(q)) : std::move(q);
    };
    return Relay::Create(o, std::move(parts), transport, metrics, logger);
  }
  // Set before the relay runs: wraps each thread's queue (a test's fault or hook).
  std::function<std::unique_ptr<ClaimQueue>(std::unique_ptr<ClaimQueue>)> wrap;
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
  test_util::JoinAdvancing(runner, clock, 5ms);
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

// Idle polling on a stopped fake clock that the test moves 1 ms at a time
// (each step after a real millisecond, so that waiting workers see it; the
// bounds below leave room for a worker that sees it a step late).
struct IdleRelay {
  // `wrap`, if set: wraps each thread's queue, given the fake table (set
  // before the relay runs: each worker asks its own queue whether its claims
  // see every row).
  using Wrap =
      std::function<std::unique_ptr<ClaimQueue>(std::unique_ptr<ClaimQueue>, FakeTable&)>;
  IdleRelay(std::chrono::milliseconds poll_min, std::chrono::milliseconds poll_hot,
            std::chrono::milliseconds poll_max, Wrap wrap = nullptr) {
    if (wrap) {
      e.wrap = [this, wrap = std::move(wrap)](std::unique_ptr<ClaimQueue> q) {
        return wrap(std::move(q), e.table);
      };
    }
    e.transport.clock = &clock;  // a publish's delay passes in the relay's time
    RelayOptions o = Options();
    o.clock = &clock;
    o.poll_min = poll_min;
    o.poll_hot = poll_hot;
    o.poll_max = poll_max;
    relay = e.Make(o);
  }
  IdleRelay(const IdleRelay&) = delete;  // e.wrap holds `this`
  IdleRelay& operator=(const IdleRelay&) = delete;
  ~IdleRelay() {
    if (runner.joinable()) {
      (*relay)->RequestStop();
      runner.join();
    }
  }
  void Start() {
    ASSERT_TRUE(relay.ok()) << relay.status().ToString();
    runner = std::thread([this] { (void)(*relay)->Run(); });
    // Every worker's first claim is empty; then all but the poller wait.
    int settled = -1;
    for (int i = 0; i < 100 && e.table.claims.load() != settled; ++i) {
      settled = e.table.claims.load();
      std::this_thread::sleep_for(50ms);
    }
  }
  void Pass(std::chrono::milliseconds d) {
    for (auto t = 0ms; t < d; t += 1ms) {
      clock.Advance(1ms);
      std::this_thread::sleep_for(1ms);
    }
  }
  // The claims made while the test moves the clock `d`.
  int ClaimsOver(std::chrono::milliseconds d) {
    const int before = e.table.claims.load();
    Pass(d);
    return e.table.claims.load() - before;
  }
  // Adds row `seq`; moves time until it is marked. The fake time that took.
  std::chrono::milliseconds Deliver(std::int64_t seq) {
    const int marks = e.table.marks.load();
    {
      std::lock_guard<std::mutex> l(e.table.mu);
      e.table.attempts[seq] = 0;
    }
    auto t = 0ms;
    for (; e.table.marks.load() == marks && t < 5000ms; t += 1ms) Pass(1ms);
    return t;
  }
  Engine e{0};
  test_util::FakeClock clock;
  Result<std::unique_ptr<Relay>> relay = Status::Internal("not made");
  std::thread runner;
};

// One worker polls for the idle ones, at the relay's interval (doubling from
// poll_min to poll_max), not one poll per worker.
TEST(RelayEngine, IdleWorkersPollAsOneAtADoublingInterval) {
  IdleRelay r(10ms, 0ms, 200ms);
  ASSERT_NO_FATAL_FAILURE(r.Start());
  const int polls = r.ClaimsOver(1000ms);
  // The poller: 10, 20, 40, 80, 160, then every 200 ms: 8 polls in 1 s; the
  // three others' safety net (4 x poll_max, at least 1 s) adds one claim each,
  // about when the second ends. Four workers each polling on their own would
  // make 32.
  EXPECT_GE(polls, 6);
  EXPECT_LE(polls, 14);
}

// With a short poll_max (the default, 20 ms) the waiting workers' safety net is
// a second, not 4 x poll_max: an idle relay's claims are the poller's, about one
// per poll_max, plus one a second from each other worker.
TEST(RelayEngine, AnIdleRelayWithAShortPollMaxClaimsAboutOncePerPollMax) {
  IdleRelay r(2ms, 0ms, 20ms);
  ASSERT_NO_FATAL_FAILURE(r.Start());
  const int polls = r.ClaimsOver(3000ms);
  // The poller: about 150 in 3 s (fewer when a step is seen late); the three
  // others: 3 each (160 measured). With the safety net at 4 x poll_max they
  // would add 112 (263 measured).
  EXPECT_GE(polls, 60);
  EXPECT_LE(polls, 200);
}

// After the poller found work (a claim that took all there was), one waiting
// worker takes over the polling, at poll_min: not at the interval it had
// reached itself, and without every waiting worker claiming at once.
TEST(RelayEngine, AfterWorkIsFoundOneWorkerTakesOverThePollingAtPollMin) {
  IdleRelay r(10ms, 0ms, 200ms);
  ASSERT_NO_FATAL_FAILURE(r.Start());
  // The interval is at poll_max by then, and the waiting workers' safety-net
  // claims (1 s after they began to wait) are behind us, not racing the count.
  r.Pass(1200ms);
  const int before = r.e.table.claims.load();
  EXPECT_LE(r.Deliver(1), 250ms) << "found within poll_max";
  std::this_thread::sleep_for(100ms);  // time stands still: no poll is due
  // The claim that found the row, its finder's next claim and perhaps the new
  // poller's first; waking every waiting worker to claim would make five.
  EXPECT_LE(r.e.table.claims.load() - before, 4);
  EXPECT_LE(r.Deliver(2), 30ms) << "the next poller starts at poll_min, not poll_max";
}

// A queue that sees only its share of the rows, as the PostgreSQL log's slots:
// the i-th queue made claims only rows whose seq modulo 4 is i.
class ShareQueue final : public ClaimQueueWrapper {
 public:
  ShareQueue(std::unique_ptr<ClaimQueue> base, FakeTable& t, int share,
             std::array<std::atomic<int>, 4>* claims_by_share = nullptr)
      : ClaimQueueWrapper(std::move(base)), t_(t), share_(share), by_share_(claims_by_share) {}
  Result<ClaimResult> Claim(const ClaimOptions& o) override {
    if (by_share_ != nullptr) ++(*by_share_)[static_cast<std::size_t>(share_)];
    bool mine = false;
    {
      std::lock_guard<std::mutex> l(t_.mu);
      for (const auto& [seq, attempts] : t_.attempts) mine = mine || seq % 4 == share_;
    }
    if (mine) return base_->Claim(o);
    ++t_.claims;  // an empty claim of its share
    return ClaimResult{};
  }
  bool ClaimsSeeEveryRow() const override { return false; }
  // IdleRelay's wrap: the relay's queues get shares 0, 1, 2, 3, 0, ... in the
  // order they are made; `claims_by_share`, if set, counts each share's claims.
  static IdleRelay::Wrap Wraps(
      std::array<std::atomic<int>, 4>* claims_by_share = nullptr) {
    auto made = std::make_shared<std::atomic<int>>(0);
    return [made, claims_by_share](std::unique_ptr<ClaimQueue> q,
                                   FakeTable& t) -> std::unique_ptr<ClaimQueue> {
      return std::make_unique<ShareQueue>(std::move(q), t, (*made)++ % 4,
                                          claims_by_share);
    };
  }

 private:
  FakeTable& t_;
  const int share_;
  std::array<std::atomic<int>, 4>* by_share_;
};

// When a worker's claims see only its share, nobody can poll for it: every idle
// worker polls on its own, so a row in any share is found within poll_max, not
// at a waiting worker's safety net (a second). One shared poller finds at most
// its own share's rows in time.
TEST(RelayEngine, WorkersWhoseClaimsSeeOnlyTheirShareEachPollForThemselves) {
  IdleRelay r(10ms, 0ms, 200ms, ShareQueue::Wraps());
  ASSERT_NO_FATAL_FAILURE(r.Start());
  r.Pass(1200ms);  // every worker's interval at poll_max
  for (std::int64_t seq = 1; seq <= 4; ++seq) {
    EXPECT_LE(r.Deliver(seq), 250ms) << "row " << seq << " (share " << seq % 4 << ")";
  }
}

// A worker polling its own share backs off to poll_max while its share is
// quiet; when another worker finds work, its next sleep is at most workers x
// poll_min (Heat), as the relay's events spread over the shares. So while one
// share has a steady stream, the other workers poll at that cap, not at
// poll_max, and a row in their share after the stream is found within about it.
TEST(RelayEngine, AWorkerPollingItsOwnShareIsHeatedByTheOthersFinds) {
  std::array<std::atomic<int>, 4> by_share{};
  IdleRelay r(10ms, 0ms, 400ms, ShareQueue::Wraps(&by_share));
  ASSERT_NO_FATAL_FAILURE(r.Start());
  r.Pass(3000ms);  // every worker's interval at poll_max
  auto others = [&] { return by_share[1].load() + by_share[2].load() + by_share[3].load(); };
  const int quiet_before = others();
  r.Pass(1200ms);
  const int quiet = others() - quiet_before;  // about 3 a worker at 400 ms
  // A stream in share 0: a row every 30 ms for 1.5 s (worker 0 finds each).
  const int before = others();
  std::int64_t seq = 0;
  for (auto t = 0ms; t < 1500ms;) {
    seq += 4;
    const auto took = r.Deliver(seq);
    ASSERT_LT(took, 5000ms) << "row " << seq << " never marked";
    t += took;
    if (took < 30ms) {
      r.Pass(30ms - took);
      t += 30ms - took;
    }
  }
  const int streamed = others() - before;
  EXPECT_LE(quiet, 15) << "quiet shares poll at poll_max (400 ms)";
  // Heated: at most 40 ms a sleep, 31-34 claims a worker in 1.5 s here; at
  // poll_max about 4 (12 for the three without Heat, checked). Bounds wide
  // enough for a slow (sanitized) build.
  EXPECT_GE(streamed, 3 * 10) << "the other workers kept polling at poll_max (" << quiet
                              << " claims in 1.2 s quiet)";
  EXPECT_LE(r.Deliver(seq + 1), 350ms) << "a row in share 1 right after the stream";
}

// For poll_hot after work was found, the poller stays at poll_min; then it
// backs off.
TEST(RelayEngine, ThePollerStaysAtPollMinForPollHotAfterWork) {
  IdleRelay r(5ms, 50ms, 200ms);
  ASSERT_NO_FATAL_FAILURE(r.Start());
  r.Pass(500ms);
  ASSERT_LT(r.Deliver(1), 5000ms) << "never marked";
  int before = r.e.table.claims.load();
  r.Pass(50ms);
  EXPECT_GE(r.e.table.claims.load() - before, 5) << "every 5 ms while hot";
  before = r.e.table.claims.load();
  r.Pass(500ms);
  // 5, 10, 20, 40, 80, 160, 200: about 7 polls in the next 500 ms (10 ms at
  // most between polls would be 50).
  EXPECT_LE(r.e.table.claims.load() - before, 12) << "backed off after poll_hot";
}

// Each of the next `chain` marks adds a row: a stream of events, each one
// arriving while the batch before it is in flight, so that the busy worker's
// own next claim takes it and the poller finds nothing.
class ChainQueue final : public ClaimQueueWrapper {
 public:
  ChainQueue(std::unique_ptr<ClaimQueue> base, FakeTable& table, std::atomic<int>& chain,
             std::atomic<std::int64_t>& next_seq)
      : ClaimQueueWrapper(std::move(base)), table_(table), chain_(chain), next_seq_(next_seq) {}
  Result<TransitionResult> MarkSent(std::span<const Ticket> t) override {
    if (chain_.fetch_sub(1) > 0) {
      std::lock_guard<std::mutex> l(table_.mu);
      table_.attempts[next_seq_++] = 0;
    }
    return base_->MarkSent(t);
  }

 private:
  FakeTable& table_;
  std::atomic<int>& chain_;
  std::atomic<std::int64_t>& next_seq_;
};

// While a busy worker's own claims catch every event, the poller finds none
// and backs off towards poll_max. When that worker runs out of work (its claim
// after a batch comes back empty), it polls next, at poll_min: the next event
// is not left waiting for the backed-off poller (the tail of the default
// latency at 1,000 and 5,000 events/s, docs/benchmarks.md).
TEST(RelayEngine, AWorkerThatRunsOutOfWorkPollsNextAtPollMin) {
  std::atomic<int> chain{0};
  std::atomic<std::int64_t> next_seq{1000};
  IdleRelay r(
      5ms, 20ms, 400ms,
      [&](std::unique_ptr<ClaimQueue> q, FakeTable& t) -> std::unique_ptr<ClaimQueue> {
        return std::make_unique<ChainQueue>(std::move(q), t, chain, next_seq);
      });
  r.e.transport.delay = 10ms;  // each batch is in flight for 10 ms of the relay's time
  ASSERT_NO_FATAL_FAILURE(r.Start());
  chain = 40;  // row 1, then 40 more, one at each mark: 400 ms of work
  ASSERT_LT(r.Deliver(1), 5000ms) << "never marked";
  for (int i = 0; i < 5000 && r.e.table.marks.load() < 41; ++i) r.Pass(1ms);
  ASSERT_EQ(r.e.table.marks.load(), 41) << "the chain did not finish";
  // The poller found nothing for about 400 ms: its interval is 160 ms or more.
  // Found within poll_min, plus the 10 ms publish and a few late steps.
  EXPECT_LE(r.Deliver(2), 40ms) << "left for the backed-off poller";
}

// An OutboxView whose gauges' query takes `cost` of the relay's (fake) time,
// and fails (after that cost) while `failures` is above zero.
class SlowStatsView final : public OutboxView {
 public:
  SlowStatsView(test_util::FakeClock& clock, std::chrono::milliseconds cost,
                std::atomic<int>& calls, std::atomic<int>& failures)
      : clock_(clock), cost_(cost), calls_(calls), failures_(failures) {}
  Result<StoreStats> Stats() override {
    clock_.Advance(cost_);
    ++calls_;
    if (failures_.fetch_sub(1) > 0) return Status::Unavailable("statement timeout");
    StoreStats st;
    st.pending = 1'000'000;
    return st;
  }
  Result<std::int64_t> PurgeSent(std::chrono::seconds, int) override { return 0; }
  Result<std::int64_t> CountSent() override { return Unused(); }
  Result<ReplayCounts> ReplayFailed(const ReplaySelection&) override { return Unused(); }
  Result<SkipResult> Skip(const SkipRequest&) override { return Unused(); }
  Result<std::optional<std::chrono::system_clock::time_point>> OldestUnsent() override {
    return Unused();
  }
  Result<std::vector<EventRecord>> List(const ListFilter&) override { return Unused(); }
  Result<std::vector<EventRecord>> Find(const std::string&) override { return Unused(); }
  Result<ActivityReport> RecentActivity(std::chrono::seconds) override { return Unused(); }

 private:
  static Status Unused() { return Status::Internal("not used by the relay"); }
  test_util::FakeClock& clock_;
  const std::chrono::milliseconds cost_;
  std::atomic<int>& calls_;
  std::atomic<int>& failures_;
};

// A one-worker relay over a SlowStatsView (stats_interval 100 ms), run while
// the test moves the fake clock `span` in 20 ms steps, then stopped.
struct GaugesRun {
  int calls = 0;
  double pending = 0;  // the gauge at the end
  std::chrono::milliseconds elapsed{0};  // the relay's time in all (queries and stop included)
};
GaugesRun RunGauges(std::chrono::milliseconds cost, int failures, std::chrono::milliseconds span) {
  Engine e(0);
  test_util::FakeClock clock;
  const auto start = clock.Now();
  std::atomic<int> calls{0};
  std::atomic<int> failing{failures};
  StoreParts parts;
  parts.queue = [&]() -> Result<std::unique_ptr<ClaimQueue>> {
    return std::unique_ptr<ClaimQueue>(std::make_unique<FakeQueue>(e.table));
  };
  parts.view = [&]() -> Result<std::unique_ptr<OutboxView>> {
    return std::unique_ptr<OutboxView>(
        std::make_unique<SlowStatsView>(clock, cost, calls, failing));
  };
  RelayOptions o = Options();
  o.clock = &clock;
  o.workers = 1;
  o.stats_interval = 100ms;
  auto relay = Relay::Create(o, std::move(parts), e.transport, e.metrics, e.logger);
  EXPECT_TRUE(relay.ok()) << relay.status().ToString();
  if (!relay.ok()) return {};
  std::thread runner([&] { (void)(*relay)->Run(); });
  for (int i = 0; i < 5000 && calls.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  for (auto t = 0ms; t < span; t += 20ms) {
    clock.Advance(20ms);
    std::this_thread::sleep_for(1ms);
  }
  (*relay)->RequestStop();
  test_util::JoinAdvancing(runner, clock, 20ms);
  return {calls.load(), e.metrics.pending.Value(),
          std::chrono::duration_cast<std::chrono::milliseconds>(clock.Now() - start)};
}

// The gauges' query counts every unsent row (0.4-1.2 s at 1,000,000 rows): it
// runs every stats_interval while cheap, and every 20 times its cost once
// dear, so a backlog's gauges do not keep a database core busy. On a fake
// clock: 30 s of the relay's time with stats_interval 100 ms.
TEST(RelayEngine, TheGaugesQueryIsPacedByItsOwnCost) {
  const GaugesRun cheap = RunGauges(0ms, 0, 30s);
  // About 300 are due; a slow machine's rounds may lag the clock's steps.
  EXPECT_GE(cheap.calls, 30) << "a cheap query refreshes the gauges every stats_interval";
  EXPECT_EQ(cheap.pending, 1'000'000);
  const GaugesRun dear = RunGauges(500ms, 0, 30s);
  // 500 ms each: the next one 10 s after the last began, so one at the start
  // and one per 10 s of the relay's time after it (about 3). Without the
  // pacing: one per 100 ms slept (about 300).
  EXPECT_GE(dear.calls, 2) << "a dear query still runs";
  EXPECT_LE(dear.calls, 1 + dear.elapsed / 10s)
      << "a dear query is paced by its cost; relay time " << dear.elapsed.count() << " ms";
  EXPECT_EQ(dear.pending, 1'000'000);
}

// A failed gauges' query is not paced by its cost (a statement timeout takes
// its whole length): it is tried again next round, so the gauges and the
// readiness follow the database as soon as it answers.
TEST(RelayEngine, AFailedGaugesQueryIsTriedAgainNextRound) {
  const GaugesRun r = RunGauges(500ms, 1, 2s);
  // The failure at the start, then one per round (500 ms each plus 100 ms):
  // paced like an answer, the second would wait 10 s.
  EXPECT_GE(r.calls, 2) << "relay time " << r.elapsed.count() << " ms";
  EXPECT_EQ(r.pending, 1'000'000) << "the gauges were set after the failure";
}

// Before the database's first answer /readyz says the relay is starting, not
// that the database is unreachable (a relay that had just delivered its first
// rows said "database unreachable" until its first gauges round ended); after
// an error it says unreachable.
TEST(RelayEngine, BeforeTheFirstDatabaseAnswerTheRelayIsStartingNotUnreachable) {
  Engine e(0);
  test_util::FakeClock clock;
  std::promise<void> open_view;
  std::shared_future<void> opened = open_view.get_future().share();
  StoreParts parts;
  parts.queue = [&]() -> Result<std::unique_ptr<ClaimQueue>> {
    return std::unique_ptr<ClaimQueue>(std::make_unique<FakeQueue>(e.table));
  };
  parts.view = [opened]() -> Result<std::unique_ptr<OutboxView>> {
    opened.wait();
    return Status::Unavailable("connection refused");
  };
  RelayOptions o = Options();
  o.clock = &clock;
  o.workers = 1;
  auto relay = Relay::Create(o, std::move(parts), e.transport, e.metrics, e.logger);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  std::thread runner([&] { (void)(*relay)->Run(); });
  for (int i = 0; i < 5000 && e.table.claims.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE((*relay)->Ready());
  EXPECT_EQ((*relay)->NotReadyReason(), "not ready: starting (waiting for the database's first answer)\n");
  open_view.set_value();
  std::string why;
  for (int i = 0; i < 5000 && (why = (*relay)->NotReadyReason()) != "not ready: database unreachable\n"; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(why, "not ready: database unreachable\n");
  (*relay)->RequestStop();
  test_util::JoinAdvancing(runner, clock, 20ms);
}

}  // namespace
}  // namespace outbox
