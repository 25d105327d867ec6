// Unit tests of the relay's pure parts (transition planning, backoff), the
// daemon's configuration loader, metrics rendering and topic templates.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "relay_config.h"
#include "metrics_text.h"
#include "prometheus_text.h"
#include "outbox/kafka.h"
#include "outbox/metrics.h"
#include "outbox/parse.h"
#include "plan.h"

namespace outbox {
namespace {
using testing::ExpectShortestBucketBounds;
using testing::PrometheusSample;

using relay_internal::BackoffDelay;
using relay_internal::NextStatsAt;
using relay_internal::PlanTransitions;
using std::chrono::milliseconds;

ClaimedEvent Ce(std::int64_t seq, const std::string& agg, int attempts = 1) {
  ClaimedEvent e;
  e.ticket = Ticket{seq, 7};
  e.event.aggregate_type = "order";
  e.event.aggregate_id = agg;
  e.attempts = attempts;
  return e;
}

PublishResult Acked() { return {PublishOutcome::kAcked, ""}; }
PublishResult Retry() { return {PublishOutcome::kRetryable, "REQUEST_TIMED_OUT"}; }
PublishResult Fatal() { return {PublishOutcome::kFatal, "MSG_SIZE_TOO_LARGE"}; }
PublishResult NotSent() { return {PublishOutcome::kNotSent, "not sent"}; }
PublishResult Down() { return {PublishOutcome::kRetryable, "_MSG_TIMED_OUT", true}; }
constexpr milliseconds kOutage{1234};

std::vector<std::int64_t> Seqs(const std::vector<Ticket>& t) {
  std::vector<std::int64_t> v;
  for (const auto& x : t) v.push_back(x.seq);
  return v;
}
template <typename T>
std::vector<std::int64_t> Seqs(const std::vector<T>& items) {
  std::vector<std::int64_t> v;
  for (const auto& x : items) v.push_back(x.ticket.seq);
  return v;
}

// An event acked while an earlier one of its aggregate was not (librdkafka
// timed that one out in its queue, then sent the later one) is on the topic
// out of order: counted, and said in one error line naming the first.
TEST(RecordPublish, AnEventAckedBehindAnUnackedEarlierOneIsCountedAndNamed) {
  struct Lines final : Logger {
    std::vector<std::string> text;
    void Log(LogLevel, std::string_view m, std::initializer_list<LogField> f) override {
      std::string line(m);
      for (const auto& x : f) line += " " + std::string(x.first) + "=" + x.second;
      text.push_back(line);
    }
  } log;
  MetricsRegistry registry;
  RelayMetrics metrics(registry);
  RelayOptions o;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a"), Ce(2, "b"), Ce(3, "a"), Ce(4, "a")};
  std::vector<PublishResult> r = {Down(), Acked(), Acked(), Acked()};
  const relay_internal::Plan p = PlanTransitions(ev, r, o, kOutage, rng);
  bool logged_outage = false;
  relay_internal::RecordPublish(metrics, log, "w", "broker", ev, r, p, milliseconds(1), &logged_outage);
  EXPECT_EQ(p.held_back, 2u);
  EXPECT_NE(registry.RenderPrometheus().find("outbox_relay_events_acked_out_of_order_total{transport=\"kafka\"} 2\n"),
            std::string::npos) << registry.RenderPrometheus();
  const auto line = std::find_if(log.text.begin(), log.text.end(), [](const std::string& l) {
    return l.find("out of order") != std::string::npos;
  });
  ASSERT_NE(line, log.text.end());
  EXPECT_NE(line->find("events=2 first=order/a seq 3"), std::string::npos) << *line;
  // None held back: no such line.
  log.text.clear();
  std::vector<PublishResult> fine = {Acked(), Acked(), Acked(), Acked()};
  relay_internal::RecordPublish(metrics, log, "w", "broker", ev, fine, PlanTransitions(ev, fine, o, kOutage, rng),
                milliseconds(1), &logged_outage);
  for (const auto& l : log.text) EXPECT_EQ(l.find("out of order"), std::string::npos) << l;
}

TEST(PlanTransitions, AckedGoSentRetryableRescheduledFatalFailed) {
  RelayOptions o;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a"), Ce(2, "b"), Ce(3, "c")};
  std::vector<PublishResult> r = {Acked(), Retry(), Fatal()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_EQ(Seqs(p.sent), std::vector<std::int64_t>{1});
  EXPECT_EQ(Seqs(p.reschedule), std::vector<std::int64_t>{2});
  EXPECT_EQ(Seqs(p.failed), std::vector<std::int64_t>{3});
  EXPECT_EQ(p.retryable, 1u);
  EXPECT_EQ(p.fatal, 1u);
  EXPECT_NE(p.failed[0].error.find("MSG_SIZE_TOO_LARGE"), std::string::npos);
}

TEST(PlanTransitions, LaterEventsOfABrokenAggregateGoAgainEvenIfAcked) {
  RelayOptions o;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a"), Ce(2, "a"), Ce(3, "b"), Ce(4, "a")};
  std::vector<PublishResult> r = {Retry(), Acked(), Acked(), Acked()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_EQ(Seqs(p.sent), std::vector<std::int64_t>{3});
  EXPECT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(p.held_back, 2u);
  // Unordered: each on its own.
  o.ordered = false;
  p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_EQ(Seqs(p.sent), (std::vector<std::int64_t>{2, 3, 4}));
}

TEST(PlanTransitions, MaxAttemptsTurnsARetryableIntoFailed) {
  RelayOptions o;
  o.max_attempts = 3;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a", 3), Ce(2, "a", 3), Ce(3, "b", 2)};
  std::vector<PublishResult> r = {Retry(), Acked(), Retry()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_EQ(Seqs(p.failed), std::vector<std::int64_t>{1});
  EXPECT_EQ(p.max_attempts, 1u);
  EXPECT_NE(p.failed[0].error.find("gave up after 3 attempts"), std::string::npos);
  EXPECT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{2, 3})) << "a/2 waits behind FAILED a/1";
}

TEST(PlanTransitions, PassPolicyLetsLaterEventsThroughAfterAFatalOne) {
  RelayOptions o;
  o.on_failed = FailedPolicy::kPass;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a"), Ce(2, "a")};
  std::vector<PublishResult> r = {Fatal(), Acked()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_EQ(Seqs(p.failed), std::vector<std::int64_t>{1});
  EXPECT_EQ(Seqs(p.sent), std::vector<std::int64_t>{2});
}

TEST(PlanTransitions, EventsKeptFromTheBrokerGetTheirAttemptBack) {
  RelayOptions o;
  std::mt19937_64 rng(1);
  // a/1 refused locally (too large), so the transport never produced a/2, a/3.
  std::vector<ClaimedEvent> ev = {Ce(1, "a"), Ce(2, "a"), Ce(3, "b"), Ce(4, "a")};
  std::vector<PublishResult> r = {Fatal(), NotSent(), Acked(), NotSent()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_FALSE(p.outage);
  EXPECT_EQ(Seqs(p.failed), std::vector<std::int64_t>{1});
  EXPECT_EQ(Seqs(p.sent), std::vector<std::int64_t>{3});
  ASSERT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{2, 4}));
  for (const auto& it : p.reschedule) EXPECT_FALSE(it.attempt_counts) << it.ticket.seq;
  EXPECT_EQ(p.not_sent, 2u);
  // Produced behind a failed one (the broker refused a/1 after a/2 was sent):
  // that attempt counts.
  r = {Retry(), Acked(), Acked(), NotSent()};
  p = PlanTransitions(ev, r, o, kOutage, rng);
  ASSERT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_TRUE(p.reschedule[0].attempt_counts);
  EXPECT_TRUE(p.reschedule[1].attempt_counts);
  EXPECT_FALSE(p.reschedule[2].attempt_counts);
  // Pass policy: the follower of a FAILED event goes again at once, uncounted.
  o.on_failed = FailedPolicy::kPass;
  r = {Fatal(), NotSent(), Acked(), NotSent()};
  p = PlanTransitions(ev, r, o, kOutage, rng);
  ASSERT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(p.reschedule[0].delay, milliseconds(0));
}

TEST(PlanTransitions, AnOutageBatchCountsNoAttemptAndFailsNothing) {
  RelayOptions o;
  o.max_attempts = 3;
  std::mt19937_64 rng(1);
  // At max_attempts already: an ordinary retryable error would FAIL a/1.
  std::vector<ClaimedEvent> ev = {Ce(1, "a", 3), Ce(2, "a", 3), Ce(3, "b", 1)};
  std::vector<PublishResult> r = {Down(), NotSent(), Down()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_TRUE(p.outage);
  EXPECT_TRUE(p.failed.empty());
  ASSERT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(p.outage_delay, kOutage) << "the shared backoff spaces the probes";
  for (const auto& it : p.reschedule) {
    EXPECT_FALSE(it.attempt_counts);
    EXPECT_EQ(it.delay, o.backoff_base) << "due soon: every row goes once the probe gets through";
  }
  // One event acked, or one failing for a reason of its own: not an outage.
  r = {Down(), NotSent(), Acked()};
  p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_FALSE(p.outage);
  EXPECT_EQ(Seqs(p.failed), std::vector<std::int64_t>{1});
  r = {Down(), NotSent(), Retry()};
  EXPECT_FALSE(PlanTransitions(ev, r, o, kOutage, rng).outage);
  EXPECT_FALSE(relay_internal::IsOutage(std::vector<PublishResult>{}));
}

// A server's Retry-After (HTTP 429/503) makes the rows due no sooner than it:
// an outage's rows, and an ordinary retry's.
TEST(PlanTransitions, RetryAfterDelaysTheRetryAndTheOutageBackoff) {
  RelayOptions o;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a", 1), Ce(2, "b", 1)};
  PublishResult later = Down();
  later.retry_after = milliseconds(60000);
  std::vector<PublishResult> r = {later, Down()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  ASSERT_TRUE(p.outage);
  EXPECT_EQ(p.outage_delay, milliseconds(60000));
  for (const auto& it : p.reschedule) EXPECT_EQ(it.delay, milliseconds(60000));
  // Shorter than the shared backoff: the backoff stands.
  r[0].retry_after = milliseconds(1);
  EXPECT_EQ(PlanTransitions(ev, r, o, kOutage, rng).outage_delay, kOutage);
  // Not an outage (b was acked): a's own retry waits for it.
  r = {Retry(), Acked()};
  r[0].retry_after = milliseconds(60000);
  p = PlanTransitions(ev, r, o, kOutage, rng);
  ASSERT_FALSE(p.outage);
  ASSERT_EQ(Seqs(p.reschedule), std::vector<std::int64_t>{1});
  EXPECT_EQ(p.reschedule[0].delay, milliseconds(60000));
}

// An event whose receiver was away (HTTP 503 for its aggregate) in a batch
// whose other events went through: not counted, never FAILED, however many
// attempts it has; its aggregate's followers wait behind it.
TEST(PlanTransitions, AnOutageForOneEventInABatchThatWentThroughFailsNothing) {
  RelayOptions o;
  o.max_attempts = 2;
  std::mt19937_64 rng(1);
  std::vector<ClaimedEvent> ev = {Ce(1, "a", 5), Ce(2, "a", 5), Ce(3, "b", 1)};
  PublishResult away = Down();
  away.outage_for_event = true;
  away.retry_after = milliseconds(3000);
  std::vector<PublishResult> r = {away, NotSent(), Acked()};
  auto p = PlanTransitions(ev, r, o, kOutage, rng);
  EXPECT_FALSE(p.outage);
  EXPECT_TRUE(p.failed.empty());
  EXPECT_EQ(Seqs(p.sent), std::vector<std::int64_t>{3});
  ASSERT_EQ(Seqs(p.reschedule), (std::vector<std::int64_t>{1, 2}));
  for (const auto& it : p.reschedule) EXPECT_FALSE(it.attempt_counts);
  EXPECT_EQ(p.reschedule[0].delay, std::max(kOutage, milliseconds(3000)));
  // Without the flag (Kafka: the event's own timeout), the attempt counts.
  r[0].outage_for_event = false;
  EXPECT_EQ(Seqs(PlanTransitions(ev, r, o, kOutage, rng).failed), std::vector<std::int64_t>{1});
}

TEST(BackoffDelay, GrowsExponentiallyWithJitterAndACap) {
  RelayOptions o;
  o.backoff_base = milliseconds(100);
  o.backoff_max = milliseconds(1000);
  o.backoff_jitter = 0.2;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    auto d1 = BackoffDelay(o, 1, rng).count();
    EXPECT_GE(d1, 80);
    EXPECT_LE(d1, 100);
    auto d3 = BackoffDelay(o, 3, rng).count();
    EXPECT_GE(d3, 320);
    EXPECT_LE(d3, 400);
    auto d30 = BackoffDelay(o, 30, rng).count();
    EXPECT_GE(d30, 800);
    EXPECT_LE(d30, 1000);
  }
}

// The gauges' query runs every stats_interval while it is cheap; once it takes
// more than 1/20 of that, only every 20 times what it took, and at least once a
// minute.
TEST(NextStatsAt, IsTheIntervalUntilTheQueryTakesMoreThanOneTwentiethOfItThenAMinuteAtMost) {
  RelayOptions o;
  o.stats_interval = milliseconds(2000);
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(NextStatsAt(o, t0, milliseconds(0)), t0 + milliseconds(2000));
  EXPECT_EQ(NextStatsAt(o, t0, milliseconds(100)), t0 + milliseconds(2000));
  EXPECT_EQ(NextStatsAt(o, t0, milliseconds(101)), t0 + milliseconds(2020));
  EXPECT_EQ(NextStatsAt(o, t0, milliseconds(500)), t0 + milliseconds(10000));
  EXPECT_EQ(NextStatsAt(o, t0, milliseconds(2500)), t0 + std::chrono::seconds(50));
  EXPECT_EQ(NextStatsAt(o, t0, std::chrono::seconds(5)), t0 + std::chrono::seconds(60));
  o.stats_interval = std::chrono::minutes(2);  // the operator's longer interval wins
  EXPECT_EQ(NextStatsAt(o, t0, std::chrono::seconds(5)), t0 + std::chrono::minutes(2));
}

// ---- configuration ------------------------------------------------------

const std::map<std::string, std::string> kMinimalEnv = {
    {"OUTBOX_PG_URL", "postgresql://u:pw@db/x"}, {"OUTBOX_KAFKA_BOOTSTRAP", "k:9092"}};

TEST(Config, PrecedenceIsDefaultsThenFileThenEnvThenFlags) {
  const std::string file = R"(
[relay]
batch_size = 100
workers = 3
[kafka.properties]
"linger.ms" = 7
)";
  std::map<std::string, std::string> env = kMinimalEnv;
  env["OUTBOX_RELAY_WORKERS"] = "4";
  auto c = daemon::LoadConfig(file, "relay.toml", env, {{"relay.workers", "5"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->relay.batch_size, 100);      // file
  EXPECT_EQ(c->relay.workers, 5);           // flag beats env beats file
  EXPECT_EQ(c->relay.max_attempts, 10);     // default
  EXPECT_EQ(c->kafka.properties.at("linger.ms"), "7");
  EXPECT_EQ(c->kafka.properties.at("bootstrap.servers"), "k:9092");
  EXPECT_EQ(c->database.url, "postgresql://u:pw@db/x");
}

// Secrets without the command line or a file the relay's user can list:
// librdkafka properties from OUTBOX_KAFKA_PROPERTIES_* (Confluent's naming:
// "_" is ".", "__" is "_"), and OUTBOX_X_FILE for any OUTBOX_X.
TEST(Config, KafkaPropertiesAndFileVariantsComeFromTheEnvironment) {
  const std::string dir = ::testing::TempDir();
  const std::string url_file = dir + "/outbox-db-url", pw_file = dir + "/outbox-sasl-pw";
  { std::ofstream(url_file) << "postgresql://u:secret@db/x\n"; }
  { std::ofstream(pw_file) << "s3cr3t"; }
  std::map<std::string, std::string> env = {{"OUTBOX_KAFKA_BOOTSTRAP", "k:9092"},
                                            {"OUTBOX_DATABASE_URL_FILE", url_file},
                                            {"OUTBOX_KAFKA_PROPERTIES_SECURITY_PROTOCOL", "SASL_SSL"},
                                            {"OUTBOX_KAFKA_PROPERTIES_LOG__LEVEL", "3"},
                                            {"OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD_FILE", pw_file}};
  auto c = daemon::LoadConfig("", "x", env, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->database.url, "postgresql://u:secret@db/x") << "one trailing newline dropped";
  EXPECT_EQ(c->kafka.properties.at("security.protocol"), "SASL_SSL");
  EXPECT_EQ(c->kafka.properties.at("log_level"), "3");
  EXPECT_EQ(c->kafka.properties.at("sasl.password"), "s3cr3t");
  EXPECT_EQ(daemon::PrintConfig(*c).find("s3cr3t"), std::string::npos) << "never printed";
  // Both forms of one variable, or a file that cannot be read: an error naming it.
  env["OUTBOX_DATABASE_URL"] = "postgresql://other/x";
  auto both = daemon::LoadConfig("", "x", env, {});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("OUTBOX_DATABASE_URL_FILE"), std::string::npos);
  env.erase("OUTBOX_DATABASE_URL");
  env["OUTBOX_DATABASE_URL_FILE"] = dir + "/does-not-exist";
  auto missing = daemon::LoadConfig("", "x", env, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("OUTBOX_DATABASE_URL_FILE"), std::string::npos)
      << missing.status().message();
}

// The command line (CLI11): shortcuts and --set apply in the order given (a
// later one wins), `--x=y` works, and errors name the flag.
TEST(CommandLine, OverridesKeepTheirOrderAndEqualsFormWorks) {
  auto cl = daemon::ParseCommandLine({"--db=postgresql://a@b/c", "--set", "database.url=postgresql://z@y/x",
                                      "--log-json", "--bootstrap", "k:1", "--set=relay.workers=8",
                                      "--config=/etc/outbox/relay.toml", "--migrate"});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"database.url", "postgresql://a@b/c"},
      {"database.url", "postgresql://z@y/x"},
      {"log.format", "json"},
      {"kafka.properties.bootstrap.servers", "k:1"},
      {"relay.workers", "8"}};
  EXPECT_EQ(cl->overrides, want);
  EXPECT_EQ(cl->config_path, "/etc/outbox/relay.toml");
  EXPECT_TRUE(cl->migrate);
  EXPECT_FALSE(cl->print_config);

  auto help = daemon::ParseCommandLine({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
  EXPECT_NE(help->help_text.find("--set KEY=VALUE"), std::string::npos) << help->help_text;

  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--set", "relay.workers"}, "--set"},
           {{"--set", "=8"}, "--set"},
           {{"--db"}, "--db"},
           {{"--frobnicate"}, "--frobnicate"},
           {{"stray"}, "stray"}}) {
    auto bad = daemon::ParseCommandLine(args);
    ASSERT_FALSE(bad.ok()) << args[0];
    EXPECT_NE(bad.status().message().find(flag), std::string::npos) << bad.status().message();
  }
}

TEST(Config, CdcDefaultsFollowTheSchema) {
  auto c = daemon::LoadConfig("[database]\nschema = \"billing\"\n[relay]\nsource = \"cdc\"\n",
                              "relay.toml", kMinimalEnv, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->relay.source, RelaySource::kCdc);
  EXPECT_EQ(c->relay.cdc.slot, "outbox_billing");
  EXPECT_NE(daemon::PrintConfig(*c).find("source = \"cdc\""), std::string::npos);
}

// linger.ms is the transport's default (0: publish at once) for both sources
// unless the operator sets it.
TEST(Config, LingerIsTheTransportsDefaultUnlessTheOperatorSetsIt) {
  for (const char* toml : {"[relay]\nsource = \"cdc\"\n", ""}) {
    auto c = daemon::LoadConfig(toml, "relay.toml", kMinimalEnv, {});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->kafka.properties.count("linger.ms"), 0u) << toml;
  }
  std::map<std::string, std::string> env = kMinimalEnv;
  env["OUTBOX_KAFKA_PROPERTIES_LINGER_MS"] = "3";
  auto set = daemon::LoadConfig("[relay]\nsource = \"cdc\"\n", "relay.toml", env, {});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->kafka.properties.at("linger.ms"), "3");
}

