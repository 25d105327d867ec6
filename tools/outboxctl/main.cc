// outboxctl: operator commands against an outbox database (and a consumer's inbox).
//
//   outboxctl [--db URL] [--schema S] [--json] migrate
//   outboxctl [--db URL] [--schema S] [--json] status
//   outboxctl [--db URL] [--schema S] [--json] list [--state ST] [--aggregate ID]
//             [--type T] [--older-than SECONDS] [--limit N]
//   outboxctl [--db URL] [--schema S] [--json] replay (--event-id ID | --failed)
//             [--aggregate ID] [--type T] [--dry-run]
//   outboxctl [--db URL] [--schema S] [--json] skip --event-id ID [--reason TEXT]
//             [--by WHO] [--dry-run]
//   outboxctl [--db URL] [--schema S] [--json] purge [--retention-s DURATION] [--batch N]
//   outboxctl [--db URL] [--schema S] [--json] trace KEY [--inbox-db URL]
//             [--inbox-schema S]
//   outboxctl [--bootstrap SERVERS] [--json] dlt replay --topic DLT [--key K]
//             [--since MS] [--until MS] [--dry-run]
//   outboxctl [--json] inbox status --inbox-db URL [--inbox-schema S]
//   outboxctl [--db URL] [--schema S] [--json] inbox purge --inbox-db URL
//             [--inbox-schema S] --consumer NAME --broker-retention DURATION
//             [--batch N] [--dry-run]
//
// Every command also takes --config FILE: the relay's configuration file, read
// the relay's way (file < OUTBOX_* variables and their _FILE forms < flags), so
// --db, --schema and the broker's properties (TLS, SASL for dlt replay) come
// from where the relay takes them; --db falls back to $OUTBOX_DATABASE_URL or
// $OUTBOX_PG_URL, --bootstrap to $OUTBOX_KAFKA_BOOTSTRAP. Exit
// codes: 0 success (trace: found), 1 the operation failed (database or broker
// unreachable, SQL error), 2 bad usage, 3 trace or skip: no such event.
//
// Every database access goes through the store's operations (Store,
// InboxStore): this tool has no SQL of its own.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "outbox/version.h"
#include "config.h"
#include "outbox/kafka.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/parse.h"
#include "outbox/postgres.h"
#include "outbox/postgres_inbox.h"

namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNotFound = 3;

int Usage(const std::string& error) {
  std::cerr << "outboxctl: " << error << "\n"
            << "usage: outboxctl [--config FILE] [--db URL] [--schema S] [--json] COMMAND ...   (or --version)\n"
            << "  migrate                       create/upgrade the outbox schema\n"
            << "  status                        rows per state, oldest unsent age\n"
            << "  list [--state ST] [--aggregate ID] [--type T] [--older-than SECONDS] [--limit N]\n"
            << "  replay (--event-id ID | --failed) [--aggregate ID] [--type T] [--dry-run]\n"
            << "                                FAILED rows back to PENDING\n"
            << "  skip --event-id ID [--reason TEXT] [--by WHO] [--dry-run]\n"
            << "                                set a FAILED or PENDING event aside for good\n"
            << "                                (SKIPPED, kept for audit); releases its aggregate\n"
            << "  purge [--retention-s DURATION] [--batch N]   delete old SENT rows\n"
            << "                                (DURATION: seconds, or 90s, 15m, 12h, 7d)\n"
            << "  trace KEY [--inbox-db URL] [--inbox-schema S]   one event by id or dedup key\n"
            << "  dlt replay --topic DLT [--key K] [--since MS] [--until MS] [--dry-run]\n"
            << "                                (uses --bootstrap SERVERS, or the kafka.properties of --config)\n"
            << "  inbox status --inbox-db URL [--inbox-schema S]\n"
            << "                                stamps and parked messages per consumer\n"
            << "  inbox purge --inbox-db URL [--inbox-schema S] --consumer NAME\n"
            << "              --broker-retention DURATION [--batch N] [--dry-run]\n"
            << "                                delete stamps past the horizon: the longer of the\n"
            << "                                broker retention and the oldest unsent event in\n"
            << "                                --db, plus 1 h\n";
  return kExitUsage;
}

int Fail(const std::string& msg, bool json) {
  if (json) std::cout << nlohmann::json{{"ok", false}, {"error", msg}}.dump() << "\n";
  std::cerr << "outboxctl: " << msg << "\n";
  return kExitFailed;
}
int Fail(const outbox::Status& st, bool json) { return Fail(st.ToString(), json); }

