// outboxctl migrate [--check] | status | purge | slots: the outbox schema,
// its rows per state, the SENT rows' purge, and the log's slots.
#include <cstdio>
#include <iostream>
#include <optional>

#include "ctl.h"
#include "outbox/mariadb.h"
#include "outbox/open.h"
#include "outbox/parse.h"
#include "outbox/postgres.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

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

// migrate --layout log on a PostgreSQL schema: converts a row store (nullopt
// when the schema holds none: the plain migration goes on).
std::optional<int> ConvertToLog(const Options& o) {
  auto done = outbox::ConvertPostgresRowsToLog({.conninfo = o.db, .schema = o.schema});
  if (!done.ok()) return Fail(done.status(), o.json);
  if (!done->converted) return std::nullopt;
  if (o.json) {
    std::cout << json{{"ok", true},
                      {"schema", o.schema},
                      {"applied", done->applied},
                      {"converted", {{"into_log", done->into_log},
                                     {"retries", done->retries},
                                     {"failed_or_skipped", done->terminal},
                                     {"sent", done->sent}}}}
                     .dump()
              << "\n";
  } else {
    std::cout << "schema " << o.schema << ": converted from rows to the log: " << done->into_log
              << " unsent into the log, " << done->retries << " retries, " << done->terminal
              << " FAILED or SKIPPED, " << done->sent << " SENT kept for trace; applied log "
              << "migrations " << VersionList(done->applied) << "\n";
  }
  return kExitOk;
}

int Migrate(const Options& o) {
  if (o.check) return MigrateCheck(o);
  if (o.layout == "log" && !outbox::IsMariaDbUrl(o.db)) {
    if (auto code = ConvertToLog(o)) return *code;
  }
  const outbox::StoreLayout layout = o.layout == "log"    ? outbox::StoreLayout::kLog
                                     : o.layout == "rows" ? outbox::StoreLayout::kRows
                                                          : outbox::StoreLayout::kDetect;
  auto store = outbox::ctl::OpenOutboxStore(o.db, o.schema, layout);
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

int StatusCommand(const Options& o) {
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

// slots [--set N]: the log's slots, and its slot count changed.
int SlotsCommand(const Options& o) {
  if (outbox::IsMariaDbUrl(o.db)) {
    return Fail("slots: a MariaDB outbox has no slots (the log is PostgreSQL's)", o.json);
  }
  const outbox::PostgresStoreOptions db{.conninfo = o.db, .schema = o.schema};
  if (o.slots > 0) {
    const auto drain = outbox::ParseSeconds("--drain-timeout-s", o.drain_timeout, 3600).value();
    auto was = outbox::SetPostgresLogSlots(db, static_cast<int>(o.slots),
                                           std::chrono::duration_cast<std::chrono::milliseconds>(drain));
    if (!was.ok()) return Fail(was.status(), o.json);
    if (o.json) {
      std::cout << json{{"ok", true}, {"schema", o.schema}, {"before", *was}, {"slots", o.slots}}.dump()
                << "\n";
    } else if (*was == o.slots) {
      std::cout << "schema " << o.schema << " already has " << o.slots << " slots: nothing changed\n";
    } else {
      std::cout << "schema " << o.schema << ": " << *was << " slots -> " << o.slots
                << " (every event was published first; the relays lease the slots again)\n";
    }
    return kExitOk;
  }
  auto slots = outbox::ReadPostgresLogSlots(db);
  if (!slots.ok()) return Fail(slots.status(), o.json);
  if (o.json) {
    json rows = json::array();
    for (const auto& s : slots->slots) {
      rows.push_back({{"slot", s.slot}, {"owner", s.owner}, {"expires_at", s.expires_at},
                      {"retired", s.retired}});
    }
    std::cout << json{{"ok", true}, {"schema", o.schema}, {"count", slots->count}, {"slots", rows}}.dump()
              << "\n";
    return kExitOk;
  }
  std::cout << "schema " << o.schema << ": " << slots->count << " slots\n";
  std::printf("%-6s %-40s %s\n", "SLOT", "OWNER", "LEASE EXPIRES");
  for (const auto& s : slots->slots) {
    std::printf("%-6d %-40s %s\n", s.slot,
                s.retired ? "(retired: beyond the count)" : s.owner.empty() ? "-" : s.owner.c_str(),
                s.expires_at.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddSchemaCommands(CLI::App& app, Options& o, Commands& out) {
  auto* migrate = app.add_subcommand("migrate", "create/upgrade the outbox schema (idempotent)");
  migrate->add_flag("--check", o.check,
                    "change nothing: compare the schema with what its migrations install; exit 4 "
                    "if an object differs (drift), 5 if migrations are pending or newer than this "
                    "binary");
  migrate->add_option("--layout", o.layout,
                      "PostgreSQL: rows (every release so far) or log (issue 42: each event written "
                      "once; not yet the default; converts a schema holding rows); without it, "
                      "what the schema holds, else rows")
      ->check(CLI::IsMember({"rows", "log"}));
  out.push_back({migrate, Migrate});
  auto* status = app.add_subcommand("status", "rows per state, held aggregates, oldest unsent age");
  out.push_back({status, StatusCommand});
  auto* purge = app.add_subcommand("purge", "delete SENT rows older than the retention");
  purge->add_option("--retention-s", o.retention, "keep SENT rows younger than this (default 7d)")
      ->check(tools::Duration("--retention-s", kMaxDurationS));
  purge->add_option("--batch", o.batch, "rows per statement (default 1000)")->check(CLI::Range(1LL, 1000000LL));
  out.push_back({purge, Purge});
  auto* slots = app.add_subcommand(
      "slots", "PostgreSQL log: the slots (the relays reading them), or --set a new slot count");
  slots->add_option("--set", o.slots,
                    "the new slot count (1-1024): waits until every event is published (producers "
                    "wait meanwhile), then changes it")
      ->check(CLI::Range(1LL, 1024LL));
  slots->add_option("--drain-timeout-s", o.drain_timeout,
                    "how long --set waits for the relays to publish what remains (default 10 s); "
                    "past it, nothing changes")
      ->check(tools::Duration("--drain-timeout-s", 3600));
  out.push_back({slots, SlotsCommand});
}
}  // namespace outbox::ctl
