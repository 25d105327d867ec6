// The PostgreSQL inbox: stamps and effects in one transaction, with three ways
// through a batch (postgres_inbox.h): fast (one transaction, no savepoints),
// careful (a savepoint per message, after a handler failed) and single (a
// transaction per message, after a COMMIT failed).
#include "outbox/postgres_inbox.h"

#include <libpq-fe.h>

#include <exception>
#include <map>
#include <set>

#include "migrate.h"
#include "outbox/event.h"
#include "core/fault.h"
#include "inbox/apply.h"
#include "outbox/postgres.h"
#include "headers_json.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

using pg::Param;
using inbox_apply::FromHandler;
using inbox_apply::Isolable;
using Pass = inbox_apply::PassEnd;

std::string GetBytes(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}

// Collects a SinkHandler's statements.
class CollectingSink final : public StatementSink {
 public:
  explicit CollectingSink(std::vector<pg::Statement>& out) : out_(out) {}
  void Add(std::string sql, std::vector<std::optional<std::string>> params) override {
    Add(std::move(sql), std::move(params), {});
  }
  void Add(std::string sql, std::vector<std::optional<std::string>> params,
           std::vector<unsigned> type_oids) override {
    pg::Statement st;
    st.sql = std::move(sql);
    for (auto& p : params) st.params.push_back(p ? pg::Param::Text(std::move(*p)) : pg::Param::Null());
    st.types.assign(type_oids.begin(), type_oids.end());
    if (!st.types.empty()) st.types.resize(st.params.size(), 0);  // 0: the server infers
    out_.push_back(std::move(st));
  }

 private:
  std::vector<pg::Statement>& out_;
};

// A handler's failed statement: by `classify` when given (from the SQLSTATE
// that StatusFromResult puts at the end of the message's first line), else the
// data is wrong (class 22/23) or not.
HandlerResult FromStatement(const Status& st,
                            const std::function<ErrorClass(std::string_view)>& classify) {
  if (classify) {
    const std::string& m = st.message();
    const auto at = m.rfind("[SQLSTATE ", m.find('\n'));
    const std::string state = at == std::string::npos ? "" : m.substr(at + 10, 5);
    return classify(state) == ErrorClass::kPermanent ? HandlerResult::Permanent(m)
                                                      : HandlerResult::Transient(m);
  }
  if (st.code() == Code::kInvalidArgument) return HandlerResult::Permanent(st.message());
  return HandlerResult::Transient(st.message());
}

// The apply strategy is the inbox's (src/inbox/apply.h); this store adds its
// SQL (InboxSession) and a fast pass that pipelines the whole batch.
class PostgresInbox final : public InboxStore, public InboxView, private inbox_apply::InboxSession {
 public:
  PostgresInbox(PostgresInboxOptions o, std::unique_ptr<pg::Session> s, Handler h, BatchHandler b,
                SinkHandler sink)
      : options_(std::move(o)),
        session_(std::move(s)),
        handler_(std::move(h)),
        batch_handler_(std::move(b)),
        sink_handler_(std::move(sink)),
        insert_many_(pg::sql::InboxInsertStamps(options_.schema)),
        insert_one_(pg::sql::InboxInsertStamp(options_.schema)),
        count_duplicates_(pg::sql::InboxCountDuplicates(options_.schema)),
        delete_stamps_(pg::sql::InboxDeleteStamps(options_.schema)),
        purge_(pg::sql::InboxPurgeStamps(options_.schema)),
        parked_keys_(pg::sql::InboxParkedKeys(options_.schema)),
        park_(pg::sql::InboxPark(options_.schema)),
        due_(pg::sql::InboxDue(options_.schema)),
        unpark_(pg::sql::InboxUnpark(options_.schema)),
        reschedule_(pg::sql::InboxReschedule(options_.schema)),
        summary_(pg::sql::InboxSummary(options_.schema)),
        find_stamps_(pg::sql::InboxFindStamps(options_.schema)) {}

  Status Migrate() override {
    return pg::RunMigrations(*session_, options_.schema, pg::kInboxSet);
  }