struct Args {
  std::map<std::string, std::string> flags;  // --name value
  // librdkafka properties from the relay's configuration (--config, OUTBOX_*),
  // with --bootstrap applied: what `dlt replay` connects with (TLS, SASL).
  std::map<std::string, std::string> kafka;
  std::set<std::string> switches;            // --json, --dry-run, --failed
  std::vector<std::string> positional;
  std::string Flag(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
  bool Has(const std::string& s) const { return switches.count(s) > 0; }
};

// A record as named text columns, for the table and the JSON output.
using Row = std::map<std::string, std::string>;

Row ToRow(const outbox::EventRecord& e, bool trace) {
  char age[32];
  std::snprintf(age, sizeof age, "%.1f", e.age_seconds);
  Row r = {{"seq", std::to_string(e.seq)},     {"event_id", e.event_id},
           {"aggregate_type", e.aggregate_type}, {"aggregate_id", e.aggregate_id},
           {"event_type", e.event_type},       {"status", e.status},
           {"attempts", std::to_string(e.attempts)}, {"dedup_key", e.dedup_key},
           {"last_error", e.last_error}};
  if (!trace) {
    r["age_s"] = age;
    return r;
  }
  r.insert({{"lease_owner", e.lease_owner}, {"created_at", e.created_at},
            {"claimed_at", e.claimed_at},   {"sent_at", e.sent_at},
            {"failed_at", e.failed_at},     {"skipped_at", e.skipped_at},
            {"skipped_by", e.skipped_by},   {"skip_reason", e.skip_reason}});
  return r;
}

Row ToRow(const outbox::StampRecord& s) {
  return {{"consumer", s.consumer},   {"dedup_key", s.dedup_key}, {"applied_at", s.applied_at},
          {"topic", s.topic},         {"partition", s.partition}, {"offset", s.offset},
          {"duplicates", std::to_string(s.duplicates)}};
}



void PrintRows(const std::vector<Row>& rows, const std::vector<std::string>& cols) {
  std::vector<std::size_t> w(cols.size());
  for (std::size_t j = 0; j < cols.size(); ++j) {
    w[j] = cols[j].size();
    for (const auto& r : rows) {
      auto it = r.find(cols[j]);
      w[j] = std::max(w[j], std::min<std::size_t>(60, it == r.end() ? 0 : it->second.size()));
    }
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
  for (const auto& r : rows) {
    line([&](std::size_t j) {
      auto it = r.find(cols[j]);
      return it == r.end() ? std::string() : it->second;
    });
  }
}

nlohmann::json ToJson(const std::vector<Row>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows) a.push_back(r);
  return a;
}

int DltReplay(const Args& a, bool json) {
  const std::string topic = a.Flag("topic");
  if (!a.kafka.count("bootstrap.servers")) {
    return Usage("dlt replay: no broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config "
                 "a file with kafka.properties.bootstrap.servers");
  }
  if (topic.empty()) return Usage("dlt replay: --topic DLT_TOPIC is required");
  outbox::ReplayFilter f;
  f.key = a.Flag("key");
  auto parse_time = [](const std::string& v, std::chrono::system_clock::time_point& out) {
    char* end = nullptr;
    long long ms = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || !end || *end) return false;
    out = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
    return true;
  };
  if (a.flags.count("since") && !parse_time(a.Flag("since"), f.since)) return Usage("--since must be ms since the epoch");
  if (a.flags.count("until") && !parse_time(a.Flag("until"), f.until)) return Usage("--until must be ms since the epoch");
  const bool dry = a.Has("dry-run");
  auto r = outbox::ReplayDeadLetters(a.kafka, topic, f, dry);
  if (!r.ok()) return Fail(r.status(), json);
  if (json) {
    std::cout << nlohmann::json{{"ok", true}, {"topic", topic}, {"scanned", r->scanned},
                                {"replayed", r->replayed}, {"dry_run", dry}}.dump()
              << "\n";
  } else {
    std::cout << (dry ? "would replay " : "replayed ") << r->replayed << " of " << r->scanned
              << " dead-lettered messages from " << topic << "\n";
  }
  return kExitOk;
}

}  // namespace

