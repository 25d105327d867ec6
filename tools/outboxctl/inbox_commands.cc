// outboxctl inbox migrate | status | purge: a consumer's inbox, and its stamps'
// purge past the horizon (docs/inbox.md, "Stamp retention").
#include <chrono>
#include <cmath>
#include <iostream>
#include <variant>

#include "ctl.h"
#include "outbox/kafka.h"
#include "outbox/mariadb.h"
#include "outbox/open.h"
#include "outbox/parse.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

// The stamp horizon rule (docs/inbox.md, "Stamp retention"): a stamp may go
// once it is older than the longest time a copy of its event can still arrive:
// the longest retention of the consumer's topics (main, retry, dead-letter:
// `dlt replay` copies back) and the age of the oldest event its outbox may still
// publish (PENDING, PROCESSING or FAILED: `replay` publishes FAILED ones), plus
// an hour of slack for clocks and leases.
constexpr std::chrono::seconds kStampSlack{3600};

// Creates or upgrades the inbox schema: what a consumer that keeps its own
// client needs before it calls try_apply (docs/inbox.md, "From any language").
int InboxMigrate(const Options& o) {
  if (auto bad = CheckInboxDb(o)) return *bad;
  auto inbox = OpenOperatorInbox(o, "outboxctl");
  if (!inbox.ok()) return Fail(inbox.status(), o.json);
  if (outbox::Status st = (*inbox)->Migrate(); !st.ok()) return Fail(st, o.json);
  const std::string where =
      outbox::IsMariaDbUrl(o.inbox_db) ? "the database" : "schema " + o.inbox_schema;
  if (o.json) {
    std::cout << nlohmann::json{{"inbox", where}, {"up_to_date", true}}.dump() << "\n";
  } else {
    std::cout << "inbox in " << where << ": up to date\n";
  }
  return kExitOk;
}

int InboxStatus(const Options& o) {
  if (auto bad = CheckInboxDb(o)) return *bad;
  auto inbox = OpenOperatorInbox(o, "outboxctl");
  if (!inbox.ok()) return Fail(inbox.status(), o.json);
  auto report = outbox::ctl::InboxStatusJson(**inbox);
  if (!report.ok()) return Fail(report.status(), o.json);
  if (o.json) {
    std::cout << report->dump() << "\n";
    return kExitOk;
  }
  std::printf("%-28s %12s %18s %12s %10s %18s\n", "CONSUMER", "STAMPS", "OLDEST STAMP (s)",
              "DUPLICATES", "PARKED", "OLDEST PARKED (s)");
  for (const auto& c : (*report)["consumers"]) {
    std::printf("%-28s %12lld %18lld %12lld %10lld %18lld\n", c["consumer"].get<std::string>().c_str(),
                c["stamps"].get<long long>(), c["oldest_stamp_age_seconds"].get<long long>(),
                c["duplicates"].get<long long>(), c["parked"].get<long long>(),
                c["oldest_parked_age_seconds"].get<long long>());
  }
  return kExitOk;
}

// Formats a retention for people: "7 d", "36 h", "15 m", "90 s".
std::string Span(std::chrono::seconds s) {
  const long long v = s.count();
  if (v % 86400 == 0) return std::to_string(v / 86400) + " d";
  if (v % 3600 == 0) return std::to_string(v / 3600) + " h";
  if (v % 60 == 0) return std::to_string(v / 60) + " m";
  return std::to_string(v) + " s";
}

// The broker retention the stamp horizon starts from, and where it came from.
struct Retention {
  std::chrono::seconds keep{0};
  std::string source;
};

// The longest a message of the consumer's topics may stay readable, as the
// broker reports it (--topic: retention.ms + segment.ms), or --broker-retention.
// A figure shorter than the broker's, or any figure for a topic that keeps its
// messages forever, needs --force. The exit code when refused.
std::variant<int, Retention> BrokerRetention(const Options& o) {
  std::optional<std::chrono::seconds> given;
  if (!o.broker_retention.empty()) {
    given = outbox::ParseSeconds("--broker-retention", o.broker_retention, kMaxDurationS).value();
  }
  const bool forced = given && o.force;
  const Retention own{given.value_or(std::chrono::seconds{0}), "--broker-retention (--force)"};
  if (o.purge_topics.empty()) {
    if (forced) return own;
    return Usage("inbox purge: pass --topic NAME (repeatable: the consumer's topics; their retry and "
                 "dead-letter topics are read too) so that the broker's retention decides, or "
                 "--broker-retention with --force to trust your own figure");
  }
  if (!o.kafka.count("bootstrap.servers")) {
    return Usage("inbox purge --topic: needs the broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or "
                 "--config");
  }
  std::vector<std::string> names = o.purge_topics;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  auto topics = outbox::ReadTopicRetention(o.kafka, names, o.dlt_suffix);
  if (!topics.ok()) return Fail(topics.status(), o.json);
  const outbox::TopicRetention* longest = nullptr;
  for (const auto& t : *topics) {
    if (!longest || t.keep_ms == -1 || (longest->keep_ms != -1 && t.keep_ms > longest->keep_ms)) {
      longest = &t;
    }
  }
  const std::int64_t ms = longest->keep_ms;
  const std::int64_t secs = ms / 1000 + (ms % 1000 != 0 ? 1 : 0);
  if (ms == -1 || secs > kMaxDurationS) {
    if (forced) return own;
    return Usage("inbox purge: topic " + longest->topic + " keeps messages forever (retention.ms " +
                 std::to_string(longest->retention_ms) + ", cleanup.policy " + longest->cleanup_policy +
                 "): any stamp may still be needed; nothing purged (--broker-retention D --force "
                 "purges past D anyway)");
  }
  const Retention broker{std::chrono::seconds{secs},
                         "retention.ms + segment.ms of " + longest->topic + " (" +
                             Span(std::chrono::seconds{secs}) + ")"};
  if (given && *given < broker.keep) {
    if (o.force) return own;
    return Usage("inbox purge: --broker-retention " + o.broker_retention + " is shorter than the " +
                 broker.source + ": a stamp younger than that may still be needed; nothing purged "
                 "(--force purges anyway)");
  }
  if (given && *given > broker.keep) return Retention{*given, "--broker-retention"};
  return broker;
}

