// outboxctl: operator commands against an outbox database (and a consumer's inbox).
//
//   outboxctl [--config FILE] [--db URL] [--schema S] [--json] COMMAND [OPTIONS]
//     migrate | status | list | replay | skip | purge | trace KEY
//     dlt replay | inbox status | inbox purge | serve (the dashboard, serve.cc)
//   outboxctl --help, outboxctl COMMAND --help   (on stdout)
//
// Parsed with CLI11: every value is typed and range-checked before anything
// touches a database or a broker (exit 2 naming the flag); `--x=y` works; the
// global options may also come after the command.
//
// Every command also takes --config FILE: the relay's configuration file, read
// the relay's way (file < OUTBOX_* variables and their _FILE forms < flags), so
// --db, --schema and the broker's properties (TLS, SASL for dlt replay) come
// from where the relay takes them; --db falls back to $OUTBOX_DATABASE_URL or
// $OUTBOX_PG_URL, --bootstrap to $OUTBOX_KAFKA_BOOTSTRAP. Exit codes: 0 success
// (trace: found), 1 the operation failed (database or broker unreachable, SQL
// error), 2 bad usage, 3 trace or skip: no such event, 4 migrate --check: an
// object differs from what the migrations install, 5 migrate --check:
// migrations pending or newer than this binary.
//
// --json prints one JSON object per run; counts, sequence numbers, attempts,
// ages, partitions and offsets are JSON numbers.
//
// Every database access goes through the store's operations (Store,
// InboxView): this tool has no SQL of its own.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "cli.h"
#include "config.h"  // outbox::config
#include "ops.h"
#include "serve.h"
#include "outbox/kafka.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/open.h"
#include "outbox/parse.h"
#include "outbox/postgres.h"
#include "outbox/postgres_inbox.h"
#include "outbox/version.h"