// The stamp horizon rule (docs/inbox.md, "Stamp retention"): a stamp may go
// once it is older than the longest time a copy of its event can still arrive:
// the longest retention of the consumer's topics (main, retry, dead-letter:
// `dlt replay` copies back) and the age of the oldest event its outbox may still
// publish (PENDING, PROCESSING or FAILED: `replay` publishes FAILED ones), plus
// an hour of slack for clocks and leases.
constexpr std::chrono::seconds kStampSlack{3600};

// The outbox store the URL names: mysql:// is MariaDB/MySQL (its tables in the
// URL's database; --schema does not apply), anything else PostgreSQL.
outbox::Result<std::unique_ptr<outbox::Store>> OpenOutboxStore(const std::string& db,
                                                                const std::string& schema) {
  if (outbox::IsMariaDbUrl(db)) {
    outbox::MariaDbStoreOptions o;
    o.url = db;
    return outbox::OpenMariaDbStore(o);
  }
  outbox::PostgresStoreOptions o;
  o.conninfo = db;
  o.schema = schema;
  return outbox::OpenPostgresStore(o);
}

// The consumer's inbox for operator commands (Apply refused): MariaDB for a
// mysql:// URL (its stamps live in the URL's database; no schema), PostgreSQL
// otherwise. REQUIRES: a mysql:// URL was validated (ValidateMariaDbUrl).
outbox::Result<std::unique_ptr<outbox::InboxStore>> OpenOperatorInbox(const std::string& db,
                                                                      const std::string& schema,
                                                                      const std::string& consumer) {
  if (outbox::IsMariaDbUrl(db)) {
    outbox::MariaDbInboxOptions o;
    o.url = db;
    o.consumer = consumer;
    return outbox::OpenMariaDbInbox(o);
  }
  outbox::PostgresInboxOptions o;
  o.conninfo = db;
  o.schema = schema;
  o.consumer = consumer;
  return outbox::OpenPostgresInbox(o);
}

