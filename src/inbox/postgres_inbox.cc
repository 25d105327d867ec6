// The PostgreSQL inbox: stamps and effects in one transaction.
//
// Fast path: one statement inserts the stamps of the whole batch (ON CONFLICT DO
// NOTHING ... RETURNING tells which are new), the handlers run, one COMMIT. If
// any handler fails, the whole transaction is rolled back and the batch is done
// again in careful mode: a savepoint per message, so one failure undoes only its
// own stamp and writes.
#include <libpq-fe.h>

#include <exception>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "outbox/fault.h"
#include "outbox/inbox.h"
#include "outbox/postgres.h"
#include "session.h"

namespace outbox {
namespace {

using pg::Param;

std::string WithSchema(std::string text, const std::string& schema) {
  for (std::size_t pos = text.find("{S}"); pos != std::string::npos;
       pos = text.find("{S}", pos + schema.size())) {
    text.replace(pos, 3, schema);
  }
  return text;
}

constexpr const char* kMigration1 = R"SQL(
CREATE TABLE {S}.inbox_stamps (
  consumer   text        NOT NULL,
  dedup_key  text        NOT NULL,
  topic      text,
  partition  integer,
  "offset"   bigint,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, dedup_key)
);
CREATE INDEX inbox_stamps_age_idx ON {S}.inbox_stamps (consumer, applied_at);
)SQL";

// Duplicates absorbed, per stamp: operators see how often an event came again
// (outboxctl trace), and reports can count absorbed copies from the database.
constexpr const char* kMigration2 = R"SQL(
ALTER TABLE {S}.inbox_stamps ADD COLUMN duplicates integer NOT NULL DEFAULT 0,
                             ADD COLUMN last_duplicate_at timestamptz;
)SQL";

class PostgresInbox final : public Inbox {
 public:
  PostgresInbox(InboxOptions o, std::unique_ptr<pg::Session> s)
      : options_(std::move(o)), session_(std::move(s)) {
    const std::string& S = options_.schema;
    insert_many_ = WithSchema(
        "INSERT INTO {S}.inbox_stamps (consumer, dedup_key, topic, partition, \"offset\") "
        "SELECT $1, k, t, p, o FROM jsonb_to_recordset($2::jsonb) AS x(k text, t text, p int, o bigint) "
        "ON CONFLICT DO NOTHING RETURNING dedup_key",
        S);
    insert_one_ = WithSchema(
        "INSERT INTO {S}.inbox_stamps (consumer, dedup_key, topic, partition, \"offset\") "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        S);
    purge_ = WithSchema(
        "DELETE FROM {S}.inbox_stamps WHERE (consumer, dedup_key) IN (SELECT consumer, dedup_key "
        "FROM {S}.inbox_stamps WHERE consumer = $1 AND applied_at < now() - $2 * interval '1 second' "
        "ORDER BY applied_at LIMIT $3)",
        S);
    // Only run when a batch holds duplicates, so the common path costs nothing.
    count_duplicates_ = WithSchema(
        "UPDATE {S}.inbox_stamps s SET duplicates = s.duplicates + d.n, last_duplicate_at = now() "
        "FROM (SELECT k, count(*)::int AS n FROM jsonb_array_elements_text($2::jsonb) AS k GROUP BY k) d "
        "WHERE s.consumer = $1 AND s.dedup_key = d.k",
        S);
  }

  Status Migrate() override {
    const std::string& S = options_.schema;
    OUTBOX_RETURN_IF_ERROR(session_->ExecScript("inbox migrate", "BEGIN"));
    Status st = [&]() -> Status {
      OUTBOX_RETURN_IF_ERROR(
          session_->Exec("inbox migrate: lock",
                         WithSchema("SELECT pg_advisory_xact_lock(hashtext('outbox.inbox.migrate'), "
                                    "hashtext('{S}'))", S))
              .status());
      OUTBOX_RETURN_IF_ERROR(session_->ExecScript(
          "inbox migrate: bootstrap",
          WithSchema("CREATE SCHEMA IF NOT EXISTS {S}; CREATE TABLE IF NOT EXISTS "
                     "{S}.inbox_migrations (version integer PRIMARY KEY, applied_at timestamptz "
                     "NOT NULL DEFAULT now());",
                     S)));
      auto v = session_->Exec("inbox migrate: versions",
                              WithSchema("SELECT coalesce(max(version), 0) FROM {S}.inbox_migrations", S));
      if (!v.ok()) return v.status();
      const std::int64_t have = pg::GetInt64(v->get(), 0, 0);
      const char* migrations[] = {kMigration1, kMigration2};
      for (std::int64_t n = have + 1; n <= static_cast<std::int64_t>(std::size(migrations)); ++n) {
        OUTBOX_RETURN_IF_ERROR(session_->ExecScript("inbox migrate: v" + std::to_string(n),
                                                    WithSchema(migrations[n - 1], S)));
        OUTBOX_RETURN_IF_ERROR(session_->ExecScript(
            "inbox migrate: record",
            WithSchema("INSERT INTO {S}.inbox_migrations VALUES (" + std::to_string(n) + ")", S)));
      }
      return Status::Ok();
    }();
    if (!st.ok()) {
      (void)session_->ExecScript("inbox migrate: rollback", "ROLLBACK");
      return st;
    }
    return session_->ExecScript("inbox migrate: commit", "COMMIT");
  }