namespace {

using nlohmann::json;
using outbox::tools::kExitUsage;

constexpr int kExitOk = 0, kExitFailed = 1, kExitNotFound = 3;
// migrate --check: the schema differs from what its migrations install (4), or
// it is behind or ahead of this binary's migrations (5).
constexpr int kExitDrift = 4, kExitVersions = 5;
constexpr long long kMaxDurationS = 100LL * 365 * 86400;

int Usage(const std::string& error) {
  std::cerr << "outboxctl: " << error << "\nrun `outboxctl --help` for usage\n";
  return kExitUsage;
}

int Fail(const std::string& msg, bool json_out) {
  if (json_out) std::cout << json{{"ok", false}, {"error", msg}}.dump() << "\n";
  std::cerr << "outboxctl: " << msg << "\n";
  return kExitFailed;
}
int Fail(const outbox::Status& st, bool json_out) { return Fail(st.ToString(), json_out); }

// What the command line gave, typed. Global options first, then each command's.
struct Options {
  std::string config, db, schema, bootstrap;
  bool json = false;
  bool check = false;  // migrate --check
  // list
  std::string state, aggregate, type, older_than;
  long long limit = 100;
  // replay, skip
  std::string event_id, reason, by;
  bool failed = false, dry_run = false;
  // purge, inbox purge
  std::string retention = "604800";
  long long batch = 1000;
  // trace
  std::string key, inbox_db, inbox_schema = "inbox";
  // dlt replay
  std::string topic, dlt_key;
  long long since_ms = -1, until_ms = -1;
  // inbox purge
  std::string consumer, broker_retention;
  std::vector<std::string> purge_topics;
  std::string dlt_suffix = ".dlt";
  bool force = false;
  // serve
  std::string listen = "127.0.0.1:8089", token_file;
  std::vector<std::string> consumers;  // GROUP=TOPIC[,TOPIC...]
  std::vector<std::string> allowed_hosts;
  std::string public_url;
  // From the relay's configuration (--config, OUTBOX_*): the database, and the
  // librdkafka properties `dlt replay` connects with (TLS, SASL).
  std::map<std::string, std::string> kafka;
};

// What outboxctl reads of the relay's configuration file (docs/relay.md):
// [database] and [kafka.properties]. The relay's own sections are the relay's
// to check (outbox-relay --print-config); here they are accepted and ignored.
struct CtlConfig {
  outbox::StoreOptions database;
  std::map<std::string, std::string> kafka;
};

const outbox::config::Schema<CtlConfig>& CtlSchema() {
  static const outbox::config::Schema<CtlConfig> schema = [] {
    outbox::config::Schema<CtlConfig> s;
    s.docs = "docs/relay.md";
    outbox::config::AddDatabaseKeys<CtlConfig>(
        s, [](CtlConfig& c) -> outbox::StoreOptions& { return c.database; });
    outbox::config::AddKafkaProperties<CtlConfig>(
        s, [](CtlConfig& c) -> std::map<std::string, std::string>& { return c.kafka; });
    s.ignored_prefixes = {"relay.", "cdc.", "retention.", "http.", "http_delivery.", "log.",
                          "kafka.topic_template"};
    return s;
  }();
  return schema;
}

std::string Text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

using outbox::ctl::ToRow;

void PrintRows(const json& rows, const std::vector<std::string>& cols) {
  auto cell = [](const json& r, const std::string& c) {
    return r.contains(c) && !r[c].is_null() ? Text(r[c]) : std::string();
  };
  std::vector<std::size_t> w(cols.size());
  for (std::size_t j = 0; j < cols.size(); ++j) {
    w[j] = cols[j].size();
    for (const auto& r : rows) w[j] = std::max(w[j], std::min<std::size_t>(60, cell(r, cols[j]).size()));
  }
  auto line = [&](auto get) {
    std::string out;
    for (std::size_t j = 0; j < cols.size(); ++j) {
      std::string v = get(j).substr(0, 60);
      out += v + std::string(w[j] - std::min(w[j], v.size()) + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::cout << out << "\n";
  };
  line([&](std::size_t j) {
    std::string h = cols[j];
    for (auto& ch : h) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return h;
  });
  for (const auto& r : rows) line([&](std::size_t j) { return cell(r, cols[j]); });
}

// The stamp horizon rule (docs/inbox.md, "Stamp retention"): a stamp may go
// once it is older than the longest time a copy of its event can still arrive:
// the longest retention of the consumer's topics (main, retry, dead-letter:
// `dlt replay` copies back) and the age of the oldest event its outbox may still
// publish (PENDING, PROCESSING or FAILED: `replay` publishes FAILED ones), plus
// an hour of slack for clocks and leases.
constexpr std::chrono::seconds kStampSlack{3600};

outbox::Result<std::unique_ptr<outbox::Store>> OpenOutboxStore(const Options& o) {
  return outbox::ctl::OpenOutboxStore(o.db, o.schema);
}

outbox::Result<std::unique_ptr<outbox::InboxView>> OpenOperatorInbox(const Options& o,
                                                                      const std::string& consumer) {
  return outbox::ctl::OpenOperatorInbox(o.inbox_db, o.inbox_schema, consumer);
}

// The database URL is needed and well-formed; exit code, or nullopt.
std::optional<int> CheckDb(const Options& o, const std::string& command) {
  if (o.db.empty()) {
    return Usage(command + ": no database: pass --db URL, set OUTBOX_DATABASE_URL (or OUTBOX_PG_URL), "
                 "or --config a file with database.url");
  }
  if (auto st = outbox::ValidateSchemaName(o.schema); !st.ok()) return Usage("--schema: " + st.message());
  if (outbox::IsMariaDbUrl(o.db)) {
    if (auto st = outbox::ValidateMariaDbUrl(o.db); !st.ok()) return Usage("--db: " + st.message());
  }
  return std::nullopt;
}

std::optional<int> CheckInboxDb(const Options& o) {
  if (outbox::IsMariaDbUrl(o.inbox_db)) {
    if (auto st = outbox::ValidateMariaDbUrl(o.inbox_db); !st.ok()) return Usage("--inbox-db: " + st.message());
  }
  return std::nullopt;
}

std::string VersionList(const std::vector<int>& versions) {
  std::string out;
  for (int v : versions) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

// migrate --check: reads, changes nothing.
int MigrateCheck(const Options& o) {
  auto check = outbox::CheckSchema({.url = o.db, .schema = o.schema});
  if (!check.ok()) return Fail(check.status(), o.json);
  const int code = !check->drift.empty()                                    ? kExitDrift
                   : (!check->pending.empty() || !check->unknown.empty()) ? kExitVersions
                                                                            : kExitOk;
  const std::string where = outbox::IsMariaDbUrl(o.db) ? "database" : "schema " + o.schema;
  if (o.json) {
    std::cout << json{{"ok", code == kExitOk}, {"schema", o.schema}, {"applied", check->applied},
                      {"pending", check->pending}, {"unknown", check->unknown},
                      {"drift", check->drift}}
                     .dump()
              << "\n";
    return code;
  }
  for (const std::string& line : check->drift) std::cout << "drift: " << line << "\n";
  if (!check->pending.empty()) {
    std::cout << where << ": migrations " << VersionList(check->pending)
              << " not applied (run `outboxctl migrate`)\n";
  }
  if (!check->unknown.empty()) {
    std::cout << where << ": versions " << VersionList(check->unknown)
              << " are from a newer release than this outboxctl\n";
  }
  if (code == kExitOk) {
    std::cout << where << " matches migrations 1-" << check->applied.back() << "\n";
  } else if (code == kExitDrift) {
    std::cout << where << ": " << check->drift.size()
              << " object(s) differ from what the migrations install\n";
  }
  return code;
}

int Migrate(const Options& o) {
  if (o.check) return MigrateCheck(o);
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  auto applied = (*store)->Migrate();
  if (!applied.ok()) return Fail(applied.status(), o.json);
  const std::string where = outbox::IsMariaDbUrl(o.db) ? "database" : "schema " + o.schema;
  if (o.json) {
    std::cout << json{{"ok", true}, {"schema", o.schema}, {"applied", *applied}}.dump() << "\n";
  } else if (applied->empty()) {
    std::cout << where << " is up to date: no migration to apply\n";
  } else {
    std::string versions;
    for (int v : *applied) versions += (versions.empty() ? "" : ", ") + std::to_string(v);
    std::cout << where << ": applied migration" << (applied->size() == 1 ? " " : "s ") << versions
              << "; it is up to date\n";
  }
  return kExitOk;
}

int Status(const Options& o) {
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  auto r = outbox::ctl::StatusReport(**store, o.schema);
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << r->dump() << "\n";
    return kExitOk;
  }
  std::printf("%-28s %12s\n", "STATE", "ROWS");
  for (const auto& [name, key] : std::vector<std::pair<const char*, const char*>>{
           {"PENDING", "pending"}, {"PROCESSING", "processing"}, {"SENT", "sent"},
           {"FAILED", "failed"},   {"SKIPPED", "skipped"},       {"held aggregates", "held_aggregates"}}) {
    std::printf("%-28s %12lld\n", name, (*r)[key].get<long long>());
  }
  std::printf("%-28s %12.3f\n", "oldest unsent age (s)", (*r)["oldest_unsent_age_seconds"].get<double>());
  return kExitOk;
}

int Purge(const Options& o) {
  const auto retention = outbox::ParseSeconds("--retention-s", o.retention, kMaxDurationS).value();
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  outbox::tools::Progress progress;
  std::int64_t total = 0;
  for (;;) {
    auto n = (*store)->PurgeSent(retention, static_cast<int>(o.batch));
    if (!n.ok()) return Fail(n.status(), o.json);
    total += *n;
    if (*n < o.batch) break;
    progress.Update("purge: " + std::to_string(total) + " SENT rows deleted so far ...");
  }
  progress.Done();
  if (o.json) {
    std::cout << json{{"ok", true}, {"purged", total}}.dump() << "\n";
  } else {
    std::cout << "purged " << total << " SENT rows older than " << retention.count() << " s\n";
  }
  return kExitOk;
}

int Replay(const Options& o) {
  if (o.event_id.empty() && !o.failed) {
    return Usage("replay: pass --event-id ID, or --failed (with optional --aggregate/--type filters)");
  }
  outbox::ReplaySelection sel;
  sel.event_id = o.event_id;
  sel.aggregate_id = o.aggregate;
  sel.event_type = o.type;
  sel.dry_run = o.dry_run;
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  outbox::tools::Progress progress;
  progress.Update(std::string("replay: ") + (sel.dry_run ? "counting" : "moving") +
                  " FAILED rows back to PENDING (one statement) ...");
  auto r = outbox::ctl::ReplayReport(**store, sel);
  progress.Done();
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << r->dump() << "\n";
    return kExitOk;
  }
  std::cout << (sel.dry_run ? "would replay " + Text((*r)["matched"])
                            : "replayed " + Text((*r)["replayed"]))
            << " FAILED row(s): back to PENDING, due now\n";
  if ((*r)["matched"].get<long long>() > 0) {
    std::cout << "the oldest was enqueued " << Text((*r)["oldest_age_seconds"])
              << " s ago: consumers must still hold inbox stamps that old, or they may "
                 "apply an earlier copy again (docs/inbox.md, \"Stamp retention\")\n";
  }
  return kExitOk;
}

int Skip(const Options& o) {
  outbox::SkipRequest req;
  req.event_id = o.event_id;
  req.by = o.by;
  if (req.by.empty()) {
    const char* user = std::getenv("USER");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    req.by = std::string(user ? user : "unknown") + "@" + host + " (outboxctl)";
  }
  req.reason = o.reason.empty() ? "skipped by an operator (no reason given)" : o.reason;
  req.dry_run = o.dry_run;
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  auto report = outbox::ctl::SkipReport(**store, req);
  if (!report.ok()) return Fail(report.status(), o.json);
  const std::string was = (*report)["was"].get<std::string>();
  if (was.empty()) {
    if (o.json) std::cout << json{{"ok", false}, {"error", "no such event"}}.dump() << "\n";
    std::cerr << "outboxctl: skip: no event with id " << o.event_id << "\n";
    return kExitNotFound;
  }
  if (was != "FAILED" && was != "PENDING") {
    return Fail("skip: event " + o.event_id + " is " + was +
                    "; only FAILED or PENDING events can be skipped (nothing changed)",
                o.json);
  }
  if (o.json) {
    std::cout << report->dump() << "\n";
  } else {
    std::cout << (req.dry_run ? "would skip " : "skipped ") << was << " event " << o.event_id
              << ": SKIPPED (kept for audit); later events of its aggregate go ahead\n";
  }
  return kExitOk;
}

int List(const Options& o) {
  outbox::ListFilter f;
  f.state = o.state;
  f.aggregate_id = o.aggregate;
  f.event_type = o.type;
  if (!o.older_than.empty()) {
    f.older_than = outbox::ParseSeconds("--older-than", o.older_than, kMaxDurationS).value();
  }
  f.limit = static_cast<int>(o.limit);
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  auto r = outbox::ctl::ListReport(**store, f);
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << r->dump() << "\n";
  } else {
    PrintRows((*r)["rows"], {"seq", "event_id", "aggregate_type", "aggregate_id", "event_type", "status",
                     "attempts", "age_s", "last_error"});
  }
  return kExitOk;
}

int Trace(const Options& o) {
  if (auto bad = CheckInboxDb(o)) return *bad;
  auto store = OpenOutboxStore(o);
  if (!store.ok()) return Fail(store.status(), o.json);
  std::unique_ptr<outbox::InboxView> inbox;
  if (!o.inbox_db.empty()) {
    auto opened = OpenOperatorInbox(o, "outboxctl");
    if (!opened.ok()) return Fail("the inbox database: " + opened.status().ToString(), o.json);
    inbox = std::move(opened).value();
  }
  auto report = outbox::ctl::TraceReport(**store, inbox.get(), o.key);
  if (!report.ok()) return Fail(report.status(), o.json);
  const json& out = *report;
  const json& rows = out["outbox"];
  const json stamps = out.contains("inbox") ? out["inbox"] : json::array();
  if (o.json) {
    std::cout << out.dump() << "\n";
  } else if (rows.empty()) {
    std::cout << "no event with id or dedup key \"" << o.key << "\" in " << o.schema
              << ".outbox (never enqueued, rolled back, or already purged)\n";
  } else {
    for (const auto& r : rows) {
      std::cout << "event " << Text(r["event_id"]) << " (seq " << Text(r["seq"]) << ")\n";
      for (const char* k : {"aggregate_type", "aggregate_id", "event_type", "dedup_key", "status",
                            "attempts", "lease_owner", "last_error", "created_at", "claimed_at",
                            "sent_at", "failed_at", "skipped_at", "skipped_by", "skip_reason",
                            "payload_bytes", "headers", "payload"}) {
        const std::string v = r.contains(k) ? Text(r[k]) : "";
        if (!v.empty()) std::printf("  %-15s %s\n", k, v.c_str());
      }
      const std::string st = Text(r["status"]);
      std::cout << "  => " << (st == "SENT"         ? "published to the broker (acked)"
                               : st == "FAILED"     ? "set aside: see last_error; `outboxctl replay --event-id` after fixing the cause"
                               : st == "SKIPPED"    ? "set aside for good by an operator (see skipped_by, skip_reason); never published by the relay"
                               : st == "PROCESSING" ? "claimed by a relay, being published"
                                                    : "waiting for a relay (check `outboxctl status` and the relay)")
                << "\n";
    }
    if (!o.inbox_db.empty()) {
      if (stamps.empty()) {
        std::cout << "inbox: not applied by any consumer of that database (no stamp)\n";
      }
      for (const auto& s : stamps) {
        std::cout << "inbox: applied by consumer \"" << Text(s["consumer"]) << "\" at "
                  << Text(s["applied_at"]) << " (from " << Text(s["topic"]) << "/"
                  << Text(s["partition"]) << "@" << Text(s["offset"])
                  << "); later copies absorbed: " << Text(s["duplicates"]) << "\n";
      }
    }
  }
  return rows.empty() ? kExitNotFound : kExitOk;
}

int DltReplay(const Options& o) {
  if (!o.kafka.count("bootstrap.servers")) {
    return Usage("dlt replay: no broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config "
                 "a file with kafka.properties.bootstrap.servers");
  }
  outbox::ReplayFilter f;
  f.key = o.dlt_key;
  if (o.since_ms >= 0) f.since = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.since_ms));
  if (o.until_ms >= 0) f.until = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.until_ms));
  outbox::tools::Progress progress;
  auto r = outbox::ReplayDeadLetters(o.kafka, o.topic, f, o.dry_run,
                                     [&](std::uint64_t scanned, std::uint64_t matched) {
                                       progress.Update("dlt replay: " + std::to_string(scanned) +
                                                       " scanned, " + std::to_string(matched) +
                                                       " to replay ...");
                                     });
  progress.Done();
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << json{{"ok", true},
                      {"topic", o.topic},
                      {"scanned", r->scanned},
                      {"replayed", r->replayed},
                      {"not_replayable", r->not_replayable},
                      {"dry_run", o.dry_run}}
                     .dump()
              << "\n";
  } else {
    std::cout << (o.dry_run ? "would replay " : "replayed ") << r->replayed << " of " << r->scanned
              << " dead-lettered messages from " << o.topic << "\n";
    for (const std::string& n : r->not_replayable) std::cout << "not replayed: " << n << "\n";
  }
  return kExitOk;
}

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

