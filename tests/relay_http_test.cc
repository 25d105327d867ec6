// outbox-relay with relay.transport = http, as a real process against the real
// PostgreSQL, delivering to an HTTP server in this process: every event once
// in order through an outage longer than the retries span, a permanent refusal
// FAILED with its status and its aggregate held, and the crash-matrix row of a
// relay killed after the 2xx and before the mark.
#include <httplib.h>

#include <fstream>
#include <mutex>

#include "http_receiver.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

// What the receiver saw: per aggregate, the payloads in arrival order, and
// each Idempotency-Key's count.
class Receiver {
 public:
  std::string url() const { return receiver_.url("/events/{aggregate_type}"); }
  // The status for a request (>= 300: not recorded as delivered); unset: 200.
  void Answer(std::function<int(const httplib::Request&)> f) {
    std::lock_guard l(mu_);
    answer_ = std::move(f);
  }
  std::map<std::string, std::vector<std::string>> arrivals() {
    std::lock_guard l(mu_);
    return arrivals_;
  }
  std::map<std::string, int> keys() {
    std::lock_guard l(mu_);
    return keys_;
  }
  // The headers of the last request delivered for an aggregate.
  httplib::Headers last_headers(const std::string& aggregate) {
    std::lock_guard l(mu_);
    return last_headers_[aggregate];
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard l(mu_);
    res.status = answer_ ? answer_(req) : 200;
    if (res.status >= 300) return;
    arrivals_[req.get_header_value("Outbox-Aggregate-Id")].push_back(req.body);
    last_headers_[req.get_header_value("Outbox-Aggregate-Id")] = req.headers;
    ++keys_[req.get_header_value("Idempotency-Key")];
  }

  std::mutex mu_;
  std::function<int(const httplib::Request&)> answer_;
  std::map<std::string, std::vector<std::string>> arrivals_;
  std::map<std::string, int> keys_;
  std::map<std::string, httplib::Headers> last_headers_;
  HttpReceiver receiver_{[this](const httplib::Request& req, httplib::Response& res) {
    Handle(req, res);
  }};  // last: stopped before what it uses
};