int InboxCommand(Args& a, bool json) {
  if (a.positional.size() != 2 || (a.positional[1] != "status" && a.positional[1] != "purge")) {
    return Usage("inbox: the subcommands are status and purge");
  }
  const bool purge = a.positional[1] == "purge";
  const std::string inbox_db = a.Flag("inbox-db"), inbox_schema = a.Flag("inbox-schema", "inbox");
  if (inbox_db.empty()) return Usage("inbox: pass --inbox-db URL (the consumer's database)");
  if (auto st = outbox::ValidateSchemaName(inbox_schema); !st.ok()) {
    return Usage("--inbox-schema: " + st.message());
  }
  auto batch = outbox::ParseInteger("--batch", a.Flag("batch", "1000"), 1, 1000000);
  if (!batch.ok()) return Usage(batch.status().message());
  std::chrono::seconds horizon{0};
  if (purge) {
    if (a.Flag("consumer").empty()) return Usage("inbox purge: pass --consumer NAME");
    if (a.Flag("broker-retention").empty()) {
      return Usage("inbox purge: pass --broker-retention DURATION: the longest retention.ms of "
                   "the consumer's topics, retry and dead-letter topics included");
    }
    auto br = outbox::ParseSeconds("--broker-retention", a.Flag("broker-retention"),
                                   100LL * 365 * 86400);
    if (!br.ok()) return Usage(br.status().message());
    if (a.Flag("db").empty()) {
      return Usage("inbox purge: pass --db URL (the outbox that feeds this consumer; or set "
                   "OUTBOX_PG_URL): stamps of events it may still publish are kept");
    }
    // The oldest event the outbox may still publish bounds the horizon too.
    outbox::PostgresStoreOptions so;
    so.conninfo = a.Flag("db");
    so.schema = a.Flag("schema", "outbox");
    if (auto st = outbox::ValidateSchemaName(so.schema); !st.ok()) return Usage(st.message());
    if (outbox::IsMariaDbUrl(so.conninfo)) {
      if (auto st = outbox::ValidateMariaDbUrl(so.conninfo); !st.ok()) return Usage("--db: " + st.message());
    }
    auto store = OpenOutboxStore(so.conninfo, so.schema);
    if (!store.ok()) return Fail(store.status(), json);
    auto oldest = (*store)->OldestUnsent();
    if (!oldest.ok()) return Fail(oldest.status(), json);
    std::chrono::seconds unsent_age{0};
    if (oldest->has_value()) {
      unsent_age = std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now() - **oldest);
    }
    horizon = std::max(*br, unsent_age) + kStampSlack;
  }
  if (outbox::IsMariaDbUrl(inbox_db)) {
    if (auto st = outbox::ValidateMariaDbUrl(inbox_db); !st.ok()) return Usage("--inbox-db: " + st.message());
  }
  const std::string consumer = purge ? a.Flag("consumer") : "outboxctl";
  auto inbox = OpenOperatorInbox(inbox_db, inbox_schema, consumer);
  if (!inbox.ok()) return Fail(inbox.status(), json);
  auto summary = (*inbox)->Summary(horizon);
  if (!summary.ok()) return Fail(summary.status(), json);
  if (!purge) {
    if (json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& s : *summary) {
        rows.push_back({{"consumer", s.consumer}, {"stamps", s.stamps},
                        {"oldest_stamp_age_seconds", s.oldest_stamp_age.count()},
                        {"parked", s.parked},
                        {"oldest_parked_age_seconds", s.oldest_parked_age.count()}});
      }
      std::cout << nlohmann::json{{"ok", true}, {"consumers", rows}}.dump() << "\n";
    } else {
      std::printf("%-28s %12s %18s %10s %18s\n", "CONSUMER", "STAMPS", "OLDEST STAMP (s)",
                  "PARKED", "OLDEST PARKED (s)");
      for (const auto& s : *summary) {
        std::printf("%-28s %12lld %18lld %10lld %18lld\n", s.consumer.c_str(),
                    static_cast<long long>(s.stamps),
                    static_cast<long long>(s.oldest_stamp_age.count()),
                    static_cast<long long>(s.parked),
                    static_cast<long long>(s.oldest_parked_age.count()));
      }
    }
    return kExitOk;
  }
  std::int64_t older = 0;
  for (const auto& s : *summary) {
    if (s.consumer == consumer) older = s.older;
  }
  std::int64_t purged = 0;
  if (!a.Has("dry-run")) {
    for (;;) {
      auto n = (*inbox)->PurgeStamps(horizon, static_cast<int>(*batch));
      if (!n.ok()) return Fail(n.status(), json);
      purged += *n;
      if (*n < *batch) break;
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"ok", true},           {"consumer", consumer},
                                {"horizon_seconds", horizon.count()},
                                {"older", older},       {"purged", purged},
                                {"dry_run", a.Has("dry-run")}}
                     .dump()
              << "\n";
  } else {
    std::cout << (a.Has("dry-run") ? "would purge " + std::to_string(older)
                                   : "purged " + std::to_string(purged))
              << " stamp(s) of consumer " << consumer << " older than " << horizon.count()
              << " s (the horizon: the longer of --broker-retention and the oldest unsent "
                 "event's age, plus 1 h)\n";
  }
  return kExitOk;
}