// The token for the dashboard's actions: --token-file, else the environment;
// never a flag's value (it would show in `ps`). Bad values exit 2.
std::optional<int> LoadToken(const Options& o, std::string* token) {
  if (!o.token_file.empty()) {
    auto text = outbox::config::ReadFile(o.token_file);
    if (!text.ok()) return Usage("--token-file: " + text.status().message());
    *token = *text;
  } else if (const char* env = std::getenv("OUTBOX_DASHBOARD_TOKEN")) {
    *token = env;
  }
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r' || token->back() == ' ')) {
    token->pop_back();
  }
  const char* from = o.token_file.empty() ? "OUTBOX_DASHBOARD_TOKEN" : "--token-file";
  if (!token->empty() && token->size() < 16) {
    return Usage(std::string(from) + ": the token is too short (at least 16 characters)");
  }
  for (char c : *token) {
    if (c < 0x21 || c > 0x7e) {
      return Usage(std::string(from) + ": the token must be printable ASCII without spaces");
    }
  }
  if (!o.token_file.empty() && token->empty()) return Usage("--token-file: the file is empty");
  return std::nullopt;
}

int Serve(const Options& o) {
  outbox::ctl::ServeOptions so;
  so.db = o.db;
  so.schema = o.schema;
  so.inbox_db = o.inbox_db;
  so.inbox_schema = o.inbox_schema;
  so.kafka = o.kafka;
  const auto colon = o.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return Usage("--listen: expected host:port, got " + o.listen);
  so.host = o.listen.substr(0, colon);
  if (so.host.size() > 2 && so.host.front() == '[' && so.host.back() == ']') {
    so.host = so.host.substr(1, so.host.size() - 2);
  }
  auto port = outbox::ParseInteger("--listen port", o.listen.substr(colon + 1), 0, 65535);
  if (!port.ok()) return Usage(port.status().message());
  so.port = static_cast<int>(*port);
  for (const std::string& c : o.consumers) {
    const auto eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
      return Usage("--consumer: expected GROUP=TOPIC[,TOPIC...], got " + c);
    }
    std::vector<std::string>& topics = so.consumers[c.substr(0, eq)];
    std::string rest = c.substr(eq + 1);
    for (std::size_t at = 0; at <= rest.size();) {
      const auto comma = std::min(rest.find(',', at), rest.size());
      if (comma == at) return Usage("--consumer: an empty topic name in " + c);
      topics.push_back(rest.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (!so.consumers.empty()) {
    const auto b = so.kafka.find("bootstrap.servers");
    if (b == so.kafka.end() || b->second.empty()) {
      return Usage("--consumer: needs the broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config");
    }
  }
  for (const std::string& h : o.allowed_hosts) {
    auto name = outbox::ctl::HostNameOnly("--allowed-host", h);
    if (!name.ok()) return Usage(name.status().message());
    so.allowed_hosts.push_back(*name);
  }
  if (!o.public_url.empty()) {
    auto origin = outbox::ctl::PublicOrigin(o.public_url, &so.allowed_hosts);
    if (!origin.ok()) return Usage(origin.status().message());
    so.public_origin = *origin;
  }
  if (auto bad = CheckInboxDb(o)) return *bad;
  if (auto bad = LoadToken(o, &so.token)) return *bad;
  return outbox::ctl::Serve(so);
}

CLI::Validator SchemaName() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        auto st = outbox::ValidateSchemaName(v);
        return st.ok() ? std::string() : st.message();
      },
      "SCHEMA");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"outboxctl: operator commands against an outbox database and a consumer's inbox.\n"
               "Exit codes: 0 done, 1 the operation failed, 2 bad usage (nothing touched), 3 no such "
               "event (trace, skip), 4 schema drift (migrate --check), 5 migrations pending or "
               "newer than this binary (migrate --check).",
               "outboxctl"};
  app.set_version_flag("--version", std::string("outboxctl ") + OUTBOX_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // global options may come after the command
  app.add_option("--config", o.config,
                 "the relay's configuration file: database.url, database.schema and "
                 "kafka.properties come from it (file < OUTBOX_* variables < flags)");
  auto* db_flag = app.add_option("--db", o.db,
                                 "the outbox database: a PostgreSQL URL or mysql://user@host/db "
                                 "(default: $OUTBOX_DATABASE_URL, $OUTBOX_PG_URL, or --config)");
  auto* schema_flag =
      app.add_option("--schema", o.schema, "PostgreSQL schema of the outbox (default outbox)")->check(SchemaName());
  auto* bootstrap_flag = app.add_option("--bootstrap", o.bootstrap,
                                        "Kafka bootstrap servers for dlt replay (default: "
                                        "$OUTBOX_KAFKA_BOOTSTRAP, or --config)");
  app.add_flag("--json", o.json, "print one JSON object (numbers as numbers)");

  auto* migrate = app.add_subcommand("migrate", "create/upgrade the outbox schema (idempotent)");
  migrate->add_flag("--check", o.check,
                    "change nothing: compare the schema with what its migrations install; exit 4 "
                    "if an object differs (drift), 5 if migrations are pending or newer than this "
                    "binary");
  auto* status = app.add_subcommand("status", "rows per state, held aggregates, oldest unsent age");

  auto* list = app.add_subcommand("list", "events, newest first, with filters");
  list->add_option("--state", o.state, "PENDING, PROCESSING, SENT, FAILED or SKIPPED (any case)")
      ->check(CLI::IsMember({"pending", "processing", "sent", "failed", "skipped"}, CLI::ignore_case));
  list->add_option("--aggregate", o.aggregate, "one aggregate id");
  list->add_option("--type", o.type, "one event type");
  list->add_option("--older-than", o.older_than, "only events older than this (90s, 15m, 12h, 7d)")
      ->check(outbox::tools::Duration("--older-than", kMaxDurationS));
  list->add_option("--limit", o.limit, "at most this many rows (default 100)")->check(CLI::Range(1LL, 1000000LL));

  auto* replay = app.add_subcommand("replay",
                                    "FAILED rows back to PENDING, due now; the rows held behind "
                                    "them are released too");
  replay->add_option("--event-id", o.event_id, "one event");
  replay->add_flag("--failed", o.failed, "every FAILED event (with --aggregate/--type filters)");
  replay->add_option("--aggregate", o.aggregate, "only this aggregate's events");
  replay->add_option("--type", o.type, "only this event type");
  replay->add_flag("--dry-run", o.dry_run, "count, change nothing");

  auto* skip = app.add_subcommand("skip",
                                  "set a FAILED or PENDING event aside for good (SKIPPED, kept for "
                                  "audit); releases its aggregate");
  skip->add_option("--event-id", o.event_id, "the event")->required();
  skip->add_option("--reason", o.reason, "why (kept on the row)");
  skip->add_option("--by", o.by, "who (default USER@host)");
  skip->add_flag("--dry-run", o.dry_run, "show what would change, change nothing");

  auto* purge = app.add_subcommand("purge", "delete SENT rows older than the retention");
  purge->add_option("--retention-s", o.retention, "keep SENT rows younger than this (default 7d)")
      ->check(outbox::tools::Duration("--retention-s", kMaxDurationS));
  purge->add_option("--batch", o.batch, "rows per statement (default 1000)")->check(CLI::Range(1LL, 1000000LL));

  auto* trace = app.add_subcommand("trace",
                                   "one event by event id or dedup key: its outbox state and, "
                                   "with --inbox-db, whether the consumer applied it");
  trace->add_option("key", o.key, "an event id or a dedup key")->required();
  trace->add_option("--inbox-db", o.inbox_db, "the consumer's database (PostgreSQL or mysql://)");
  trace->add_option("--inbox-schema", o.inbox_schema, "the inbox's PostgreSQL schema (default inbox)")
      ->check(SchemaName());

  auto* dlt = app.add_subcommand("dlt", "dead-letter topics");
  dlt->require_subcommand(1);
  auto* dlt_replay = dlt->add_subcommand("replay", "dead-lettered messages back to their topic");
  dlt_replay->add_option("--topic", o.topic, "the dead-letter topic")->required();
  dlt_replay->add_option("--key", o.dlt_key, "only messages with this key");
  dlt_replay->add_option("--since", o.since_ms, "only messages at or after this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_option("--until", o.until_ms, "only messages at or before this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_flag("--dry-run", o.dry_run, "count, send nothing");

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
      ->check(outbox::tools::Duration("--broker-retention", kMaxDurationS));
  inbox_purge->add_option("--dlt-suffix", o.dlt_suffix,
                          "the consumers' dead-letter topic suffix (ConsumerOptions::dlt_suffix; "
                          "default .dlt)");
  inbox_purge->add_flag("--force", o.force,
                        "use --broker-retention even when it is shorter than the broker's, or "
                        "without asking the broker");
  inbox_purge->add_option("--batch", o.batch, "stamps per statement (default 1000)")
      ->check(CLI::Range(1LL, 1000000LL));
  inbox_purge->add_flag("--dry-run", o.dry_run, "count, delete nothing");

  auto* serve = app.add_subcommand(
      "serve",
      "the dashboard: one page and a JSON API (read-only; replay and skip with a token from "
      "OUTBOX_DASHBOARD_TOKEN or --token-file)");
  serve->add_option("--listen", o.listen, "host:port (default 127.0.0.1:8089; port 0 = any free port)");
  serve->add_option("--token-file", o.token_file,
                    "a file holding the actions' token (at least 16 characters); else "
                    "$OUTBOX_DASHBOARD_TOKEN; without either the page is read-only");
  serve->add_option("--inbox-db", o.inbox_db, "the consumer's database: traces show its stamps");
  serve->add_option("--consumer", o.consumers,
                    "GROUP=TOPIC[,TOPIC...] (repeatable): show what waits for that consumer group "
                    "on the broker — its topics, their retry and dead-letter topics: messages and "
                    "the group's lag");
  // (--bootstrap, OUTBOX_KAFKA_BOOTSTRAP or --config: the broker for the
  // consumers' backlog and dead-letter replay)
  serve->add_option("--inbox-schema", o.inbox_schema, "the inbox's PostgreSQL schema (default inbox)")
      ->check(SchemaName());
  serve->add_option("--allowed-host", o.allowed_hosts,
                    "NAME (repeatable): on a loopback --listen, answer this Host name too (besides "
                    "localhost, 127.0.0.0/8 and [::1]), e.g. the name a reverse proxy forwards");
  serve->add_option("--public-url", o.public_url,
                    "the page's address behind an HTTPS reverse proxy (https://dash.example.com): "
                    "actions from that origin are accepted, and its host name is answered");

  if (auto done = outbox::tools::ParseOrExit(app, argc, argv, "outboxctl")) return *done;

  // The relay's configuration, read the relay's way (docs/relay.md): --config
  // FILE < OUTBOX_* variables (and their _FILE forms) < these flags.
  {
    std::vector<std::pair<std::string, std::string>> overrides;
    if (db_flag->count()) overrides.emplace_back("database.url", o.db);
    if (schema_flag->count()) overrides.emplace_back("database.schema", o.schema);
    if (bootstrap_flag->count()) overrides.emplace_back("kafka.properties.bootstrap.servers", o.bootstrap);
    auto text = outbox::config::ReadFile(o.config);
    if (!text.ok()) return Usage("--config: " + text.status().message());
    CtlConfig cfg;
    outbox::Status loaded = outbox::config::Load(
        CtlSchema(), {*text, o.config.empty() ? "<none>" : o.config,
                      outbox::config::OutboxEnvironment(), overrides},
        cfg);
    if (!loaded.ok()) return Usage("configuration: " + loaded.message());
    if (outbox::Status st = outbox::ValidateSchemaName(cfg.database.schema); !st.ok()) {
      return Usage("configuration: config key database.schema: " + st.message());
    }
    if (outbox::IsMariaDbUrl(cfg.database.url)) {
      if (outbox::Status st = outbox::ValidateMariaDbUrl(cfg.database.url); !st.ok()) {
        return Usage("configuration: config key database.url: " + st.message());
      }
    }
    o.db = cfg.database.url;
    o.schema = cfg.database.schema;
    o.kafka = cfg.kafka;
  }

  if (dlt_replay->parsed()) return DltReplay(o);
  if (inbox_migrate->parsed()) return InboxMigrate(o);
  if (inbox_status->parsed()) return InboxStatus(o);
  if (inbox_purge->parsed()) return InboxPurge(o);
  const std::string command = app.get_subcommands().front()->get_name();
  if (auto bad = CheckDb(o, command)) return *bad;
  if (migrate->parsed()) return Migrate(o);
  if (status->parsed()) return Status(o);
  if (list->parsed()) return List(o);
  if (replay->parsed()) return Replay(o);
  if (skip->parsed()) return Skip(o);
  if (purge->parsed()) return Purge(o);
  if (trace->parsed()) return Trace(o);
  if (serve->parsed()) return Serve(o);
  return Usage("unknown command " + command);
}