// relay.poll_max_ms defaults to 20 ms, and to relay.poll_min_ms when that is set
// higher (such a config was valid while the default was 250); set explicitly
// below poll_min_ms it is refused, naming it.
TEST(Config, PollMaxFollowsAPollMinSetAboveItsDefault) {
  auto d = daemon::LoadConfig("", "relay.toml", kMinimalEnv, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->relay.poll_max, milliseconds(20));
  auto above = daemon::LoadConfig("[relay]\npoll_min_ms = 100\n", "relay.toml", kMinimalEnv, {});
  ASSERT_TRUE(above.ok()) << above.status().ToString();
  EXPECT_EQ(above->relay.poll_max, milliseconds(100));
  auto both = daemon::LoadConfig("[relay]\npoll_min_ms = 100\npoll_max_ms = 50\n", "relay.toml",
                                 kMinimalEnv, {});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("poll_max_ms"), std::string::npos)
      << both.status().ToString();
}

// relay.transport = http: the URL is required and checked, the broker is not;
// headers come from the file, the environment and _FILE variables, and are
// never printed.
TEST(Config, HttpDeliveryNeedsItsUrlNotABrokerAndHidesItsHeaders) {
  const std::map<std::string, std::string> db = {{"OUTBOX_DATABASE_URL", "postgresql://h/db"}};
  auto no_url = daemon::LoadConfig("[relay]\ntransport = \"http\"\n", "relay.toml", db, {});
  ASSERT_FALSE(no_url.ok());
  EXPECT_NE(no_url.status().message().find("http_delivery.url"), std::string::npos);
  auto bad = daemon::LoadConfig("", "", db, {{"relay.transport", "http"},
                                             {"http_delivery.url", "http://h/{topic}"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("http_delivery.url"), std::string::npos);
  auto kind = daemon::LoadConfig("", "", db, {{"relay.transport", "smtp"}});
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("relay.transport"), std::string::npos);

  const std::string secret_file = ::testing::TempDir() + "/outbox-http-token";
  {
    std::ofstream f(secret_file);
    f << "Bearer from-a-file\n";
  }
  std::map<std::string, std::string> env = db;
  env["OUTBOX_HTTP_DELIVERY_HEADERS_AUTHORIZATION_FILE"] = secret_file;
  env["OUTBOX_HTTP_DELIVERY_TIMEOUT_MS"] = "3000";
  auto c = daemon::LoadConfig(
      "[relay]\ntransport = \"http\"\n[http_delivery]\nurl = \"https://hooks.example/in/{event_type}\"\n"
      "[http_delivery.headers]\nX-Api-Key = \"k-123\"\n",
      "relay.toml", env, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->transport, daemon::TransportKind::kHttp);
  EXPECT_EQ(c->http_delivery.url_template, "https://hooks.example/in/{event_type}");
  EXPECT_EQ(c->http_delivery.timeout, std::chrono::milliseconds(3000));
  EXPECT_TRUE(c->http_delivery.tls_verify);
  EXPECT_EQ(c->http_delivery.headers.at("authorization"), "Bearer from-a-file");
  EXPECT_EQ(c->http_delivery.headers.at("x-api-key"), "k-123") << "names in lower case";
  const std::string printed = daemon::PrintConfig(*c);
  EXPECT_EQ(printed.find("from-a-file"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("k-123"), std::string::npos) << printed;
  EXPECT_NE(printed.find("transport = \"http\""), std::string::npos) << printed;
  // A later source replaces a header whatever the case of its name; a query
  // string (a token, often) is not printed.
  auto later = daemon::LoadConfig(
      "[relay]\ntransport = \"http\"\n[http_delivery]\nurl = \"https://h/in?token=t0p\"\n"
      "[http_delivery.headers]\nAuthorization = \"from the file\"\n",
      "relay.toml", env, {});
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(later->http_delivery.headers.size(), 1u);
  EXPECT_EQ(later->http_delivery.headers.at("authorization"), "Bearer from-a-file");
  EXPECT_EQ(daemon::PrintConfig(*later).find("t0p"), std::string::npos) << daemon::PrintConfig(*later);
  std::remove(secret_file.c_str());
}

// Issue 41: with relay.transport = http, kafka.properties.*, --bootstrap and
// kafka.topic_template were accepted and ignored without a word (and
// http_delivery.url with Kafka): the relay names them in a warning at start.
TEST(Config, KeysOfTheOtherTransportAreNamed) {
  const std::map<std::string, std::string> db = {{"OUTBOX_DATABASE_URL", "postgresql://h/db"}};
  auto http = daemon::LoadConfig("[relay]\ntransport = \"http\"\n[http_delivery]\nurl = \"http://h/x\"\n"
                                 "[kafka]\ntopic_template = \"t.{aggregate_type}\"\n",
                                 "relay.toml", db, {{"kafka.properties.bootstrap.servers", "k:9092"}, {"kafka.properties.acks", "1"}});
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  EXPECT_EQ(daemon::IgnoredTransportKeys(*http),
            (std::vector<std::string>{"kafka.properties.acks", "kafka.properties.bootstrap.servers",
                                      "kafka.topic_template"}));
  auto kafka = daemon::LoadConfig("", "", kMinimalEnv, {{"http_delivery.url", "http://h/x"}});
  ASSERT_TRUE(kafka.ok()) << kafka.status().ToString();
  EXPECT_EQ(daemon::IgnoredTransportKeys(*kafka), (std::vector<std::string>{"http_delivery.url"}));
  auto plain = daemon::LoadConfig("", "", kMinimalEnv, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(daemon::IgnoredTransportKeys(*plain).empty());
}

// A secret planted in every place one can sit never shows in an error,
// whichever key the error is about (issue 41: a refused http_delivery.url
// echoed its password).
TEST(Config, NoErrorPathPrintsAPlantedSecret) {
  const std::string secret = "S3cretPlanted";
  const std::map<std::string, std::string> env = {
      {"OUTBOX_DATABASE_URL", "postgresql://app:" + secret + "@db/app"},
      {"OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD", secret},
      {"OUTBOX_HTTP_DELIVERY_HEADERS_AUTHORIZATION", "Bearer " + secret}};
  const std::vector<std::vector<std::pair<std::string, std::string>>> bad = {
      {{"relay.transport", "http"}, {"http_delivery.url", "http://u:" + secret + "@h/x"}},
      {{"relay.transport", "http"}, {"http_delivery.url", "ftp://u:" + secret + "@h/x"}},
      {{"relay.transport", "http"}, {"http_delivery.url", "http://h/x"}, {"http_delivery.timeout_ms", "x"}},
      {{"database.url", "mysql://u:" + secret + "@h:notaport/db"}, {"relay.workers", "0"}},
      {{"database.url", "postgresql://u:" + secret + "@h/db"}, {"database.schema", "bad-schema"}},
      {{"relay.workers", "many"}},
      {{"kafka.properties.bootstrap.servers", "k:9092"}, {"relay.lease_ms", "1"}},
      {{"http.listen", secret}},
  };
  int refused = 0;
  for (const auto& sets : bad) {
    auto c = daemon::LoadConfig("", "relay.toml", env, sets);
    std::string message = c.ok() ? "" : c.status().message();
    if (c.ok() && c->transport == daemon::TransportKind::kHttp) {
      auto t = OpenHttpTransport(c->http_delivery);
      if (!t.ok()) message = t.status().message();
    }
    if (message.empty()) continue;
    ++refused;
    EXPECT_EQ(message.find(secret), std::string::npos) << message;
  }
  EXPECT_GE(refused, 7) << "the cases are refused";
}

TEST(Config, ErrorsNameTheKey) {
  struct Case {
    std::string file;
    std::vector<std::pair<std::string, std::string>> flags;
    std::string needle;
  };
  std::vector<Case> cases = {
      {"[relay]\nbatchsize = 1\n", {}, "relay.batchsize"},
      {"[relay]\nbatch_size = 0\n", {}, "relay.batch_size"},
      {"[relay]\nbatch_size = \"many\"\n", {}, "relay.batch_size"},
      {"[relay]\non_failed = \"drop\"\n", {}, "relay.on_failed"},
      {"[database]\nsent_mode = \"archive\"\n", {}, "database.sent_mode"},
      {"[database]\nschema = \"Bad-Name\"\n", {}, "schema"},
      {"[kafka]\ntopic_template = \"x.{nope}\"\n", {}, "topic_template"},
      {"[http]\nlisten = \"9464\"\n", {}, "http.listen"},
      {"[http]\nlisten = \"127.0.0.1:abc\"\n", {}, "http.listen"},
      {"[http]\nlisten = \"127.0.0.1:70000\"\n", {}, "http.listen"},
      {"", {{"relay.backoff_jitter", "nan"}}, "relay.backoff_jitter"},
      {"", {{"relay.backoff_jitter", "inf"}}, "relay.backoff_jitter"},
      {"", {{"relay.workers", " 4"}}, "relay.workers"},
      {"", {{"relay.lease_ms", "60s"}}, "relay.lease_ms"},
      {"[database]\nschema = \"order\"\n", {}, "database.schema"},
      {"[database]\nschema = \"user\"\n", {}, "reserved word"},
      {"[database]\nschema = \"" + std::string(57, 's') + "\"\n", {}, "database.schema"},
      {"[database]\nschema = \"x; DROP TABLE y\"\n", {}, "database.schema"},
      {"", {{"relay.backoff_jitter", "2"}}, "relay.backoff_jitter"},
      {"", {{"relay.backoff_max_ms", "1"}}, "backoff_max_ms"},
      {"[nope]\nx = 1\n", {}, "nope.x"},
      {"[relay\n", {}, "relay.toml:1"},
      {"[relay]\nsource = \"wal\"\n", {}, "relay.source"},
      {"", {{"cdc.slot", "Bad-Slot"}}, "cdc.slot"},
      {"", {{"cdc.slot", "select"}}, "cdc.slot"},
      {"", {{"cdc.publication", "p; DROP"}}, "cdc.publication"},
      {"", {{"cdc.max_retained_wal_bytes", "-1"}}, "cdc.max_retained_wal_bytes"},
      {"", {{"cdc.max_retained_wal_bytes", "1GB"}}, "cdc.max_retained_wal_bytes"},
      {"", {{"cdc.batches_in_flight", "0"}}, "cdc.batches_in_flight"},
      {"", {{"cdc.batches_in_flight", "17"}}, "cdc.batches_in_flight"},
      {"", {{"relay.source", "cdc"}, {"cdc.stream_stale_after_ms", "500"},
            {"cdc.status_interval_ms", "1000"}}, "cdc.stream_stale_after_ms"},
  };
  for (const auto& tc : cases) {
    auto c = daemon::LoadConfig(tc.file, "relay.toml", kMinimalEnv, tc.flags);
    ASSERT_FALSE(c.ok()) << tc.file;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find(tc.needle), std::string::npos)
        << "wanted \"" << tc.needle << "\" in: " << c.status().message();
  }
  auto env_bad = kMinimalEnv;
  env_bad["OUTBOX_RELAY_LEASE_MS"] = "soon";
  auto c = daemon::LoadConfig("", "x", env_bad, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("OUTBOX_RELAY_LEASE_MS"), std::string::npos);
  auto missing = daemon::LoadConfig("", "x", {}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("database.url"), std::string::npos);
}

TEST(Config, PrintConfigRedactsEverySecretForm) {
  const std::vector<std::pair<std::string, std::string>> urls = {
      {"host=db password='two words' dbname=x", "words"},
      {"host=db password = spaced dbname=x", "spaced"},
      {"postgresql://u@db/x?sslpassword=x1y2&password=s3cret", "s3cret"},
      {"postgresql://u@db/x?sslpassword=x1y2z3&password=s3cret", "x1y2z3"},
      {"postgresql://u:pw%20d@db/x", "pw"},
  };
  for (const auto& [url, secret] : urls) {
    auto env = kMinimalEnv;
    env["OUTBOX_PG_URL"] = url;
    auto c = daemon::LoadConfig("", "x", env, {});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string out = daemon::PrintConfig(*c);
    EXPECT_EQ(out.find(secret), std::string::npos) << url << "\n" << out;
    EXPECT_NE(out.find("host="), std::string::npos) << out;
  }
  auto c = daemon::LoadConfig(
      "", "x", kMinimalEnv,
      {{"kafka.properties.sasl.oauthbearer.config", "principal=admin clientSecret=oauth-s3"},
       {"kafka.properties.ssl.key.pem", "-----BEGIN PRIVATE KEY-----pem-s3"},
       {"kafka.properties.sasl.oauthbearer.client.secret", "client-s3"}});
  ASSERT_TRUE(c.ok());
  const std::string out = daemon::PrintConfig(*c);
  for (const char* s : {"oauth-s3", "pem-s3", "client-s3"}) {
    EXPECT_EQ(out.find(s), std::string::npos) << out;
  }
}

TEST(Parse, NumbersAndDurationsAreReadExactlyOrRejected) {
  EXPECT_EQ(*ParseInteger("--batch", "1000", 1, 100000), 1000);
  for (const char* bad : {"", "abc", "12abc", " 12", "1e3", "-1", "99999999999999999999"}) {
    auto r = ParseInteger("--batch", bad, 0, 100000);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--batch"), std::string::npos);
  }
  EXPECT_EQ(ParseSeconds("--retention-s", "604800", 1LL << 40)->count(), 604800);
  EXPECT_EQ(ParseSeconds("--retention-s", "7d", 1LL << 40)->count(), 7 * 86400);
  EXPECT_EQ(ParseSeconds("--retention-s", "12h", 1LL << 40)->count(), 12 * 3600);
  EXPECT_EQ(ParseSeconds("--retention-s", "15m", 1LL << 40)->count(), 15 * 60);
  EXPECT_EQ(ParseSeconds("--retention-s", "90s", 1LL << 40)->count(), 90);
  for (const char* bad : {"", "abc", "7w", "d", "-7d", "7 d", "1.5h", "7dd"}) {
    EXPECT_FALSE(ParseSeconds("--retention-s", bad, 1LL << 40).ok()) << bad;
  }
  EXPECT_FALSE(ParseNumber("x", "nan", 0, 1).ok());
  EXPECT_FALSE(ParseNumber("x", "inf", 0, 1e9).ok());
  EXPECT_DOUBLE_EQ(*ParseNumber("x", "0.25", 0, 1), 0.25);
}

TEST(Config, PrintConfigRedactsSecretsAndRoundTrips) {
  auto c = daemon::LoadConfig("", "x", kMinimalEnv,
                              {{"kafka.properties.sasl.password", "hunter2"},
                               {"relay.batch_size", "123"}});
  ASSERT_TRUE(c.ok());
  const std::string out = daemon::PrintConfig(*c);
  EXPECT_EQ(out.find("hunter2"), std::string::npos) << out;
  EXPECT_EQ(out.find(":pw@"), std::string::npos) << out;
  EXPECT_NE(out.find("batch_size = 123"), std::string::npos) << out;
  // The printed file loads back to the same settings (secrets aside).
  auto again = daemon::LoadConfig(out, "printed", {}, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << out;
  EXPECT_EQ(again->relay.batch_size, 123);
}

// ---- metrics and topics -----------------------------------------------------

TEST(Metrics, RendersPrometheusTextFormat) {
  MetricsRegistry r;
  r.AddCounter("x_total", "X things.", "class=\"a\"").Inc(3);
  r.AddCounter("x_total", "X things.", "class=\"b\"").Inc();
  r.AddGauge("y", "Y.").Set(1.5);
  Histogram& h = r.AddHistogram("z_seconds", "Z.", {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  const std::string out = r.RenderPrometheus();
  EXPECT_NE(out.find("# TYPE x_total counter\nx_total{class=\"a\"} 3\nx_total{class=\"b\"} 1\n"),
            std::string::npos) << out;
  EXPECT_NE(out.find("y 1.5\n"), std::string::npos);
  EXPECT_NE(out.find("z_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("z_seconds_bucket{le=\"+Inf\"} 3\nz_seconds_sum 5.5"), std::string::npos) << out;
  EXPECT_EQ(h.Quantile(0.5), 1);
}

// Every histogram the relay exports prints its bucket bounds as the shortest
// decimal (le="0.0025", not le="0.0025000000000000001").
TEST(Metrics, TheRelaysHistogramBoundsAreShortestDecimals) {
  MetricsRegistry r;
  RelayMetrics metrics(r);
  const std::string out = r.RenderPrometheus();
  EXPECT_EQ(ExpectShortestBucketBounds(out), 27) << out;  // claim_batch_rows 12, commit_to_ack 15
  EXPECT_NE(out.find("outbox_relay_commit_to_ack_seconds_bucket{transport=\"kafka\",le=\"0.0025\"} 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("outbox_relay_commit_to_ack_seconds_bucket{transport=\"kafka\",le=\"0.05\"} 0\n"), std::string::npos) << out;
}

// Every outbox_relay_* sample carries the transport's label; the tests' reader
// matches a name, or a name with some of its labels.
TEST(Metrics, EveryRelaySampleCarriesTheTransport) {
  MetricsRegistry r;
  RelayMetrics metrics(r, "outbox", "http");
  metrics.publish_fatal.Inc(2);
  metrics.publish_retryable.Inc(3);
  const std::string out = r.RenderPrometheus();
  int relay_samples = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("outbox_relay_", 0) != 0) continue;
    ++relay_samples;
    EXPECT_NE(line.find("{transport=\"http\""), std::string::npos) << line;
  }
  EXPECT_GT(relay_samples, 40);
  EXPECT_EQ(PrometheusSample(out, "outbox_relay_publish_failures_total"), 5);
  EXPECT_EQ(PrometheusSample(out, "outbox_relay_publish_failures_total{class=\"fatal\"}"), 2);
  EXPECT_EQ(PrometheusSample(out, "outbox_relay_publish_failures_total{transport=\"http\",class=\"retriable\"}"), 3);
  EXPECT_EQ(PrometheusSample(out, "outbox_relay_publish_failures_total{transport=\"kafka\"}"), -1);
  EXPECT_EQ(PrometheusSample(out, "outbox_relay_publish_failures"), -1) << "a name is matched whole";
  EXPECT_EQ(PrometheusSample(out, "outbox_rows{state=\"pending\"}"), 0) << "no transport on the table's gauges";
}

TEST(TopicTemplate, ValidatesAndRenders) {
  EXPECT_TRUE(ValidateTopicTemplate("outbox.event.{aggregate_type}").ok());
  EXPECT_TRUE(ValidateTopicTemplate("{aggregate_type}.{event_type}").ok());
  EXPECT_FALSE(ValidateTopicTemplate("").ok());
  EXPECT_FALSE(ValidateTopicTemplate("a b").ok());
  EXPECT_FALSE(ValidateTopicTemplate("x.{aggregate_type").ok());
  EXPECT_FALSE(ValidateTopicTemplate("x.{id}").ok());
  Event e;
  e.aggregate_type = "order";
  e.event_type = "Order Created/v2";
  EXPECT_EQ(RenderTopic("outbox.event.{aggregate_type}", e), "outbox.event.order");
  EXPECT_EQ(RenderTopic("{aggregate_type}.{event_type}", e), "order.Order_Created_v2");
}

// --- The change stream's pick (relay.source = cdc). ---

StreamRowState Row(std::int64_t seq, RowState st, bool held = false, bool due = true) {
  StreamRowState r;
  r.seq = seq;
  r.state = st;
  r.held = held;
  r.earlier_unsent = held ? 1 : 0;
  r.due = due;
  r.attempts = 2;
  return r;
}

std::vector<std::int64_t> Seqs(const std::vector<ClaimedEvent>& events) {
  std::vector<std::int64_t> out;
  for (const auto& e : events) out.push_back(e.ticket.seq);
  return out;
}

TEST(PickStreamed, PublishesPendingRowsWithTokenZeroAndTheRowsAttemptsPlusOne) {
  auto pick = relay_internal::PickStreamed({Ce(1, "a"), Ce(2, "b")},
                                           std::vector{Row(1, RowState::kPending),
                                                       Row(2, RowState::kPending)},
                                           true, true);
  EXPECT_EQ(Seqs(pick.publish), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(pick.publish[0].ticket.token, 0);
  EXPECT_EQ(pick.publish[0].attempts, 3);
}

TEST(PickStreamed, SentAndSkippedRowsAreDoneAndDoNotBlock) {
  auto pick = relay_internal::PickStreamed(
      {Ce(1, "a"), Ce(2, "a"), Ce(3, "a")},
      std::vector{Row(1, RowState::kSent), Row(2, RowState::kSkipped), Row(3, RowState::kPending)},
      true, true);
  EXPECT_EQ(pick.already_done, 2u);
  EXPECT_EQ(Seqs(pick.publish), (std::vector<std::int64_t>{3}));
}

TEST(PickStreamed, AnUnpublishableRowBlocksTheRestOfItsAggregateOnly) {
  // a: 1 in a sweeper's hands -> 2 (pending) must wait; b is not affected.
  auto pick = relay_internal::PickStreamed(
      {Ce(1, "a"), Ce(2, "a"), Ce(3, "b"), Ce(4, "a")},
      std::vector{Row(1, RowState::kProcessing), Row(2, RowState::kPending),
                  Row(3, RowState::kPending), Row(4, RowState::kPending)},
      true, true);
  EXPECT_EQ(Seqs(pick.publish), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(Seqs(pick.park), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(pick.left_to_sweeper, 1u);
}

TEST(PickStreamed, HeldOrNotDueRowsAreParkedAndBlock) {
  auto pick = relay_internal::PickStreamed(
      {Ce(1, "a"), Ce(2, "a"), Ce(3, "b"), Ce(4, "b")},
      std::vector{Row(1, RowState::kPending, /*held=*/true), Row(2, RowState::kPending),
                  Row(3, RowState::kPending, false, /*due=*/false), Row(4, RowState::kPending)},
      true, true);
  EXPECT_TRUE(pick.publish.empty());
  EXPECT_EQ(Seqs(pick.park), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

TEST(PickStreamed, ARowNotYetVisibleIsParkedAndBlocksItsAggregate) {
  auto pick = relay_internal::PickStreamed({Ce(1, "a"), Ce(2, "a"), Ce(3, "b")},
                                           std::vector{Row(2, RowState::kPending),
                                                       Row(3, RowState::kPending)},
                                           true, true);
  EXPECT_EQ(Seqs(pick.publish), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(Seqs(pick.park), (std::vector<std::int64_t>{1, 2}));
}

TEST(PickStreamed, FailedBlocksUnderHoldNotUnderPassAndUnorderedNeverBlocks) {
  const std::vector<StreamRowState> states = {Row(1, RowState::kFailed), Row(2, RowState::kPending)};
  auto hold = relay_internal::PickStreamed({Ce(1, "a"), Ce(2, "a")}, states, true, true);
  EXPECT_TRUE(hold.publish.empty());
  EXPECT_EQ(hold.left_to_sweeper, 1u);
  auto pass = relay_internal::PickStreamed({Ce(1, "a"), Ce(2, "a")}, states, true, false);
  EXPECT_EQ(Seqs(pass.publish), (std::vector<std::int64_t>{2}));
  const std::vector<StreamRowState> busy = {Row(1, RowState::kProcessing),
                                            Row(2, RowState::kPending)};
  auto unordered = relay_internal::PickStreamed({Ce(1, "a"), Ce(2, "a")}, busy, false, true);
  EXPECT_EQ(Seqs(unordered.publish), (std::vector<std::int64_t>{2}));
}

// relay.transport = rabbitmq: the URL from OUTBOX_RABBITMQ_URL_FILE, never
// printed with its password; a missing URL is an error naming the key.
TEST(RelayConfig, RabbitMqUrlComesFromAFileAndIsPrintedWithoutItsPassword) {
  const std::string file = ::testing::TempDir() + "/amqp_url";
  { std::ofstream(file) << "amqps://outbox:pa55word@rabbit.internal/orders\n"; }
  std::map<std::string, std::string> env = {{"OUTBOX_RELAY_TRANSPORT", "rabbitmq"},
                                            {"OUTBOX_RABBITMQ_URL_FILE", file}};
  auto c = daemon::LoadConfig("", "x", env, {{"database.url", "postgresql://db/x"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rabbitmq.url, "amqps://outbox:pa55word@rabbit.internal/orders");
  const std::string printed = daemon::PrintConfig(*c);
  EXPECT_EQ(printed.find("pa55word"), std::string::npos) << printed;
  EXPECT_NE(printed.find("amqps://outbox:***@rabbit.internal/orders"), std::string::npos) << printed;
  env.erase("OUTBOX_RABBITMQ_URL_FILE");
  auto missing = daemon::LoadConfig("", "x", env, {{"database.url", "postgresql://db/x"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("rabbitmq.url is required"), std::string::npos);
}

}  // namespace
}  // namespace outbox