class RelayHttpTest : public RelayE2ETest {
 protected:
  std::vector<std::string> Http(std::vector<std::string> more = {}) {
    std::vector<std::string> s = {"relay.transport=http", "http_delivery.url=" + receiver_.url(),
                                  "http_delivery.timeout_ms=2000", "relay.lease_ms=6000"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }
  // Per aggregate, the first copies in enqueue order ("agg#n", n from 0).
  void ExpectInOrder(int producers, int aggregates_each, int per_aggregate) {
    auto arrivals = receiver_.arrivals();
    for (int p = 0; p < producers; ++p) {
      for (int a = 0; a < aggregates_each; ++a) {
        const std::string agg = "agg-" + std::to_string(p) + "-" + std::to_string(a);
        int want = 0;
        for (const std::string& payload : arrivals[agg]) {
          const int n = std::stoi(payload.substr(payload.find('#') + 1));
          if (n < want) continue;  // a second copy
          EXPECT_EQ(n, want) << agg << ": event " << n << " arrived before " << want;
          want = n + 1;
        }
        EXPECT_EQ(want, per_aggregate) << agg << " is missing events";
      }
    }
  }
  Receiver receiver_;
};

// relay.envelope = cloudevents on HTTP (issue 43): binary-mode CloudEvents 1.0
// as ce-* headers beside the outbox's own, the body unchanged, the source as
// configured.
TEST_F(RelayHttpTest, TheCloudEventsEnvelopeAddsCeHeadersAndLeavesTheBody) {
  ASSERT_TRUE(EnqueueOne("ce-1", "{\"n\":1}"));
  Subprocess& relay = StartRelay(Http({"relay.envelope=cloudevents", "relay.cloudevents_source=/shop/orders"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, Scaled(30s))) << relay.Log();
  EXPECT_EQ(receiver_.arrivals()["ce-1"], std::vector<std::string>{"{\"n\":1}"});
  const httplib::Headers h = receiver_.last_headers("ce-1");
  const auto at = [&](const char* name) {
    auto it = h.find(name);  // httplib compares header names without case
    return it == h.end() ? std::string("<missing>") : it->second;
  };
  EXPECT_NE(at("ce-id"), "<missing>");
  EXPECT_EQ(at("ce-id"), at("Outbox-Event-Id"));
  EXPECT_EQ(at("ce-source"), "/shop/orders");
  EXPECT_EQ(at("ce-type"), "OrderChanged");
  EXPECT_EQ(at("ce-specversion"), "1.0");
  EXPECT_EQ(at("ce-subject"), "ce-1");
  EXPECT_NE(at("ce-time"), "<missing>");
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// The receiver answers 503 for 4 s; two attempts with backoff up to 500 ms
// span far less. Nothing is FAILED: every event arrives, in order, after.
TEST_F(RelayHttpTest, AnOutageLongerThanTheRetriesSpanFailsNothingAndKeepsTheOrder) {
  std::atomic<bool> down{true};
  receiver_.Answer([&](const httplib::Request&) { return down ? 503 : 200; });
  EnqueueMany(2, 5, 10);  // 100 events
  Subprocess& relay = StartRelay(Http({"relay.max_attempts=2"}));
  const int metrics_port = HttpPort(relay);
  std::this_thread::sleep_for(Scaled(4s));
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  EXPECT_EQ(CountStatus("SENT"), 0);
  int status = 0;
  const std::string why = Get(metrics_port, "/readyz", &status);
  EXPECT_EQ(status, 503);
  EXPECT_NE(why.find("HTTP receiver unreachable (http://127.0.0.1:"), std::string::npos) << why;
  down = false;
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 100; }, Scaled(30s))) << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  ExpectInOrder(2, 5, 10);
  EXPECT_TRUE(WaitFor([&] {
    Get(metrics_port, "/readyz", &status);
    return status == 200;
  }, Scaled(10s))) << "ready again once the receiver answers";
  const std::string metrics = Get(metrics_port, "/metrics");
  EXPECT_GT(Metric(metrics, "outbox_relay_broker_outage_batches_total{transport=\"http\"}"), 0) << metrics;
  EXPECT_GE(Metric(metrics, "outbox_relay_events_published_total{transport=\"http\"}"), 100) << metrics;
  EXPECT_EQ(Metric(metrics, "outbox_relay_events_published_total{transport=\"kafka\"}"), -1) << metrics;
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// The receiver rate-limits one aggregate (429) while it takes the others: an
// outage for those events alone. With max_attempts = 2 nothing is FAILED, and
// once it lets them through every event arrives in order.
TEST_F(RelayHttpTest, OneAggregateRateLimitedWhileOthersGoThroughFailsNothing) {
  std::atomic<bool> limited{true};
  receiver_.Answer([&](const httplib::Request& req) {
    return limited && req.get_header_value("Outbox-Aggregate-Id") == "agg-0-0" ? 429 : 200;
  });
  EnqueueMany(1, 4, 10);  // 40 events, agg-0-0 .. agg-0-3
  Subprocess& relay = StartRelay(Http({"relay.max_attempts=2"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 30; }, Scaled(20s))) << relay.Log();
  std::this_thread::sleep_for(Scaled(2s));  // several rounds of 429 for agg-0-0
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  EXPECT_EQ(CountStatus("SENT"), 30);
  limited = false;
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 40; }, Scaled(30s))) << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  ExpectInOrder(1, 4, 10);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// The receiver decides what it answers, not how much memory the relay spends
// on it (issue 41: one 400 MiB body took the relay's RSS to 912 MiB). A 200
// with a 1 GiB body acks its event; a 400 one byte past the 4,096 bytes read
// fails its event with the body's start in last_error; the relay reads at most
// that much of each, and its peak RSS stays far below the bodies.
TEST_F(RelayHttpTest, AReceiversBodyOfAnySizeCostsTheRelayAFewKilobytes) {
  constexpr std::size_t kGiB = std::size_t{1} << 30;
  std::atomic<std::size_t> served{0};
  HttpReceiver big([&](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Outbox-Aggregate-Id") == "cap") {
      res.status = 400;
      res.set_content(std::string(4096, 'x') + "!", "text/plain");  // 4,097 bytes
      return;
    }
    res.status = 200;
    res.set_content_provider(kGiB, "application/octet-stream",
                             [&](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
                               static const std::string chunk(64 * 1024, 'z');
                               const std::size_t n = std::min(length, chunk.size());
                               served = offset + n;
                               return sink.write(chunk.data(), n);
                             });
  });
  ASSERT_TRUE(EnqueueOne("huge", "huge#0"));
  ASSERT_TRUE(EnqueueOne("huge", "huge#1"));
  ASSERT_TRUE(EnqueueOne("cap", "cap#0"));
  Subprocess& relay = StartRelay(Http({"http_delivery.url=" + big.url("/events/{aggregate_type}"),
                                       "http_delivery.timeout_ms=10000", "relay.lease_ms=30000"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 2 && CountStatus("FAILED") == 1; }, Scaled(30s)))
      << relay.Log();
  const std::string err = Exec(admin_.get(), "SELECT last_error FROM " + schema_ +
                                                 ".outbox WHERE aggregate_id = 'cap'");
  EXPECT_NE(err.find("HTTP 400 from POST"), std::string::npos) << err;
  EXPECT_NE(err.find(std::string(100, 'x')), std::string::npos) << err;
  std::ifstream status("/proc/" + std::to_string(relay.pid()) + "/status");
  long peak_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) peak_kib = std::stol(line.substr(6));
  }
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, 256 * 1024) << "peak RSS " << peak_kib << " KiB after two 1 GiB bodies";
  EXPECT_LT(served.load(), kGiB / 4) << "the relay stopped reading long before the end";
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// One aggregate type's URL answers 429 with Retry-After: 30 while the others
// answer 200: the other type's events go through at once, not after the 30 s
// (issue 41: the whole batch counted as an outage and held every worker).
TEST_F(RelayHttpTest, ADestinationRateLimitedDoesNotHoldTheOthers) {
  HttpReceiver receiver([&](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/events/slow") {
      res.status = 429;
      res.set_header("Retry-After", "30");
      return;
    }
    res.status = 200;
  });
  Subprocess& relay = StartRelay(Http({"http_delivery.url=" + receiver.url("/events/{aggregate_type}")}));
  ASSERT_TRUE(EnqueueOne("warm", "warm#0"));  // "order": a destination that answers
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, Scaled(20s))) << relay.Log();
  for (int i = 0; i < 3; ++i) {
    Exec(admin_.get(), "SELECT " + schema_ + ".enqueue('slow', 's" + std::to_string(i) +
                           "', 'Slow', convert_to('x', 'UTF8'))");
  }
  ASSERT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                  ".outbox WHERE aggregate_type = 'slow' AND last_error LIKE '%429%'") == "3";
  }, Scaled(20s))) << relay.Log();
  EnqueueMany(1, 4, 5);  // 20 "order" events
  EXPECT_TRUE(WaitFor([&] { return CountStatus("SENT") == 21; }, Scaled(10s)))
      << "the other destination waited for the 429's Retry-After: " << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// A 404 is a permanent refusal: the event is FAILED with the status and the