  Status CheckSchema() override {
    const std::string how = ": run outbox-consumer --migrate, or outboxctl inbox migrate";
    auto has = session_->Exec("inbox schema check", pg::sql::HasTable(),
                              {Param::Text(options_.schema), Param::Text(pg::kInboxSet.table)});
    if (!has.ok()) return has.status();
    if (pg::GetText(has->get(), 0, 0) != "t") {
      return Status::FailedPrecondition("the inbox schema \"" + options_.schema + "\" is missing (no " +
                                        options_.schema + "." + pg::kInboxSet.table + ")" + how);
    }
    auto versions = session_->Exec("inbox schema check",
                                   pg::sql::AppliedVersions(options_.schema, pg::kInboxSet.table));
    if (!versions.ok()) return versions.status();
    const int have = PQntuples(versions->get()) == 0
                         ? 0
                         : static_cast<int>(pg::GetInt64(versions->get(), PQntuples(versions->get()) - 1, 0));
    const int need = static_cast<int>(pg::kInboxSet.files().size());
    if (have < need) {
      return Status::FailedPrecondition("the inbox schema \"" + options_.schema + "\" is at version " +
                                        std::to_string(have) + ", this build needs " +
                                        std::to_string(need) + how);
    }
    return Status::Ok();
  }

  Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> msgs,
                                            std::span<const std::string> keys,
                                            std::span<const std::string> order_keys) override {
    if (!handler_ && !sink_handler_) {
      return Status::FailedPrecondition("inbox apply: this inbox was opened without a handler");
    }
    order_keys_ = order_keys;
    return inbox_apply::Apply(*this, msgs, keys, order_keys,
                              [&](const std::vector<bool>& todo, std::vector<MessageOutcome>& out,
                                  std::map<std::size_t, HandlerResult>& failed) {
                                return Fast(msgs, keys, todo, out, failed);
                              });
  }

  Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) override {
    auto r = session_->Exec("inbox purge", purge_,
                            {Param::Text(options_.consumer), Param::Text(std::to_string(horizon.count())),
                             Param::Text(std::to_string(batch))},
                            {pg::kTextOid, pg::kInt8Oid, pg::kInt4Oid});
    if (!r.ok()) return r.status();
    return static_cast<std::int64_t>(std::strtoll(PQcmdTuples(r->get()), nullptr, 10));
  }

  Result<std::vector<StampSummary>> Summary(std::chrono::seconds horizon) override {
    auto r = session_->Exec("inbox summary", summary_,
                            {Param::Text(std::to_string(horizon.count()))});
    if (!r.ok()) return r.status();
    std::vector<StampSummary> out;
    for (int i = 0; i < PQntuples(r->get()); ++i) {
      StampSummary s;
      s.consumer = pg::GetText(r->get(), i, 0);
      s.stamps = pg::GetInt64(r->get(), i, 1);
      s.older = pg::GetInt64(r->get(), i, 2);
      s.oldest_stamp_age = std::chrono::seconds(pg::GetInt64(r->get(), i, 3));
      s.parked = pg::GetInt64(r->get(), i, 4);
      s.oldest_parked_age = std::chrono::seconds(pg::GetInt64(r->get(), i, 5));
      s.duplicates = pg::GetInt64(r->get(), i, 6);
      out.push_back(std::move(s));
    }
    return out;
  }

  Result<std::vector<StampRecord>> FindStamps(std::span<const std::string> keys) override {
    for (const auto& k : keys) {
      if (!IsValidText(k)) return std::vector<StampRecord>{};  // no stamp can have it
    }
    auto r = session_->Exec("inbox find stamps", find_stamps_,
                            {Param::Text(pg::TextArrayLiteral(keys))});
    if (!r.ok()) return r.status();
    std::vector<StampRecord> out;
    for (int i = 0; i < PQntuples(r->get()); ++i) {
      StampRecord s;
      s.consumer = pg::GetText(r->get(), i, 0);
      s.dedup_key = pg::GetText(r->get(), i, 1);
      s.applied_at = pg::GetText(r->get(), i, 2);
      s.topic = pg::GetText(r->get(), i, 3);
      s.partition = pg::GetText(r->get(), i, 4);
      s.offset = pg::GetText(r->get(), i, 5);
      s.duplicates = pg::GetInt64(r->get(), i, 6);
      out.push_back(std::move(s));
    }
    return out;
  }

  Result<std::set<std::string>> ParkedKeys(std::span<const std::string> order_keys) override {
    std::set<std::string> out;
    if (order_keys.empty()) return out;
    auto r = session_->Exec("inbox parked keys", parked_keys_,
                            {Param::Text(options_.consumer),
                             Param::Text(pg::TextArrayLiteral(order_keys))});
    if (!r.ok()) return r.status();
    for (int i = 0; i < PQntuples(r->get()); ++i) out.insert(pg::GetText(r->get(), i, 0));
    return out;
  }

  Status Park(std::span<const ParkedMessage> messages) override {
    if (messages.empty()) return Status::Ok();
    OUTBOX_RETURN_IF_ERROR(Begin());
    for (const ParkedMessage& p : messages) {
      const InboundMessage& m = p.message;
      const auto ts_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(m.timestamp.time_since_epoch());
      auto r = session_->Exec(
          "inbox park", park_,
          {Param::Text(options_.consumer), Param::Text(p.order_key), Param::Text(p.dedup_key),
           Param::Text(m.topic), Param::Text(std::to_string(m.partition)),
           Param::Text(std::to_string(m.offset)), m.key_is_null ? Param::Null() : Param::Binary(m.key),
           m.payload_is_null ? Param::Null() : Param::Binary(m.payload),
           Param::Binary(store_common::EncodeInboxHeaders(m.headers)), Param::Text(std::to_string(ts_ms.count())),
           Param::Text(std::to_string(p.attempts)),
           p.last_error.empty() ? Param::Null() : Param::Text(pg::sql::StorableText(p.last_error, 8000)),
           Param::Text(std::to_string(p.delay.count()))});
      if (!r.ok()) {
        Rollback();
        return r.status();
      }
    }
    Status st = session_->ExecScript("inbox park commit", "COMMIT");
    if (!st.ok()) Rollback();
    return st;
  }

  Result<std::vector<ParkedMessage>> Due(int limit) override {
    auto r = session_->Exec("inbox due parked", due_,
                            {Param::Text(options_.consumer), Param::Text(std::to_string(limit))},
                            {}, /*result_format=*/1);
    if (!r.ok()) return r.status();
    std::vector<ParkedMessage> out;
    const PGresult* res = r->get();
    for (int i = 0; i < PQntuples(res); ++i) {
      ParkedMessage p;
      p.id = std::stoll(GetBytes(res, i, 0));
      p.order_key = GetBytes(res, i, 1);
      p.dedup_key = GetBytes(res, i, 2);
      p.message.topic = GetBytes(res, i, 3);
      p.message.partition = std::stoi(GetBytes(res, i, 4));
      p.message.offset = std::stoll(GetBytes(res, i, 5));
      p.message.key_is_null = PQgetisnull(res, i, 6) == 1;
      p.message.key = GetBytes(res, i, 6);
      p.message.payload_is_null = GetBytes(res, i, 8) == "true";
      if (!p.message.payload_is_null) p.message.payload = GetBytes(res, i, 7);
      auto headers = store_common::DecodeInboxHeaders(GetBytes(res, i, 9));
      if (!headers.ok()) return headers.status();
      p.message.headers = std::move(headers).value();
      p.message.timestamp = std::chrono::system_clock::time_point(
          std::chrono::milliseconds(std::stoll(GetBytes(res, i, 10))));
      p.attempts = std::stoi(GetBytes(res, i, 11));
      p.last_error = GetBytes(res, i, 12);
      out.push_back(std::move(p));
    }
    return out;
  }

  Status Unpark(std::span<const std::int64_t> ids) override {
    if (ids.empty()) return Status::Ok();
    return session_
        ->Exec("inbox unpark", unpark_,
               {Param::Text(options_.consumer),
                Param::Text(pg::Int64ArrayLiteral(std::vector<std::int64_t>(ids.begin(), ids.end())))})
        .status();
  }

  Status Reschedule(std::int64_t id, int attempts, const std::string& error,
                    std::chrono::milliseconds delay) override {
    return session_
        ->Exec("inbox reschedule parked", reschedule_,
               {Param::Text(options_.consumer), Param::Text(std::to_string(id)),
                Param::Text(std::to_string(attempts)), Param::Text(pg::sql::StorableText(error, 8000)),
                Param::Text(std::to_string(delay.count()))})
        .status();
  }

 private:
  // Runs the handler; exceptions become transient errors; a handler that
  // returned OK but left the transaction failed is a transient error too.
  HandlerResult RunHandler(const InboundMessage& m) override {
    if (sink_handler_) {  // its statements, in one round trip, now
      std::vector<pg::Statement> statements;
      HandlerResult hr = RunSinkHandler(m, statements);
      if (hr.error != ErrorClass::kNone) return hr;
      pg::PipelineResult pr = pg::RunPipeline(session_->raw(), "inbox handler", statements, SilenceBound());
      return pr.status.ok() ? hr : FromStatement(pr.status, options_.classify_sqlstate);
    }
    HandlerResult hr;
    try {
      hr = handler_(m, session_->raw());
    } catch (const std::exception& e) {
      return HandlerResult::Transient(std::string("handler threw: ") + e.what());
    } catch (...) {
      return HandlerResult::Transient("handler threw a non-standard exception");
    }
    if (hr.error == ErrorClass::kNone && PQtransactionStatus(session_->raw()) != PQTRANS_INTRANS) {
      return HandlerResult::Transient("handler left its statement failed");
    }
    return hr;
  }

  // Calls the sink handler, which queues its statements on `out`.
  HandlerResult RunSinkHandler(const InboundMessage& m, std::vector<pg::Statement>& out) {
    CollectingSink sink(out);
    try {
      return sink_handler_(m, sink);
    } catch (const std::exception& e) {
      return HandlerResult::Transient(std::string("handler threw: ") + e.what());
    } catch (...) {
      return HandlerResult::Transient("handler threw a non-standard exception");
    }
  }

  Status Begin() override {
    OUTBOX_RETURN_IF_ERROR(session_->EnsureConnected());
    return session_->ExecScript("inbox begin", BeginSql());
  }

  // BEGIN, and the statement timeout for this transaction alone (SET LOCAL):
  // it bounds the handler's own statements too, and ends with the transaction,
  // so nothing is left on a server connection that PgBouncer hands on.
  std::string BeginSql() const {
    if (options_.statement_timeout.count() <= 0) return "BEGIN";
    return "BEGIN; SET LOCAL statement_timeout = " +
           std::to_string(options_.statement_timeout.count());
  }

  void Rollback() override { (void)session_->ExecScript("inbox rollback", "ROLLBACK"); }

  // How long a pipeline may hear nothing from the server: past the statement
  // timeout (which the server enforces on each statement itself) by 2 s, so
  // that only a silent path (a proxy or NAT that black-holes) trips it.
  std::chrono::milliseconds SilenceBound() const {
    if (options_.statement_timeout.count() <= 0) return std::chrono::milliseconds(0);
    return options_.statement_timeout + std::chrono::milliseconds(2000);
  }

  Status Commit() override {
    Status st = session_->ExecScript("inbox commit", "COMMIT");
    // A COMMIT that fails ends the transaction on the server; make sure of it.
    if (!st.ok()) Rollback();
    return st;
  }
  Status Savepoint() override { return session_->ExecScript("inbox savepoint", "SAVEPOINT m"); }
  Status ReleaseSavepoint() override { return session_->ExecScript("inbox release", "RELEASE SAVEPOINT m"); }
  Status RollbackToSavepoint() override {
    return session_->ExecScript("inbox rollback to savepoint", "ROLLBACK TO SAVEPOINT m; RELEASE SAVEPOINT m");
  }
  // A serialization failure or deadlock (retryable) is transient; a broken
  // constraint or bad data permanent.
  MessageOutcome OwnFailure(const Status& st) const override {
    return {st.retryable() ? Outcome::kTransient : Outcome::kPermanent, st.message()};
  }
  Result<bool> Stamp(const InboundMessage& m, const std::string& key) override {
    auto fresh = InsertStamp(m, key);
    if (fresh.ok() && !*fresh) OUTBOX_RETURN_IF_ERROR(CountDuplicates(std::span(&key, 1)));
    return fresh;
  }

  // Ordered mode: message i waits when an earlier message of its order key
  // failed transiently in this pass; a transient failure blocks its key.
  bool Held(std::size_t i, const std::set<std::string>& blocked) const {
    return !order_keys_.empty() && blocked.count(order_keys_[i]) > 0;
  }
  void Block(std::size_t i, const MessageOutcome& o, std::set<std::string>& blocked) const {
    if (!order_keys_.empty() && o.outcome == Outcome::kTransient) blocked.insert(order_keys_[i]);
  }
  // Inside the open transaction: one more absorbed copy per entry of `keys`.
  Status CountDuplicates(std::span<const std::string> keys) {
    if (!options_.count_duplicates || keys.empty()) return Status::Ok();
    return session_
        ->Exec("inbox count duplicates", count_duplicates_,
               {Param::Text(options_.consumer), Param::Text(pg::TextArrayLiteral(keys))})
        .status();
  }

  // Inserts the stamp of message i inside the open transaction; true when new.
  Result<bool> InsertStamp(const InboundMessage& m, const std::string& key) {
    auto ins = session_->Exec("inbox stamp", insert_one_,
                              {Param::Text(options_.consumer), Param::Text(key),
                               Param::Text(m.topic), Param::Text(std::to_string(m.partition)),
                               Param::Text(std::to_string(m.offset))});
    if (!ins.ok()) return ins.status();
    return std::string(PQcmdTuples(ins->get())) != "0";
  }

  // Status error: the database could not be used; rolled back.
  Result<Pass> Fast(std::span<const InboundMessage> msgs, std::span<const std::string> keys,
                    const std::vector<bool>& todo, std::vector<MessageOutcome>& out,
                    std::map<std::size_t, HandlerResult>& failed) {
    std::vector<std::string> ks, topics;
    std::vector<std::int64_t> parts, offsets;
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (!todo[i]) continue;
      ks.push_back(keys[i]);
      topics.push_back(msgs[i].topic);
      parts.push_back(msgs[i].partition);
      offsets.push_back(msgs[i].offset);
    }
    // BEGIN and all stamps in one round trip.
    OUTBOX_RETURN_IF_ERROR(session_->EnsureConnected());
    std::vector<pg::Statement> begin = {{"BEGIN", {}, {}}};
    if (options_.statement_timeout.count() > 0) {
      begin.push_back({"SELECT set_config('statement_timeout', $1, true)",
                       {Param::Text(std::to_string(options_.statement_timeout.count()))},
                       {}});
    }
    const std::size_t stamps_at = begin.size();
    if (!ks.empty()) {
      begin.push_back({insert_many_,
                       {Param::Text(options_.consumer), Param::Text(pg::TextArrayLiteral(ks)),
                        Param::Text(pg::TextArrayLiteral(topics)),
                        Param::Text(pg::Int64ArrayLiteral(parts)),
                        Param::Text(pg::Int64ArrayLiteral(offsets))},
                       {}});
    }
    pg::PipelineResult stamped = pg::RunPipeline(session_->raw(), "inbox stamps", begin, SilenceBound());
    if (!stamped.status.ok()) {
      Rollback();
      return stamped.status;
    }
    std::set<std::string> fresh;
    if (!ks.empty()) {
      const PGresult* r = stamped.results[stamps_at].get();
      for (int i = 0; i < PQntuples(r); ++i) fresh.insert(pg::GetText(r, i, 0));
    }
    std::set<std::string> used;  // a key twice in one batch: the first applies
    // Effects outside the transaction: the keys held behind a transient
    // failure, and the stamps to take back (failed or held messages).
    std::set<std::string> blocked;
    std::vector<std::string> undo;
    std::vector<const InboundMessage*> new_msgs;
    std::vector<pg::Statement> statements;     // sink mode: all new messages' statements
    std::vector<std::size_t> statement_owner;  // the message of each statement
    std::vector<std::string> dups;
    const bool outside =
        options_.effects_outside_transaction && !sink_handler_ && !batch_handler_;
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (!todo[i]) continue;
      if (outside && Held(i, blocked)) {  // as the careful pass decides it
        out[i] = {Outcome::kHeld, ""};
        if (fresh.count(keys[i]) && used.insert(keys[i]).second) undo.push_back(keys[i]);
        continue;
      }
      if (!fresh.count(keys[i]) || !used.insert(keys[i]).second) {
        out[i] = {Outcome::kDuplicate, ""};
        dups.push_back(keys[i]);
        continue;
      }
      out[i] = {Outcome::kApplied, ""};
      if (batch_handler_) {
        new_msgs.push_back(&msgs[i]);
        continue;
      }
      if (sink_handler_) {
        const std::size_t first = statements.size();
        HandlerResult hr = RunSinkHandler(msgs[i], statements);
        statement_owner.resize(statements.size(), i);
        if (hr.error != ErrorClass::kNone) {
          statements.resize(first);
          failed[i] = hr;
          Rollback();
          return Pass::kHandlerFailed;
        }
        continue;
      }
      HandlerResult hr = RunHandler(msgs[i]);
      if (hr.error != ErrorClass::kNone) {
        if (outside && PQtransactionStatus(session_->raw()) == PQTRANS_INTRANS) {
          out[i] = FromHandler(hr);
          Block(i, out[i], blocked);
          undo.push_back(keys[i]);
          failed[i] = hr;  // a later careful or single pass keeps it, not runs it again
          continue;
        }
        failed[i] = hr;
        Rollback();
        return Pass::kHandlerFailed;
      }
    }
    if (sink_handler_) return CommitSink(std::move(statements), statement_owner, dups, failed);
    if (Status st = CountDuplicates(dups); !st.ok()) {
      Rollback();
      return st;
    }
    if (Status st = TakeBackStamps(undo); !st.ok()) {
      Rollback();
      return st;
    }
    if (batch_handler_ && !new_msgs.empty()) {
      HandlerResult hr;
      try {
        hr = batch_handler_(new_msgs, session_->raw());
      } catch (...) {
        hr = HandlerResult::Transient("batch handler threw");
      }
      if (hr.error != ErrorClass::kNone || PQtransactionStatus(session_->raw()) != PQTRANS_INTRANS) {
        Rollback();
        return Pass::kHandlerFailed;  // redo message by message: which one failed is unknown
      }
    }
    return CommitFast();
  }

  // The fast pass's COMMIT, the fault point first (this pass is the store's:
  // the strategy fires it for its own passes).
  Result<Pass> CommitFast() {
    if (OUTBOX_FAULT(fault::kInboxInsideTransaction)) {
      Rollback();
      return Status::Internal("fault point " + std::string(fault::kInboxInsideTransaction), true);
    }
    Status st = Commit();
    if (st.ok()) return Pass::kCommitted;
    if (!Isolable(st)) return st;
    return Pass::kCommitFailed;
  }

  // The sink pass's end: the queued statements, the duplicate count and the
  // COMMIT in one round trip.
  Result<Pass> CommitSink(std::vector<pg::Statement> statements,
                          const std::vector<std::size_t>& statement_owner,
                          const std::vector<std::string>& dups,
                          std::map<std::size_t, HandlerResult>& failed) {
    if (!dups.empty() && options_.count_duplicates) {
      statements.push_back({count_duplicates_,
                            {Param::Text(options_.consumer), Param::Text(pg::TextArrayLiteral(dups))},
                            {}});
    }
    const std::size_t handler_statements = statement_owner.size();
    if (OUTBOX_FAULT(fault::kInboxInsideTransaction)) {
      Rollback();
      return Status::Internal("fault point " + std::string(fault::kInboxInsideTransaction), true);
    }
    statements.push_back({"COMMIT", {}, {}});
    pg::PipelineResult pr = pg::RunPipeline(session_->raw(), "inbox handlers", statements, SilenceBound());
    if (pr.status.ok()) return Pass::kCommitted;
    Rollback();
    // A handler's statement that ran past the statement timeout is that
    // message's failure (the session lives on): it fails alone, the others
    // apply. A timeout of anything else says nothing about one message.
    const bool own_timeout =
        pr.failed < handler_statements && pr.status.code() == Code::kDeadlineExceeded;
    if (!Isolable(pr.status) && !own_timeout) return pr.status;
    if (pr.failed < handler_statements) {
      failed[statement_owner[pr.failed]] = FromStatement(pr.status, options_.classify_sqlstate);
      return Pass::kHandlerFailed;
    }
    if (pr.failed + 1 == statements.size()) return Pass::kCommitFailed;
    return pr.status;  // the duplicate count failed: nothing took effect
  }

  // Inside the open transaction: removes this batch's stamps of `keys`
  // (effects outside the transaction that failed or were held).
  Status TakeBackStamps(const std::vector<std::string>& keys) {
    if (keys.empty()) return Status::Ok();
    return session_
        ->Exec("inbox take back stamps", delete_stamps_,
               {Param::Text(options_.consumer), Param::Text(pg::TextArrayLiteral(keys))})
        .status();
  }

  PostgresInboxOptions options_;
  std::unique_ptr<pg::Session> session_;
  std::span<const std::string> order_keys_;  // of the Apply call in progress
  Handler handler_;
  BatchHandler batch_handler_;
  SinkHandler sink_handler_;
  const std::string insert_many_, insert_one_, count_duplicates_, delete_stamps_, purge_,
      parked_keys_, park_, due_, unpark_, reschedule_, summary_, find_stamps_;
};