int main(int argc, char** argv) {
  Args a;
  const std::set<std::string> kValueFlags = {"db", "schema", "bootstrap", "topic", "key", "since", "until",
                                             "state", "aggregate", "type", "older-than", "limit",
                                             "event-id", "retention-s", "batch", "inbox-db",
                                             "inbox-schema", "reason", "by", "consumer",
                                             "broker-retention", "config"};
  const std::set<std::string> kSwitches = {"json", "dry-run", "failed"};
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      Usage("help");
      return kExitOk;
    }
    if (s == "--version") {
      std::cout << "outboxctl " << OUTBOX_VERSION_STRING << "\n";
      return kExitOk;
    }
    if (s.rfind("--", 0) == 0) {
      std::string name = s.substr(2);
      if (kSwitches.count(name)) {
        a.switches.insert(name);
      } else if (kValueFlags.count(name)) {
        if (i + 1 >= argc) return Usage(s + " needs a value");
        a.flags[name] = argv[++i];
      } else {
        return Usage("unknown flag " + s);
      }
    } else {
      a.positional.push_back(s);
    }
  }
  // The relay's configuration, read the relay's way (docs/relay.md): --config
  // FILE < OUTBOX_* variables (and their _FILE forms) < these flags.
  {
    std::vector<std::pair<std::string, std::string>> overrides;
    if (a.flags.count("db")) overrides.emplace_back("database.url", a.Flag("db"));
    if (a.flags.count("schema")) overrides.emplace_back("database.schema", a.Flag("schema"));
    if (a.flags.count("bootstrap")) {
      overrides.emplace_back("kafka.properties.bootstrap.servers", a.Flag("bootstrap"));
    }
    auto text = outbox::daemon::ReadConfigFile(a.Flag("config"));
    if (!text.ok()) return Usage("--config: " + text.status().message());
    auto cfg = outbox::daemon::LoadConfig(*text, a.Flag("config", "<none>"),
                                          outbox::daemon::OutboxEnvironment(), overrides,
                                          {/*database=*/false, /*bootstrap=*/false});
    if (!cfg.ok()) return Usage("configuration: " + cfg.status().message());
    if (!cfg->database.conninfo.empty()) a.flags["db"] = cfg->database.conninfo;
    a.flags["schema"] = cfg->database.schema;
    a.kafka = cfg->kafka.properties;
  }
  const bool json = a.Has("json");
  if (a.positional.empty()) return Usage("no command given");
  const std::string command = a.positional[0];
  if (command == "dlt") {
    if (a.positional.size() != 2 || a.positional[1] != "replay") return Usage("dlt: the subcommand is replay");
    return DltReplay(a, json);
  }
  if (command == "inbox") return InboxCommand(a, json);
  const std::set<std::string> kCommands = {"migrate", "status", "list", "replay", "skip", "purge",
                                           "trace"};
  if (!kCommands.count(command)) return Usage("unknown command " + command);
  if (command != "trace" && a.positional.size() != 1) return Usage("unexpected argument " + a.positional[1]);
  const std::string db = a.Flag("db"), schema = a.Flag("schema", "outbox");
  if (db.empty()) {
    return Usage("no database: pass --db URL, set OUTBOX_DATABASE_URL (or OUTBOX_PG_URL), or --config "
                 "a file with database.url");
  }
  if (auto st = outbox::ValidateSchemaName(schema); !st.ok()) return Usage(st.message());
  if (outbox::IsMariaDbUrl(db)) {
    if (auto st = outbox::ValidateMariaDbUrl(db); !st.ok()) return Usage("--db: " + st.message());
  }

  // Every number is checked before anything touches the database.
  auto retention = outbox::ParseSeconds("--retention-s", a.Flag("retention-s", "604800"),
                                        100LL * 365 * 86400);
  if (!retention.ok()) return Usage(retention.status().message());
  auto batch = outbox::ParseInteger("--batch", a.Flag("batch", "1000"), 1, 1000000);
  if (!batch.ok()) return Usage(batch.status().message());
  auto limit = outbox::ParseInteger("--limit", a.Flag("limit", "100"), 1, 1000000);
  if (!limit.ok()) return Usage(limit.status().message());
  if (a.flags.count("older-than")) {
    auto older = outbox::ParseSeconds("--older-than", a.Flag("older-than"), 100LL * 365 * 86400);
    if (!older.ok()) return Usage(older.status().message());
    a.flags["older-than"] = std::to_string(older->count());
  }


  if (command == "migrate" || command == "status" || command == "purge") {
    auto store = OpenOutboxStore(db, schema);
    if (!store.ok()) return Fail(store.status(), json);
    if (command == "migrate") {
      outbox::Status st = (*store)->Migrate();
      if (!st.ok()) return Fail(st, json);
      if (json) {
        std::cout << nlohmann::json{{"ok", true}, {"schema", schema}}.dump() << "\n";
      } else {
        std::cout << "schema " << schema << " is up to date\n";
      }
      return kExitOk;
    }
    if (command == "purge") {
      std::int64_t total = 0;
      for (;;) {
        auto n = (*store)->PurgeSent(*retention, static_cast<int>(*batch));
        if (!n.ok()) return Fail(n.status(), json);
        total += *n;
        if (*n < *batch) break;
      }
      if (json) {
        std::cout << nlohmann::json{{"ok", true}, {"purged", total}}.dump() << "\n";
      } else {
        std::cout << "purged " << total << " SENT rows older than " << retention->count()
                  << " s\n";
      }
      return kExitOk;
    }
    auto s = (*store)->Stats();
    if (!s.ok()) return Fail(s.status(), json);
    auto sent = (*store)->CountSent();
    if (!sent.ok()) return Fail(sent.status(), json);
    const double age_s = static_cast<double>(s->oldest_unsent_age.count()) / 1000.0;
    if (json) {
      std::cout << nlohmann::json{{"ok", true},       {"schema", schema},
                                  {"pending", s->pending}, {"processing", s->processing},
                                  {"sent", *sent},   {"failed", s->failed},
                                  {"skipped", s->skipped},
                                  {"held_aggregates", s->held_aggregates},
                                  {"oldest_unsent_age_seconds", age_s}}
                       .dump()
                << "\n";
    } else {
      std::printf("%-28s %12s\n", "STATE", "ROWS");
      std::printf("%-28s %12lld\n", "PENDING", static_cast<long long>(s->pending));
      std::printf("%-28s %12lld\n", "PROCESSING", static_cast<long long>(s->processing));
      std::printf("%-28s %12lld\n", "SENT", static_cast<long long>(*sent));
      std::printf("%-28s %12lld\n", "FAILED", static_cast<long long>(s->failed));
      std::printf("%-28s %12lld\n", "SKIPPED", static_cast<long long>(s->skipped));
      std::printf("%-28s %12lld\n", "held aggregates", static_cast<long long>(s->held_aggregates));
      std::printf("%-28s %12.3f\n", "oldest unsent age (s)", age_s);
    }
    return kExitOk;
  }

  if (command == "replay") {
    const std::string id = a.Flag("event-id");
    if (id.empty() && !a.Has("failed")) {
      return Usage("replay: pass --event-id ID, or --failed (with optional --aggregate/--type filters)");
    }
    outbox::ReplaySelection sel;
    sel.event_id = id;
    sel.aggregate_id = a.Flag("aggregate");
    sel.event_type = a.Flag("type");
    sel.dry_run = a.Has("dry-run");
    auto store = OpenOutboxStore(db, schema);
    if (!store.ok()) return Fail(store.status(), json);
    auto r = (*store)->ReplayFailed(sel);
    if (!r.ok()) return Fail(r.status(), json);
    if (json) {
      std::cout << nlohmann::json{{"ok", true},
                                  {"matched", r->matched},
                                  {"replayed", r->replayed},
                                  {"released", r->released},
                                  {"oldest_age_seconds", r->oldest_age.count()}}
                       .dump()
                << "\n";
    } else {
      std::cout << (sel.dry_run ? "would replay " + std::to_string(r->matched)
                                : "replayed " + std::to_string(r->replayed))
                << " FAILED row(s): back to PENDING, due now\n";
      if (r->matched > 0) {
        std::cout << "the oldest was enqueued " << r->oldest_age.count()
                  << " s ago: consumers must still hold inbox stamps that old, or they may "
                     "apply an earlier copy again (docs/inbox.md, \"Stamp retention\")\n";
      }
    }
    return kExitOk;
  }
  if (command == "skip") {
    const std::string id = a.Flag("event-id");
    if (id.empty()) return Usage("skip: pass --event-id ID (one event at a time, on purpose)");
    outbox::SkipRequest req;
    req.event_id = id;
    req.by = a.Flag("by");
    if (req.by.empty()) {
      const char* user = std::getenv("USER");
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      req.by = std::string(user ? user : "unknown") + "@" + host + " (outboxctl)";
    }
    req.reason = a.Flag("reason", "skipped by an operator (no reason given)");
    req.dry_run = a.Has("dry-run");
    auto store = OpenOutboxStore(db, schema);
    if (!store.ok()) return Fail(store.status(), json);
    auto r = (*store)->Skip(req);
    if (!r.ok()) return Fail(r.status(), json);
    if (r->was.empty()) {
      if (json) std::cout << nlohmann::json{{"ok", false}, {"error", "no such event"}}.dump() << "\n";
      std::cerr << "outboxctl: skip: no event with id " << id << "\n";
      return kExitNotFound;
    }
    if (r->was != "FAILED" && r->was != "PENDING") {
      return Fail("skip: event " + id + " is " + r->was +
                      "; only FAILED or PENDING events can be skipped (nothing changed)",
                  json);
    }
    if (json) {
      std::cout << nlohmann::json{{"ok", true},          {"event_id", id},
                                  {"was", r->was},       {"skipped", r->skipped},
                                  {"dry_run", req.dry_run}, {"released", r->released}}
                       .dump()
                << "\n";
    } else {
      std::cout << (req.dry_run ? "would skip " : "skipped ") << r->was << " event " << id
                << ": SKIPPED (kept for audit); later events of its aggregate go ahead\n";
    }
    return kExitOk;
  }
  auto store = OpenOutboxStore(db, schema);
  if (!store.ok()) return Fail(store.status(), json);
  if (command == "list") {
    outbox::ListFilter f;
    f.state = a.Flag("state");
    f.aggregate_id = a.Flag("aggregate");
    f.event_type = a.Flag("type");
    f.older_than = std::chrono::seconds(std::stoll(a.Flag("older-than", "0")));
    f.limit = static_cast<int>(*limit);
    auto records = (*store)->List(f);
    if (!records.ok()) return Fail(records.status(), json);
    std::vector<Row> rows;
    for (const auto& e : *records) rows.push_back(ToRow(e, /*trace=*/false));
    if (json) {
      std::cout << nlohmann::json{{"ok", true}, {"rows", ToJson(rows)}}.dump() << "\n";
    } else {
      PrintRows(rows, {"seq", "event_id", "aggregate_type", "aggregate_id", "event_type", "status",
                       "attempts", "age_s", "last_error"});
    }
    return kExitOk;
  }
  // trace
  if (a.positional.size() != 2) return Usage("trace KEY: an event id or a dedup key");
  const std::string key = a.positional[1];
  auto records = (*store)->Find(key);
  if (!records.ok()) return Fail(records.status(), json);
  std::vector<Row> rows;
  for (const auto& e : *records) rows.push_back(ToRow(e, /*trace=*/true));
  nlohmann::json out = {{"ok", true}, {"key", key}, {"outbox", ToJson(rows)}};
  const std::string inbox_db = a.Flag("inbox-db");
  std::vector<Row> stamps;
  if (!inbox_db.empty() && !rows.empty()) {
    const std::string inbox_schema = a.Flag("inbox-schema", "inbox");
    if (auto st = outbox::ValidateSchemaName(inbox_schema); !st.ok()) {
      return Usage("--inbox-schema: " + st.message());
    }
    if (outbox::IsMariaDbUrl(inbox_db)) {
      if (auto st = outbox::ValidateMariaDbUrl(inbox_db); !st.ok()) return Usage("--inbox-db: " + st.message());
    }
    auto inbox = OpenOperatorInbox(inbox_db, inbox_schema, "outboxctl");
    if (!inbox.ok()) return Fail("the inbox database: " + inbox.status().ToString(), json);
    std::vector<std::string> keys;
    for (const auto& e : *records) {
      keys.push_back(e.event_id);
      if (!e.dedup_key.empty()) keys.push_back(e.dedup_key);
    }
    auto found = (*inbox)->FindStamps(keys);
    if (!found.ok()) return Fail(found.status(), json);
    for (const auto& st : *found) stamps.push_back(ToRow(st));
    out["inbox"] = ToJson(stamps);
  }
  if (json) {
    std::cout << out.dump() << "\n";
  } else if (rows.empty()) {
    std::cout << "no event with id or dedup key \"" << key << "\" in " << schema
              << ".outbox (never enqueued, rolled back, or already purged)\n";
  } else {
    for (const auto& r : rows) {
      std::cout << "event " << r.at("event_id") << " (seq " << r.at("seq") << ")\n";
      for (const char* k : {"aggregate_type", "aggregate_id", "event_type", "dedup_key", "status",
                            "attempts", "lease_owner", "last_error", "created_at", "claimed_at",
                            "sent_at", "failed_at", "skipped_at", "skipped_by", "skip_reason"}) {
        auto it = r.find(k);
        if (it != r.end() && !it->second.empty()) std::printf("  %-15s %s\n", k, it->second.c_str());
      }
      const std::string& st = r.at("status");
      std::cout << "  => " << (st == "SENT"         ? "published to the broker (acked)"
                               : st == "FAILED"     ? "set aside: see last_error; `outboxctl replay --event-id` after fixing the cause"
                               : st == "SKIPPED"    ? "set aside for good by an operator (see skipped_by, skip_reason); never published by the relay"
                               : st == "PROCESSING" ? "claimed by a relay, being published"
                                                    : "waiting for a relay (check `outboxctl status` and the relay)")
                << "\n";
    }
    if (!inbox_db.empty()) {
      if (stamps.empty()) {
        std::cout << "inbox: not applied by any consumer of that database (no stamp)\n";
      } else {
        for (const auto& s : stamps) {
          std::cout << "inbox: applied by consumer \"" << s.at("consumer") << "\" at " << s.at("applied_at")
                    << " (from " << s.at("topic") << "/" << s.at("partition") << "@" << s.at("offset")
                    << "); later copies absorbed: " << s.at("duplicates") << "\n";
        }
      }
    }
  }
  return rows.empty() ? kExitNotFound : kExitOk;
}