// body in last_error, its aggregate's later event waits behind it, and other
// aggregates go on.
TEST_F(RelayHttpTest, APermanentRefusalFailsTheEventAndHoldsItsAggregate) {
  receiver_.Answer([](const httplib::Request& req) { return req.body == "bad#0" ? 404 : 200; });
  ASSERT_TRUE(EnqueueOne("bad", "bad#0"));
  ASSERT_TRUE(EnqueueOne("bad", "bad#1"));
  ASSERT_TRUE(EnqueueOne("good", "good#0"));
  Subprocess& relay = StartRelay(Http());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("FAILED") == 1 && CountStatus("SENT") == 1; },
                      Scaled(20s)))
      << relay.Log();
  EXPECT_NE(Exec(admin_.get(), "SELECT last_error FROM " + schema_ +
                                   ".outbox WHERE status = 'FAILED'")
                .find("HTTP 404"),
            std::string::npos);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(Exec(admin_.get(), "SELECT status FROM " + schema_ +
                                   ".outbox WHERE payload = 'bad#1'::bytea"),
            "PENDING")
      << "held behind its FAILED head";
  EXPECT_EQ(receiver_.arrivals()["good"], std::vector<std::string>{"good#0"});
  EXPECT_TRUE(receiver_.arrivals()["bad"].empty());
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// The crash matrix's row for HTTP: a relay killed after the receiver's 2xx and
// before the mark. Another relay delivers the batch again once the lease
// expires: the receiver sees those Idempotency-Keys twice (the documented
// contract: at least once, dedup by the key), and every event arrives.
TEST_F(RelayHttpTest, ARelayKilledAfterThe2xxBeforeTheMarkDeliversTheKeyTwice) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  EnqueueMany(2, 5, 10);
  Subprocess& a = StartRelay(Http({"relay.batch_size=20"}),
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  Subprocess& b = StartRelay(Http());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 100; }, Scaled(60s))) << b.Log();
  ExpectInOrder(2, 5, 10);
  int twice = 0;
  for (const auto& [key, n] : receiver_.keys()) {
    EXPECT_LE(n, 2) << key;
    if (n == 2) ++twice;
  }
  EXPECT_GT(twice, 0) << "the killed relay's batch was delivered again";
  EXPECT_EQ(receiver_.keys().size(), 100u);
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

}  // namespace
}  // namespace outbox::testing
