// The HTTP transport against a real HTTP server in this process (cpp-httplib):
// what each request carries, one request in flight per aggregate, and how
// each kind of answer (2xx, 408/429/5xx, other 4xx, a refused connection, a
// stall past the timeout, a dropped connection) comes back.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "http_receiver.h"
#include "outbox/http_transport.h"
#include "test_env.h"

namespace outbox {
namespace {

using namespace std::chrono_literals;
using testing::Scaled;

struct Seen {
  std::string path, body, idempotency_key;
  httplib::Headers headers;
};

// A receiver that records every request, then lets `handle` answer it.
class Server {
 public:
  explicit Server(std::function<void(const httplib::Request&, httplib::Response&)> handle)
      : handle_(std::move(handle)), receiver_([this](const httplib::Request& req,
                                                     httplib::Response& res) {
          {
            std::lock_guard l(mu_);
            seen_.push_back(
                {req.path, req.body, req.get_header_value("Idempotency-Key"), req.headers});
          }
          handle_(req, res);
        }) {}
  int port() const { return receiver_.port(); }
  std::string url(const std::string& path) const { return receiver_.url(path); }
  std::vector<Seen> seen() {
    std::lock_guard l(mu_);
    return seen_;
  }

 private:
  std::function<void(const httplib::Request&, httplib::Response&)> handle_;
  std::mutex mu_;
  std::vector<Seen> seen_;
  testing::HttpReceiver receiver_;  // last: stopped before what it uses
};

ClaimedEvent MakeEvent(std::int64_t seq, const std::string& aggregate, std::string payload) {
  ClaimedEvent e;
  e.ticket.seq = seq;
  e.event_id = "0190c8a8-0000-7000-8000-" + std::string(12 - std::to_string(seq).size(), '0') +
               std::to_string(seq);
  e.event.aggregate_type = "order";
  e.event.aggregate_id = aggregate;
  e.event.event_type = "OrderChanged";
  e.event.payload = std::move(payload);
  e.attempts = 1;
  return e;
}

std::unique_ptr<Transport> Open(HttpTransportOptions o) {
  auto t = OpenHttpTransport(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(HttpTransport, EachRequestCarriesThePayloadTheIdsTheHeadersAndTheRenderedUrl) {
  Server server([](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  HttpTransportOptions o;
  o.url_template = server.url("/in/{aggregate_type}/{event_type}");
  o.headers = {{"Authorization", "Bearer s3cret"}};
  auto t = Open(o);
  ASSERT_TRUE(t);
  ClaimedEvent e = MakeEvent(7, "42", std::string("\x00\x01{\"a\":1}", 9));
  e.event.event_type = "Order Changed/v2";
  e.event.headers = {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                     {"content-type", "application/json"},
                     // Names the transport sets: the event's never replace them.
                     {"Idempotency-Key", "not-the-event-id"},
                     {"Outbox-Event-Id", "forged"},
                     {"Content-Length", "1"}};
  e.event.dedup_key = "order-42-v2";
  e.attempts = 3;
  auto results = t->Publish(std::vector<ClaimedEvent>{e});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, PublishOutcome::kAcked) << results[0].error;
  auto seen = server.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/in/order/Order Changed/v2") << "the server decodes the path";
  EXPECT_EQ(seen[0].body, e.event.payload);
  auto header = [&](const char* name) {
    auto it = seen[0].headers.find(name);
    return it == seen[0].headers.end() ? std::string("<none>") : it->second;
  };
  EXPECT_EQ(header("Idempotency-Key"), e.event_id);
  EXPECT_EQ(header("Outbox-Event-Id"), e.event_id);
  EXPECT_EQ(header("Outbox-Aggregate-Type"), "order");
  EXPECT_EQ(header("Outbox-Aggregate-Id"), "42");
  EXPECT_EQ(header("Outbox-Event-Type"), "Order Changed/v2");
  EXPECT_EQ(header("Outbox-Dedup-Key"), "order-42-v2");
  EXPECT_EQ(header("Outbox-Attempt"), "3");
  EXPECT_EQ(header("traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(header("Content-Type"), "application/json");
  EXPECT_EQ(header("Authorization"), "Bearer s3cret");
  EXPECT_EQ(RenderHttpUrl(o.url_template, e.event),
            server.url("/in/order/Order%20Changed%2Fv2"));
}

TEST(HttpTransport, WithoutAContentTypeHeaderTheBodyIsOctetStream) {
  Server server([](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  HttpTransportOptions o;
  o.url_template = server.url("/events");
  auto t = Open(o);
  ASSERT_TRUE(t);
  auto results = t->Publish(std::vector<ClaimedEvent>{MakeEvent(1, "1", "x")});
  EXPECT_EQ(results[0].outcome, PublishOutcome::kAcked);
  auto seen = server.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].headers.find("Content-Type")->second, "application/octet-stream");
}

// Three aggregates of five events each, eight connections: every event
// arrives, each aggregate's in order, and never two of one aggregate at once.
TEST(HttpTransport, OneRequestInFlightPerAggregateInOrder) {
  std::mutex mu;
  std::map<std::string, int> in_flight, most;
  std::map<std::string, std::vector<std::string>> order;
  Server server([&](const httplib::Request& req, httplib::Response& res) {
    const std::string agg = req.get_header_value("Outbox-Aggregate-Id");
    {
      std::lock_guard l(mu);
      most[agg] = std::max(most[agg], ++in_flight[agg]);
      order[agg].push_back(req.body);
    }
    std::this_thread::sleep_for(5ms);
    {
      std::lock_guard l(mu);
      --in_flight[agg];
    }
    res.status = 200;
  });
  HttpTransportOptions o;
  o.url_template = server.url("/e");
  o.concurrency = 8;
  auto t = Open(o);
  ASSERT_TRUE(t);
  std::vector<ClaimedEvent> events;
  for (int n = 0; n < 5; ++n) {
    for (const std::string agg : {"a", "b", "c"}) {
      events.push_back(MakeEvent(static_cast<std::int64_t>(events.size()) + 1, agg,
                                 agg + "#" + std::to_string(n)));
    }
  }
  auto results = t->Publish(events);
  for (const auto& r : results) EXPECT_EQ(r.outcome, PublishOutcome::kAcked) << r.error;
  for (const std::string agg : {"a", "b", "c"}) {
    EXPECT_EQ(most[agg], 1) << agg;
    ASSERT_EQ(order[agg].size(), 5u) << agg;
    for (std::size_t n = 0; n < 5; ++n) EXPECT_EQ(order[agg][n], agg + "#" + std::to_string(n));
  }
}

// Outages (408, 429, 5xx) are retryable and unavailable, with Retry-After;
// any other 4xx is fatal with the status and the body's first bytes; the
// events after a failure of their aggregate are not sent; other aggregates go on.
TEST(HttpTransport, AnswersAreClassifiedAndAFailureStopsOnlyItsAggregate) {
  Server server([](const httplib::Request& req, httplib::Response& res) {
    const std::string agg = req.get_header_value("Outbox-Aggregate-Id");
    if (agg == "ok") {
      res.status = 201;
    } else if (agg == "busy") {
      res.status = 503;
      res.set_header("Retry-After", "7");
    } else if (agg == "slow-down") {
      res.status = 429;
      res.set_header("Retry-After", "2");
    } else if (agg == "timeout") {
      res.status = 408;
    } else if (agg == "gone") {
      res.status = 404;
      res.set_content(std::string("no route for this event\r\n") + std::string(500, 'z'), "text/plain");
    } else {
      res.status = 301;
    }
  });
  HttpTransportOptions o;
  o.url_template = server.url("/e");
  auto t = Open(o);
  ASSERT_TRUE(t);
  std::vector<ClaimedEvent> events = {
      MakeEvent(1, "busy", "1"),      MakeEvent(2, "ok", "2"),      MakeEvent(3, "busy", "3"),
      MakeEvent(4, "gone", "4"),      MakeEvent(5, "gone", "5"),    MakeEvent(6, "slow-down", "6"),
      MakeEvent(7, "timeout", "7"),   MakeEvent(8, "moved", "8"),   MakeEvent(9, "ok", "9")};
  auto r = t->Publish(events);
  ASSERT_EQ(r.size(), events.size());
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[0].broker_unavailable);
  EXPECT_EQ(r[0].retry_after, 7000ms);
  EXPECT_NE(r[0].error.find("HTTP 503"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kAcked);
  EXPECT_EQ(r[2].outcome, PublishOutcome::kNotSent);
  EXPECT_EQ(r[3].outcome, PublishOutcome::kFatal);
  EXPECT_NE(r[3].error.find("HTTP 404"), std::string::npos) << r[3].error;
  EXPECT_NE(r[3].error.find("no route for this event"), std::string::npos) << r[3].error;
  EXPECT_LT(r[3].error.size(), 300u) << "only the body's first bytes";
  EXPECT_EQ(r[3].error.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(r[4].outcome, PublishOutcome::kNotSent);
  EXPECT_EQ(r[5].outcome, PublishOutcome::kRetryable);
  EXPECT_EQ(r[5].retry_after, 2000ms);
  EXPECT_EQ(r[6].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[6].broker_unavailable);
  EXPECT_EQ(r[7].outcome, PublishOutcome::kFatal) << "redirects are not followed";
  EXPECT_EQ(r[8].outcome, PublishOutcome::kAcked);
  // Not sent: the server saw one request of "busy" and of "gone".
  std::map<std::string, int> requests;
  for (const auto& s : server.seen()) ++requests[s.headers.find("Outbox-Aggregate-Id")->second];
  EXPECT_EQ(requests["busy"], 1);
  EXPECT_EQ(requests["gone"], 1);
  EXPECT_EQ(requests["ok"], 2);
}

TEST(HttpTransport, ARefusedConnectionIsAnOutageAndTheTransportUnhealthy) {
  int port = 0;
  {
    Server gone([](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    port = gone.port();
  }  // nothing listens on `port` now
  HttpTransportOptions o;
  o.url_template = "http://127.0.0.1:" + std::to_string(port) + "/e";
  o.timeout = 2000ms;
  auto t = Open(o);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->Healthy());
  auto r = t->Publish(std::vector<ClaimedEvent>{MakeEvent(1, "a", "1"), MakeEvent(2, "a", "2")});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[0].broker_unavailable);
  EXPECT_NE(r[0].error.find("POST http://127.0.0.1:"), std::string::npos) << r[0].error;
  EXPECT_NE(r[0].error.find("could not connect"), std::string::npos) << "not httplib's bare name: " << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kNotSent);
  EXPECT_FALSE(t->Healthy());
}

// A server that takes longer than the timeout: the call ends by
// MaxPublishTime() all the same, the event is retryable, and the server's late
// 200 means the next attempt delivers a second copy with the same key.
TEST(HttpTransport, AStallPastTheTimeoutIsRetriedAndTheReceiverSeesTheKeyTwice) {
  std::atomic<int> calls{0};
  Server server([&](const httplib::Request&, httplib::Response& res) {
    if (calls++ == 0) std::this_thread::sleep_for(1500ms);
    res.status = 200;
  });
  HttpTransportOptions o;
  o.url_template = server.url("/e");
  o.timeout = 300ms;
  auto t = Open(o);
  ASSERT_TRUE(t);
  const std::vector<ClaimedEvent> events = {MakeEvent(1, "a", "1"), MakeEvent(2, "a", "2")};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = t->Publish(events);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, t->MaxPublishTime());
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[0].broker_unavailable);
  EXPECT_TRUE(r[0].outage_for_event);
  EXPECT_NE(r[0].error.find("no response within"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kNotSent);
  o.timeout = Scaled(5000ms);  // the retry: time for a new connection, under sanitizers too
  t = Open(o);
  ASSERT_TRUE(t);
  r = t->Publish(events);
  EXPECT_EQ(r[0].outcome, PublishOutcome::kAcked) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kAcked) << r[1].error;
  auto seen = server.seen();
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0].idempotency_key, seen[1].idempotency_key);
}

// A server that answers at once but trickles its body, a byte every 100 ms,
// so that no read ever times out: the watchdog ends the call at the deadline.
TEST(HttpTransport, ATricklingAnswerIsCutAtTheDeadline) {
  Server server([](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_chunked_content_provider("text/plain", [](std::size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(100ms);
      return sink.write("x", 1);
    });
  });
  HttpTransportOptions o;
  o.url_template = server.url("/e");
  o.timeout = 500ms;
  auto t = Open(o);
  ASSERT_TRUE(t);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = t->Publish(std::vector<ClaimedEvent>{MakeEvent(1, "a", "1")});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, t->MaxPublishTime());
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable) << r[0].error;
  EXPECT_NE(r[0].error.find("http_delivery.timeout_ms"), std::string::npos) << r[0].error;
}

// A peer that accepts and closes at once: retryable, an outage.
TEST(HttpTransport, ADroppedConnectionIsAnOutage) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::atomic<bool> stop{false};
  std::thread dropper([&] {
    while (!stop) {
      const int c = ::accept(fd, nullptr, nullptr);
      if (c >= 0) ::close(c);
    }
  });
  HttpTransportOptions o;
  o.url_template = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/e";
  o.timeout = 2000ms;
  auto t = Open(o);
  ASSERT_TRUE(t);
  auto r = t->Publish(std::vector<ClaimedEvent>{MakeEvent(1, "a", "1")});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[0].broker_unavailable) << r[0].error;
  EXPECT_NE(r[0].error.find(": connection closed "), std::string::npos) << r[0].error;  // while sending, or before the answer
  stop = true;
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  dropper.join();
}

