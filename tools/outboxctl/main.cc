// outboxctl: operator commands against an outbox database.
//
//   outboxctl [--db URL] [--schema NAME] [--json] migrate
//   outboxctl [--db URL] [--schema NAME] [--json] status
//   outboxctl [--bootstrap SERVERS] [--json] dlt replay --topic DLT [--key K]
//             [--since TIME] [--until TIME] [--dry-run]
//
// --db defaults to $OUTBOX_PG_URL, --bootstrap to $OUTBOX_KAFKA_BOOTSTRAP. TIME
// is milliseconds since the epoch. Exit codes: 0 success, 1 the operation failed
// (database or broker unreachable, SQL error), 2 bad usage.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "outbox/consumer.h"
#include "outbox/postgres.h"

namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2;

int Usage(const std::string& error) {
  std::cerr << "outboxctl: " << error << "\n"
            << "usage: outboxctl [--db URL] [--schema NAME] [--json] migrate|status\n"
            << "       outboxctl [--bootstrap SERVERS] [--json] dlt replay --topic DLT [--key K]\n"
            << "                 [--since MS] [--until MS] [--dry-run]\n"
            << "  --db      PostgreSQL URL (default: $OUTBOX_PG_URL)\n"
            << "  --schema  outbox schema (default: outbox)\n"
            << "  --json    machine-readable output\n";
  return kExitUsage;
}

int Fail(const outbox::Status& st, bool json) {
  if (json) {
    std::cout << nlohmann::json{{"ok", false}, {"error", st.ToString()}}.dump() << "\n";
  }
  std::cerr << "outboxctl: " << st.ToString() << "\n";
  return kExitFailed;
}

}  // namespace

int DltReplay(const std::string& bootstrap, const std::string& topic, const std::string& key,
              const std::string& since, const std::string& until, bool dry_run, bool json) {
  if (bootstrap.empty()) return Usage("dlt replay: no broker: pass --bootstrap or set OUTBOX_KAFKA_BOOTSTRAP");
  if (topic.empty()) return Usage("dlt replay: --topic DLT_TOPIC is required");
  outbox::ReplayFilter f;
  f.key = key;
  auto parse_time = [](const std::string& v, std::chrono::system_clock::time_point& out) {
    char* end = nullptr;
    long long ms = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || !end || *end) return false;
    out = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
    return true;
  };
  if (!since.empty() && !parse_time(since, f.since)) return Usage("--since must be ms since the epoch");
  if (!until.empty() && !parse_time(until, f.until)) return Usage("--until must be ms since the epoch");
  auto r = outbox::ReplayDeadLetters({{"bootstrap.servers", bootstrap}}, topic, f, dry_run);
  if (!r.ok()) return Fail(r.status(), json);
  if (json) {
    std::cout << nlohmann::json{{"ok", true}, {"topic", topic}, {"scanned", r->scanned},
                                {"replayed", r->replayed}, {"dry_run", dry_run}}.dump()
              << "\n";
  } else {
    std::cout << (dry_run ? "would replay " : "replayed ") << r->replayed << " of " << r->scanned
              << " dead-lettered messages from " << topic << "\n";
  }
  return kExitOk;
}

int main(int argc, char** argv) {
  std::string db = std::getenv("OUTBOX_PG_URL") ? std::getenv("OUTBOX_PG_URL") : "";
  std::string bootstrap =
      std::getenv("OUTBOX_KAFKA_BOOTSTRAP") ? std::getenv("OUTBOX_KAFKA_BOOTSTRAP") : "";
  std::string schema = "outbox", command, sub, topic, key, since, until;
  bool json = false, dry_run = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--db" || a == "--schema" || a == "--bootstrap" || a == "--topic" || a == "--key" ||
        a == "--since" || a == "--until") {
      if (i + 1 >= argc) return Usage(a + " needs a value");
      std::string& target = a == "--db" ? db : a == "--schema" ? schema : a == "--bootstrap" ? bootstrap
                          : a == "--topic" ? topic : a == "--key" ? key : a == "--since" ? since : until;
      target = argv[++i];
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      Usage("help");
      return kExitOk;
    } else if (a.rfind("--", 0) == 0) {
      return Usage("unknown flag " + a);
    } else if (command.empty()) {
      command = a;
    } else if (command == "dlt" && sub.empty()) {
      sub = a;
    } else {
      return Usage("unexpected argument " + a);
    }
  }
  if (command == "dlt") {
    if (sub != "replay") return Usage("dlt: the subcommand is replay");
    return DltReplay(bootstrap, topic, key, since, until, dry_run, json);
  }
  if (command != "migrate" && command != "status") {
    return Usage(command.empty() ? "no command given" : "unknown command " + command);
  }
  if (db.empty()) return Usage("no database: pass --db URL or set OUTBOX_PG_URL");

  outbox::PostgresStoreOptions o;
  o.conninfo = db;
  o.schema = schema;
  auto store = outbox::OpenPostgresStore(o);
  if (!store.ok()) {
    return store.status().code() == outbox::Code::kInvalidArgument
               ? Usage(store.status().message())
               : Fail(store.status(), json);
  }

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

  auto s = (*store)->Stats();
  if (!s.ok()) return Fail(s.status(), json);
  const double age_s = static_cast<double>(s->oldest_unsent_age.count()) / 1000.0;
  if (json) {
    std::cout << nlohmann::json{{"ok", true},
                                {"schema", schema},
                                {"pending", s->pending},
                                {"processing", s->processing},
                                {"sent", s->sent},
                                {"failed", s->failed},
                                {"oldest_unsent_age_seconds", age_s}}
                     .dump()
              << "\n";
  } else {
    std::printf("%-28s %12s\n", "STATE", "ROWS");
    std::printf("%-28s %12lld\n", "PENDING", static_cast<long long>(s->pending));
    std::printf("%-28s %12lld\n", "PROCESSING", static_cast<long long>(s->processing));
    std::printf("%-28s %12lld\n", "SENT", static_cast<long long>(s->sent));
    std::printf("%-28s %12lld\n", "FAILED", static_cast<long long>(s->failed));
    std::printf("%-28s %12.3f\n", "oldest unsent age (s)", age_s);
  }
  return kExitOk;
}
