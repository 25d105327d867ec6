// outboxctl list | replay | skip | trace: events as operators see them, and
// the two writes an operator makes (a FAILED event published again, or set
// aside for good).
#include <unistd.h>

#include <iostream>

#include "ctl.h"
#include "outbox/mariadb.h"
#include "outbox/parse.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

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

}  // namespace

void AddEventCommands(CLI::App& app, Options& o, Commands& out) {
  auto* list = app.add_subcommand("list", "events, newest first, with filters");
  list->add_option("--state", o.state, "PENDING, PROCESSING, SENT, FAILED or SKIPPED (any case)")
      ->check(CLI::IsMember({"pending", "processing", "sent", "failed", "skipped"}, CLI::ignore_case));
  list->add_option("--aggregate", o.aggregate, "one aggregate id");
  list->add_option("--type", o.type, "one event type");
  list->add_option("--older-than", o.older_than, "only events older than this (90s, 15m, 12h, 7d)")
      ->check(tools::Duration("--older-than", kMaxDurationS));
  list->add_option("--limit", o.limit, "at most this many rows (default 100)")->check(CLI::Range(1LL, 1000000LL));
  out.push_back({list, List});

  auto* replay = app.add_subcommand("replay",
                                    "FAILED rows back to PENDING, due now; the rows held behind "
                                    "them are released too");
  replay->add_option("--event-id", o.event_id, "one event");
  replay->add_flag("--failed", o.failed, "every FAILED event (with --aggregate/--type filters)");
  replay->add_option("--aggregate", o.aggregate, "only this aggregate's events");
  replay->add_option("--type", o.type, "only this event type");
  replay->add_flag("--dry-run", o.dry_run, "count, change nothing");
  out.push_back({replay, Replay});

  auto* skip = app.add_subcommand("skip",
                                  "set a FAILED or PENDING event aside for good (SKIPPED, kept for "
                                  "audit); releases its aggregate");
  skip->add_option("--event-id", o.event_id, "the event")->required();
  skip->add_option("--reason", o.reason, "why (kept on the row)");
  skip->add_option("--by", o.by, "who (default USER@host)");
  skip->add_flag("--dry-run", o.dry_run, "show what would change, change nothing");
  out.push_back({skip, Skip});

  auto* trace = app.add_subcommand("trace",
                                   "one event by event id or dedup key: its outbox state and, "
                                   "with --inbox-db, whether the consumer applied it");
  trace->add_option("key", o.key, "an event id or a dedup key")->required();
  trace->add_option("--inbox-db", o.inbox_db, "the consumer's database (PostgreSQL or mysql://)");
  trace->add_option("--inbox-schema", o.inbox_schema, "the inbox's PostgreSQL schema (default inbox)")
      ->check(SchemaName());
  out.push_back({trace, Trace});
}
}  // namespace outbox::ctl