TEST(HttpTransport, AHeaderValueWithALineBreakIsRefusedForGoodNotInjected) {
  Server server([](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  HttpTransportOptions o;
  o.url_template = server.url("/e");
  auto t = Open(o);
  ASSERT_TRUE(t);
  ClaimedEvent e = MakeEvent(1, "a", "1");
  e.event.headers = {{"note", "x\r\nX-Injected: 1"}};
  auto r = t->Publish(std::vector<ClaimedEvent>{e});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kFatal);
  EXPECT_NE(r[0].error.find("note"), std::string::npos) << r[0].error;
  EXPECT_TRUE(server.seen().empty());
}

// One destination (URL path) refusing while another answers (issue 41: a 429
// on one aggregate type's URL delayed every other type's events): its failure
// is its own — not an outage of the batch, the transport stays healthy — and it
// is backed off alone: no request until its backoff ends, then one probe, and
// on a 2xx it flows again. With no destination answering, the batch is an
// outage as before.
TEST(HttpTransport, ADestinationThatFailsWhileAnotherAnswersIsBackedOffAlone) {
  std::atomic<bool> a_up{false};
  Server server([&](const httplib::Request& req, httplib::Response& res) {
    res.status = req.path == "/in/a" && !a_up ? 503 : 200;
  });
  HttpTransportOptions o;
  o.url_template = server.url("/in/{aggregate_type}");
  o.timeout = Scaled(5000ms);
  auto t = Open(o);
  ASSERT_TRUE(t);
  auto to = [](std::int64_t seq, const std::string& type, const std::string& agg) {
    ClaimedEvent e = MakeEvent(seq, agg, "x");
    e.event.aggregate_type = type;
    return e;
  };
  auto requests_to_a = [&] {
    int n = 0;
    for (const Seen& s : server.seen()) n += s.path == "/in/a";
    return n;
  };
  ASSERT_EQ(t->Publish(std::vector<ClaimedEvent>{to(1, "b", "1")})[0].outcome, PublishOutcome::kAcked);
  auto r = t->Publish(std::vector<ClaimedEvent>{to(2, "a", "1")});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(r[0].outage_for_event);
  EXPECT_FALSE(r[0].broker_unavailable) << "b answers: not an outage of the batch";
  EXPECT_GE(r[0].retry_after, 500ms) << "due when its backoff ends";
  EXPECT_TRUE(t->Healthy()) << "/readyz is about the receiver, not one of its paths";
  EXPECT_EQ(requests_to_a(), 1);
  r = t->Publish(std::vector<ClaimedEvent>{to(3, "a", "1"), to(4, "b", "2")});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_NE(r[0].error.find("is backing off"), std::string::npos) << r[0].error;
  EXPECT_EQ(requests_to_a(), 1) << "no request while it backs off";
  EXPECT_EQ(r[1].outcome, PublishOutcome::kAcked) << "b flows";
  a_up = true;
  std::this_thread::sleep_for(600ms);  // the first backoff, 500 ms, is over: the next request probes
  r = t->Publish(std::vector<ClaimedEvent>{to(5, "a", "1"), to(6, "a", "1")});
  EXPECT_EQ(r[0].outcome, PublishOutcome::kAcked) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kAcked) << "after the probe's 2xx, at full rate: " << r[1].error;
  EXPECT_EQ(requests_to_a(), 3);

  // Nothing answers: an outage of the batch, as before.
  Server down([](const httplib::Request&, httplib::Response& res) { res.status = 503; });
  o.url_template = down.url("/in/{aggregate_type}");
  auto d = Open(o);
  ASSERT_TRUE(d);
  r = d->Publish(std::vector<ClaimedEvent>{to(7, "a", "1")});
  EXPECT_TRUE(r[0].broker_unavailable);
  EXPECT_FALSE(d->Healthy());
}