Result<std::unique_ptr<PostgresInbox>> OpenInbox(const PostgresInboxOptions& options,
                                                 Handler handler, BatchHandler batch_handler,
                                                 SinkHandler sink) {
  if (options.consumer.empty()) return Status::InvalidArgument("inbox: consumer name is required");
  auto s = pg::Session::ConnectFor("inbox: ",
                                   {options.conninfo, options.connect_timeout,
                                    options.statement_timeout, "outbox-inbox"},
                                   options.schema);
  if (!s.ok()) return s.status();
  return std::make_unique<PostgresInbox>(options, std::move(s).value(), std::move(handler),
                                         std::move(batch_handler), std::move(sink));
}

template <class Part>
Result<std::unique_ptr<Part>> As(Result<std::unique_ptr<PostgresInbox>> inbox) {
  if (!inbox.ok()) return inbox.status();
  return std::unique_ptr<Part>(std::move(inbox).value());
}

}  // namespace

Result<std::unique_ptr<InboxStore>> OpenPostgresInbox(const PostgresInboxOptions& options,
                                                      Handler handler,
                                                      BatchHandler batch_handler) {
  if (!handler) return Status::InvalidArgument("inbox: a handler is required");
  return As<InboxStore>(OpenInbox(options, std::move(handler), std::move(batch_handler), nullptr));
}

Result<std::unique_ptr<InboxView>> OpenPostgresInboxView(const PostgresInboxOptions& options) {
  return As<InboxView>(OpenInbox(options, nullptr, nullptr, nullptr));
}

Result<std::unique_ptr<InboxStore>> OpenPostgresInbox(const PostgresInboxOptions& options,
                                                      SinkHandler handler) {
  if (!handler) return Status::InvalidArgument("inbox: a handler is required");
  return As<InboxStore>(OpenInbox(options, nullptr, nullptr, std::move(handler)));
}

}  // namespace outbox