  Result<std::vector<MessageOutcome>> Process(std::span<const InboundMessage> messages,
                                              const DedupKeyFn& dedup, const Handler& handler,
                                              const BatchHandler& batch) override {
    std::vector<MessageOutcome> out(messages.size());
    std::vector<std::string> keys(messages.size());
    std::vector<bool> has_key(messages.size(), false);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      Result<std::string> k = dedup(messages[i]);
      if (!k.ok() || k->empty()) {
        out[i] = {Outcome::kPermanent,
                  "no dedup key: " + (k.ok() ? std::string("empty") : k.status().message())};
      } else {
        keys[i] = *k;
        has_key[i] = true;
      }
    }
    std::map<std::size_t, HandlerResult> failed;
    auto fast = TryFast(messages, keys, has_key, handler, batch, out, failed);
    if (!fast.ok()) return fast.status();
    if (*fast) return out;
    // A handler failed: redo the batch, a savepoint per message. The failed
    // message keeps its outcome (its handler is not run twice for one delivery);
    // the ones before it run again, their first writes having been rolled back.
    OUTBOX_RETURN_IF_ERROR(Careful(messages, keys, has_key, handler, failed, out));
    return out;
  }

  Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) override {
    auto r = session_->Exec("inbox purge", purge_,
                            {Param::Text(options_.consumer), Param::Text(std::to_string(horizon.count())),
                             Param::Text(std::to_string(batch))},
                            {pg::kTextOid, pg::kInt8Oid, pg::kInt4Oid});
    if (!r.ok()) return r.status();
    return static_cast<std::int64_t>(std::strtoll(PQcmdTuples(r->get()), nullptr, 10));
  }

 private:
  // Runs the handler; exceptions become transient errors.
  static HandlerResult RunHandler(const Handler& handler, const InboundMessage& m, PGconn* conn) {
    try {
      return handler(m, conn);
    } catch (const std::exception& e) {
      return HandlerResult::Transient(std::string("handler threw: ") + e.what());
    } catch (...) {
      return HandlerResult::Transient("handler threw a non-standard exception");
    }
  }

  Status Begin() {
    OUTBOX_RETURN_IF_ERROR(session_->EnsureConnected());
    return session_->ExecScript("inbox begin", "BEGIN");
  }

  void Rollback() { (void)session_->ExecScript("inbox rollback", "ROLLBACK"); }

  // Inside the open transaction: one more absorbed copy per entry of `keys`.
  Status CountDuplicates(const std::vector<std::string>& keys) {
    return session_
        ->Exec("inbox count duplicates", count_duplicates_,
               {Param::Text(options_.consumer), Param::Text(nlohmann::json(keys).dump())})
        .status();
  }

  Status Commit() {
    if (OUTBOX_FAULT(fault::kInboxInsideTransaction)) {
      Rollback();
      return Status::Internal("fault point " + std::string(fault::kInboxInsideTransaction), true);
    }
    return session_->ExecScript("inbox commit", "COMMIT");
  }

  // true: done (all handlers succeeded, committed); false: rolled back, use Careful.
  Result<bool> TryFast(std::span<const InboundMessage> msgs, const std::vector<std::string>& keys,
                       const std::vector<bool>& has_key, const Handler& handler,
                       const BatchHandler& batch, std::vector<MessageOutcome>& out,
                       std::map<std::size_t, HandlerResult>& failed) {
    OUTBOX_RETURN_IF_ERROR(Begin());
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (!has_key[i]) continue;
      rows.push_back({{"k", keys[i]}, {"t", msgs[i].topic}, {"p", msgs[i].partition},
                      {"o", msgs[i].offset}});
    }
    std::set<std::string> fresh;
    if (!rows.empty()) {
      auto r = session_->Exec("inbox stamps", insert_many_,
                              {Param::Text(options_.consumer), Param::Text(rows.dump())});
      if (!r.ok()) {
        Rollback();
        return r.status();
      }
      for (int i = 0; i < PQntuples(r->get()); ++i) fresh.insert(pg::GetText(r->get(), i, 0));
    }
    std::set<std::string> used;  // a key twice in one batch: the first applies
    std::vector<const InboundMessage*> new_msgs;
    std::vector<std::string> dups;
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (!has_key[i]) continue;
      if (!fresh.count(keys[i]) || !used.insert(keys[i]).second) {
        out[i] = {Outcome::kDuplicate, ""};
        dups.push_back(keys[i]);
        continue;
      }
      if (batch) {
        new_msgs.push_back(&msgs[i]);
        out[i] = {Outcome::kApplied, ""};
        continue;
      }
      HandlerResult hr = RunHandler(handler, msgs[i], session_->raw());
      if (hr.error != ErrorClass::kNone || PQtransactionStatus(session_->raw()) != PQTRANS_INTRANS) {
        if (hr.error == ErrorClass::kNone) {
          hr = HandlerResult::Transient("handler left its statement failed");
        }
        failed[i] = hr;
        Rollback();
        return false;
      }
      out[i] = {Outcome::kApplied, ""};
    }
    if (!dups.empty() && options_.count_duplicates) {
      if (auto st = CountDuplicates(dups); !st.ok()) {
        Rollback();
        return st;
      }
    }
    if (batch && !new_msgs.empty()) {
      HandlerResult hr;
      try {
        hr = batch(new_msgs, session_->raw());
      } catch (...) {
        hr = HandlerResult::Transient("batch handler threw");
      }
      if (hr.error != ErrorClass::kNone || PQtransactionStatus(session_->raw()) != PQTRANS_INTRANS) {
        Rollback();
        return false;  // redo message by message: which one failed is unknown
      }
    }
    Status st = Commit();
    if (!st.ok()) {
      Rollback();
      return st;
    }
    return true;
  }

  Status Careful(std::span<const InboundMessage> msgs, const std::vector<std::string>& keys,
                 const std::vector<bool>& has_key, const Handler& handler,
                 const std::map<std::size_t, HandlerResult>& failed,
                 std::vector<MessageOutcome>& out) {
    OUTBOX_RETURN_IF_ERROR(Begin());
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (!has_key[i]) continue;
      if (auto f = failed.find(i); f != failed.end()) {
        out[i] = {f->second.error == ErrorClass::kPermanent ? Outcome::kPermanent : Outcome::kTransient,
                  f->second.message};
        continue;
      }
      auto sp = session_->ExecScript("inbox savepoint", "SAVEPOINT m");
      if (!sp.ok()) {
        Rollback();
        return sp;
      }
      auto ins = session_->Exec("inbox stamp", insert_one_,
                                {Param::Text(options_.consumer), Param::Text(keys[i]),
                                 Param::Text(msgs[i].topic), Param::Text(std::to_string(msgs[i].partition)),
                                 Param::Text(std::to_string(msgs[i].offset))});
      if (!ins.ok()) {
        Rollback();
        return ins.status();
      }
      if (std::string(PQcmdTuples(ins->get())) == "0") {
        out[i] = {Outcome::kDuplicate, ""};
        if (options_.count_duplicates) {
          if (auto cd = CountDuplicates({keys[i]}); !cd.ok()) {
            Rollback();
            return cd;
          }
        }
        (void)session_->ExecScript("inbox release", "RELEASE SAVEPOINT m");
        continue;
      }
      HandlerResult hr = RunHandler(handler, msgs[i], session_->raw());
      const bool txn_ok = PQtransactionStatus(session_->raw()) == PQTRANS_INTRANS;
      if (hr.error == ErrorClass::kNone && txn_ok) {
        out[i] = {Outcome::kApplied, ""};
        auto rel = session_->ExecScript("inbox release", "RELEASE SAVEPOINT m");
        if (!rel.ok()) {
          Rollback();
          return rel;
        }
        continue;
      }
      // Undo this message's stamp and writes only.
      auto rb = session_->ExecScript("inbox rollback to savepoint",
                                     "ROLLBACK TO SAVEPOINT m; RELEASE SAVEPOINT m");
      if (!rb.ok()) {
        Rollback();
        return rb;
      }
      if (hr.error == ErrorClass::kPermanent) {
        out[i] = {Outcome::kPermanent, hr.message};
      } else {
        out[i] = {Outcome::kTransient,
                  hr.error == ErrorClass::kNone ? "handler left its statement failed" : hr.message};
      }
    }
    Status st = Commit();
    if (!st.ok()) Rollback();
    return st;
  }

  InboxOptions options_;
  std::unique_ptr<pg::Session> session_;
  std::string insert_many_, insert_one_, purge_, count_duplicates_;
};

}  // namespace

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kApplied: return "applied";
    case Outcome::kDuplicate: return "duplicate";
    case Outcome::kPermanent: return "permanent";
    case Outcome::kTransient: return "transient";
  }
  return "unknown";
}

DedupKeyFn DedupByEventId() {
  return [](const InboundMessage& m) -> Result<std::string> {
    const std::string* id = m.Header("outbox-event-id");
    if (!id || id->empty()) {
      return Status::InvalidArgument("message has no outbox-event-id header");
    }
    return *id;
  };
}

Result<std::unique_ptr<Inbox>> Inbox::Open(const InboxOptions& options) {
  OUTBOX_RETURN_IF_ERROR(ValidateSchemaName(options.schema));
  if (options.consumer.empty()) return Status::InvalidArgument("inbox: consumer name is required");
  pg::Session::Options so;
  so.conninfo = options.conninfo;
  so.statement_timeout = options.statement_timeout;
  so.application_name = "outbox-inbox";
  auto s = pg::Session::Connect(so);
  if (!s.ok()) return s.status();
  return std::unique_ptr<Inbox>(new PostgresInbox(options, std::move(s).value()));
}

}  // namespace outbox