TEST(HttpTransport, BadOptionsAreRefusedNamingTheKey) {
  auto error = [](HttpTransportOptions o) {
    auto t = OpenHttpTransport(o);
    return t.ok() ? std::string("<ok>") : t.status().message();
  };
  HttpTransportOptions o;
  o.url_template = "ftp://host/x";
  EXPECT_NE(error(o).find("http_delivery.url"), std::string::npos);
  o.url_template = "http://host/{aggregate}";
  EXPECT_NE(error(o).find("unknown placeholder"), std::string::npos) << error(o);
  o.url_template = "http://{aggregate_type}.example/x";
  EXPECT_NE(error(o).find("only stand in the path"), std::string::npos) << error(o);
  o.url_template = "http://user:S3cretUrl@host/x";
  EXPECT_NE(error(o).find("http_delivery.url"), std::string::npos) << error(o);
  EXPECT_EQ(error(o).find("S3cretUrl"), std::string::npos) << "the password is never echoed: " << error(o);
  EXPECT_NE(error(o).find("user:***@host"), std::string::npos) << error(o);
  o.url_template = "http://host:99999/x";
  EXPECT_NE(error(o).find("port"), std::string::npos) << error(o);
  o.url_template = "https://host:8443/in/{event_type}";
  EXPECT_EQ(error(o), "<ok>");
  o.concurrency = 0;
  EXPECT_NE(error(o).find("http_delivery.concurrency"), std::string::npos);
  o.concurrency = 8;
  o.headers = {{"Bad Name", "v"}};
  EXPECT_NE(error(o).find("http_delivery.headers.Bad Name"), std::string::npos);
  o.headers = {{"X-Token", "a\nb"}};
  EXPECT_NE(error(o).find("http_delivery.headers.X-Token"), std::string::npos);
  o.headers = {{"idempotency-key", "x"}};
  EXPECT_NE(error(o).find("sets this header itself"), std::string::npos) << error(o);
  o.headers = {{"Outbox-Attempt", "x"}};
  EXPECT_NE(error(o).find("sets this header itself"), std::string::npos) << error(o);
  o.headers = {};
  o.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_NE(error(o).find("http_delivery.tls_ca_file"), std::string::npos);
  o.tls_ca_file = "/tmp";  // a directory
  EXPECT_NE(error(o).find("is a directory"), std::string::npos) << error(o);
  const std::string not_pem = std::filesystem::temp_directory_path() / ("not-pem-" + std::to_string(::getpid()));
  std::ofstream(not_pem) << "this is not a certificate\n";
  o.tls_ca_file = not_pem;
  EXPECT_NE(error(o).find("holds no PEM certificate"), std::string::npos) << error(o);
  std::filesystem::remove(not_pem);
}

}  // namespace
}  // namespace outbox