int InboxPurge(const Options& o) {
  if (auto bad = CheckInboxDb(o)) return *bad;
  if (o.db.empty()) {
    return Usage("inbox purge: pass --db URL (the outbox that feeds this consumer; or set "
                 "OUTBOX_DATABASE_URL): stamps of events it may still publish are kept");
  }
  if (auto bad = CheckDb(o, "inbox purge")) return *bad;
  const auto retention = BrokerRetention(o);
  if (const int* code = std::get_if<int>(&retention)) return *code;
  const auto& [br, source] = std::get<Retention>(retention);
  // The oldest event the outbox may still publish bounds the horizon too.
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  auto oldest = (*store)->OldestUnsent();
  if (!oldest.ok()) return Fail(oldest.status(), o.json);
  std::chrono::seconds unsent_age{0};
  if (oldest->has_value()) {
    unsent_age = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - **oldest);
  }
  const std::chrono::seconds horizon = std::max(br, unsent_age) + kStampSlack;
  auto inbox = OpenOperatorInbox(o, o.consumer);
  if (!inbox.ok()) return Fail(inbox.status(), o.json);
  auto summary = (*inbox)->Summary(horizon);
  if (!summary.ok()) return Fail(summary.status(), o.json);
  std::int64_t older = 0;
  for (const auto& s : *summary) {
    if (s.consumer == o.consumer) older = s.older;
  }
  std::int64_t purged = 0;
  if (!o.dry_run) {
    outbox::tools::Progress progress;
    for (;;) {
      auto n = (*inbox)->PurgeStamps(horizon, static_cast<int>(o.batch));
      if (!n.ok()) return Fail(n.status(), o.json);
      purged += *n;
      if (*n < o.batch) break;
      progress.Update("inbox purge: " + std::to_string(purged) + " of about " + std::to_string(older) +
                      " stamps deleted ...");
    }
  }
  if (o.json) {
    std::cout << json{{"ok", true},
                      {"consumer", o.consumer},
                      {"horizon_seconds", horizon.count()},
                      {"retention_seconds", br.count()},
                      {"retention_from", source},
                      {"older", older},
                      {"purged", purged},
                      {"dry_run", o.dry_run}}
                     .dump()
              << "\n";
  } else {
    std::cout << (o.dry_run ? "would purge " + std::to_string(older) : "purged " + std::to_string(purged))
              << " stamp(s) of consumer " << o.consumer << " older than " << horizon.count()
              << " s (the horizon: the longer of the broker retention, " << source
              << ", and the oldest unsent event's age, plus 1 h)\n";
  }
  return kExitOk;
}

}  // namespace

void AddInboxCommands(CLI::App& app, Options& o, Commands& out) {
  auto* inbox = app.add_subcommand("inbox", "a consumer's inbox");
  inbox->require_subcommand(1);
  auto* inbox_migrate = inbox->add_subcommand(
      "migrate", "create/upgrade the inbox schema (idempotent): its stamps, and try_apply for "
                 "consumers that keep their own client");
  auto* inbox_status = inbox->add_subcommand("status", "stamps and parked messages per consumer");
  auto* inbox_purge = inbox->add_subcommand(
      "purge",
      "delete stamps past the horizon: the longer of the broker retention and the oldest unsent "
      "event in --db, plus 1 h");
  for (auto* sub : {inbox_migrate, inbox_status, inbox_purge}) {
    sub->add_option("--inbox-db", o.inbox_db, "the consumer's database (PostgreSQL or mysql://)")->required();
    sub->add_option("--inbox-schema", o.inbox_schema, "the inbox's PostgreSQL schema (default inbox)")
        ->check(SchemaName());
  }
  inbox_purge->add_option("--consumer", o.consumer, "the consumer whose stamps to delete")->required();
  inbox_purge->add_option("--topic", o.purge_topics,
                          "NAME (repeatable): a topic the consumer reads; its and its retry and "
                          "dead-letter topics' retention.ms are read from the broker (--bootstrap)");
  inbox_purge
      ->add_option("--broker-retention", o.broker_retention,
                   "a retention to use instead of the broker's when longer (90s, 15m, 12h, 7d); "
                   "without --topic, or shorter than the broker's, only with --force")
      ->check(tools::Duration("--broker-retention", kMaxDurationS));
  inbox_purge->add_option("--dlt-suffix", o.dlt_suffix,
                          "the consumers' dead-letter topic suffix (ConsumerOptions::dlt_suffix; "
                          "default .dlt)");
  inbox_purge->add_flag("--force", o.force,
                        "use --broker-retention even when it is shorter than the broker's, or "
                        "without asking the broker");
  inbox_purge->add_option("--batch", o.batch, "stamps per statement (default 1000)")
      ->check(CLI::Range(1LL, 1000000LL));
  inbox_purge->add_flag("--dry-run", o.dry_run, "count, delete nothing");
  out.push_back({inbox_migrate, InboxMigrate, false});
  out.push_back({inbox_status, InboxStatus, false});
  out.push_back({inbox_purge, InboxPurge, false});
}
}  // namespace outbox::ctl
