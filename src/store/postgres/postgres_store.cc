// PostgreSQL implementation of outbox::Store: lease-based claim (the seed's
// design; see docs/design.md for why over lock-holding transactions).
#include <libpq-fe.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "outbox/postgres.h"
#include "headers_json.h"
#include "log_store.h"
#include "records.h"
#include "session.h"
#include "migrate.h"
#include "sql.h"

namespace outbox {
namespace {

using pg::Param;

std::string SeqArray(const std::vector<Ticket>& tickets) {
  std::vector<std::int64_t> seqs;
  seqs.reserve(tickets.size());
  for (const Ticket& t : tickets) seqs.push_back(t.seq);
  return pg::Int64ArrayLiteral(seqs);
}

Result<TransitionResult> CollectApplied(pg::ResultPtr res, std::span<const Ticket> asked) {
  TransitionResult out;
  std::set<std::int64_t> applied;
  for (int i = 0; i < PQntuples(res.get()); ++i) applied.insert(pg::GetInt64(res.get(), i, 0));
  out.applied = applied.size();
  for (const Ticket& t : asked) {
    if (!applied.count(t.seq)) out.refused.push_back(t);
  }
  return out;
}

class PostgresStore final : public Store, public StreamLedger {
 public:
  PostgresStore(PostgresStoreOptions options, std::unique_ptr<pg::Session> session)
      : options_(std::move(options)),
        session_(std::move(session)),
        claim_ordered_(pg::sql::ClaimOrdered(options_.schema)),
        claim_unordered_(pg::sql::ClaimUnordered(options_.schema)),
        mark_sent_(options_.sent_mode == SentMode::kDelete
                       ? pg::sql::MarkSentDelete(options_.schema)
                       : pg::sql::MarkSentUpdate(options_.schema)),
        reschedule_(pg::sql::Reschedule(options_.schema)),
        mark_failed_(pg::sql::MarkFailed(options_.schema)),
        purge_(pg::sql::PurgeSent(options_.schema)),
        stats_(pg::sql::Stats(options_.schema)),
        stream_states_(pg::sql::StreamStates(options_.schema)),
        count_sent_(pg::sql::CountSent(options_.schema)) {}

  StreamLedger* Ledger() override { return this; }

  Result<std::vector<int>> Migrate() override {
    std::vector<int> applied;
    OUTBOX_RETURN_IF_ERROR(pg::RefuseOtherLayout(*session_, options_.schema, StoreLayout::kRows));
    OUTBOX_RETURN_IF_ERROR(pg::RunMigrations(*session_, options_.schema,
                                             pg::kOutboxSet, &applied));
    return applied;
  }

  // A claim that failed because the schema no longer holds the row store
  // (`outboxctl migrate --layout log` converted it while this store was
  // open) says so, instead of the missing column or function it ran into.
  Status ConvertedUnderUs(const Status& failed) {
    if (failed.code() != Code::kInternal && failed.code() != Code::kFailedPrecondition) return failed;
    auto held = pg::HeldLayout(*session_, options_.schema);
    if (!held.ok() || *held != StoreLayout::kLog) return failed;
    return Status::FailedPrecondition(
        "schema " + options_.schema + " was converted to the log while this process had it open "
        "as rows: restart it (it then opens the log); nothing was claimed");
  }

  Result<ClaimResult> Claim(const ClaimOptions& o) override {
    if (o.batch_size <= 0) return Status::InvalidArgument("claim: batch_size must be > 0");
    if (o.batch_bytes <= 0) return Status::InvalidArgument("claim: batch_bytes must be > 0");
    if (o.lease.count() < 0) return Status::InvalidArgument("claim: lease must be >= 0");
    if (o.max_attempts <= 0) return Status::InvalidArgument("claim: max_attempts must be > 0");
    auto res = session_->Exec(
        "claim", o.ordered ? claim_ordered_ : claim_unordered_,
        {Param::Text(std::to_string(o.batch_size)), Param::Text(o.owner),
         Param::Text(std::to_string(o.lease.count())), Param::Text(std::to_string(o.max_attempts)),
         Param::Text(o.failed_holds_aggregate ? "true" : "false"),
         Param::Text(std::to_string(o.batch_bytes)),
         o.sweep_margin.count() > 0 ? Param::Text(std::to_string(o.sweep_margin.count()))
                                    : Param::Null(),
         Param::Text(std::to_string(o.stream_stale_after.count()))},
        {pg::kInt4Oid, pg::kTextOid, pg::kInt8Oid, pg::kInt4Oid, pg::kBoolOid, pg::kInt8Oid,
         pg::kInt8Oid, pg::kInt8Oid},
        /*result_format=*/1);
    if (!res.ok()) return ConvertedUnderUs(res.status());
    const PGresult* r = res->get();
    ClaimResult out;
    const int n = PQntuples(r);
    out.events.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const std::int64_t seq = pg::GetInt64(r, i, 0);
      if (pg::GetText(r, i, 10) == "FAILED") {
        out.expired_to_failed.push_back(seq);
        continue;
      }
      ClaimedEvent ce;
      ce.ticket = Ticket{seq, pg::GetInt64(r, i, 9)};
      ce.event_id = pg::GetText(r, i, 1);
      ce.event.aggregate_type = pg::GetText(r, i, 2);
      ce.event.aggregate_id = pg::GetText(r, i, 3);
      ce.event.event_type = pg::GetText(r, i, 4);
      ce.event.payload = pg::GetText(r, i, 5);  // binary result: the raw bytes
      auto headers = store_common::ParseHeadersJson(pg::GetText(r, i, 6));
      if (!headers.ok()) return headers.status();
      ce.event.headers = std::move(headers).value();
      ce.event.dedup_key = pg::GetOptionalText(r, i, 7);
      ce.attempts = static_cast<int>(pg::GetInt64(r, i, 8));
      ce.created_at = std::chrono::system_clock::time_point(
          std::chrono::microseconds(pg::GetInt64(r, i, 11)));
      ce.age_at_claim = std::chrono::microseconds(std::max<std::int64_t>(0, pg::GetInt64(r, i, 12)));
      out.events.push_back(std::move(ce));
    }
    std::sort(out.events.begin(), out.events.end(),
              [](const ClaimedEvent& a, const ClaimedEvent& b) { return a.ticket.seq < b.ticket.seq; });
    std::sort(out.expired_to_failed.begin(), out.expired_to_failed.end());
    return out;
  }

  Result<TransitionResult> MarkSent(std::span<const Ticket> tickets) override {
    if (tickets.empty()) return TransitionResult{};
    std::vector<std::int64_t> seqs, tokens;
    seqs.reserve(tickets.size());
    tokens.reserve(tickets.size());
    for (const Ticket& t : tickets) {
      seqs.push_back(t.seq);
      tokens.push_back(t.token);
    }
    auto res = session_->Exec("mark sent", mark_sent_,
                              {Param::Text(pg::Int64ArrayLiteral(seqs)),
                               Param::Text(pg::Int64ArrayLiteral(tokens))});
    if (!res.ok()) return res.status();
    return CollectApplied(std::move(res).value(), tickets);
  }

  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) override {
    if (items.empty()) return TransitionResult{};
    nlohmann::json arr = nlohmann::json::array();
    std::vector<Ticket> asked;
    for (const RescheduleItem& it : items) {
      arr.push_back({{"seq", it.ticket.seq},
                     {"token", it.ticket.token},
                     {"delay_ms", std::max<std::int64_t>(0, it.delay.count())},
                     {"counts", it.attempt_counts},
                     {"error", SafeText(it.error)}});
      asked.push_back(it.ticket);
    }
    auto res = session_->Exec("reschedule", reschedule_,
                              {Param::Text(arr.dump()), Param::Text(SeqArray(asked))});
    if (!res.ok()) return res.status();
    return CollectApplied(std::move(res).value(), asked);
  }

  Result<TransitionResult> MarkFailed(std::span<const FailItem> items) override {
    if (items.empty()) return TransitionResult{};
    nlohmann::json arr = nlohmann::json::array();
    std::vector<Ticket> asked;
    for (const FailItem& it : items) {
      arr.push_back(
          {{"seq", it.ticket.seq}, {"token", it.ticket.token}, {"error", SafeText(it.error)}});
      asked.push_back(it.ticket);
    }
    auto res = session_->Exec("mark failed", mark_failed_,
                              {Param::Text(arr.dump()), Param::Text(SeqArray(asked))});
    if (!res.ok()) return res.status();
    return CollectApplied(std::move(res).value(), asked);
  }

  Result<std::int64_t> PurgeSent(std::chrono::seconds retention, int batch) override {
    if (batch <= 0) return Status::InvalidArgument("purge: batch must be > 0");
    auto res = session_->Exec(
        "purge", purge_,
        {Param::Text(std::to_string(retention.count())), Param::Text(std::to_string(batch))},
        {pg::kInt8Oid, pg::kInt4Oid});
    if (!res.ok()) return res.status();
    return static_cast<std::int64_t>(std::strtoll(PQcmdTuples(res->get()), nullptr, 10));
  }

  Result<bool> WaitForWork(std::chrono::milliseconds timeout) override {
    return pg::WaitForNotify(*session_, "outbox_" + options_.schema, &listening_on_, timeout);
  }

  Result<std::vector<StreamRowState>> StreamStates(std::span<const std::int64_t> seqs,
                                                   bool failed_holds_aggregate,
                                                   std::span<const std::int64_t> acked) override {
    std::vector<StreamRowState> out;
    if (seqs.empty()) return out;
    OUTBOX_RETURN_IF_ERROR(session_->EnsureConnected());
    if (stream_session_tuned_ != session_->generation()) {
      // Only a change stream asks for row states, and its session is a direct
      // one (replication does not pass PgBouncer), so a session setting stays
      // with it. random_page_cost 1.1 (the table is cached): with the default
      // 4 and statistics from before a backlog was sent, the planner checked
      // "an earlier unsent event of this aggregate" by walking the primary key
      // through every SENT row when aggregates are few — 405 ms per 2,000-row
      // check at 100,000 rows over 10 aggregates, against 5-18 ms. No JIT: a
      // check is a few milliseconds of index probes.
      auto tuned = session_->Exec("stream session settings",
                                  "SELECT set_config('random_page_cost', '1.1', false), "
                                  "set_config('jit', 'off', false)");
      if (!tuned.ok()) return tuned.status();
      stream_session_tuned_ = session_->generation();
    }
    auto res = session_->Exec(
        "stream states", stream_states_,
        {Param::Text(pg::Int64ArrayLiteral(std::vector<std::int64_t>(seqs.begin(), seqs.end()))),
         Param::Text(failed_holds_aggregate ? "true" : "false"),
         Param::Text(pg::Int64ArrayLiteral(std::vector<std::int64_t>(acked.begin(), acked.end())))});
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    out.reserve(static_cast<std::size_t>(PQntuples(r)));
    for (int i = 0; i < PQntuples(r); ++i) {
      StreamRowState st;
      st.seq = pg::GetInt64(r, i, 0);
      const std::string status = pg::GetText(r, i, 1);
      st.state = status == "PENDING"      ? RowState::kPending
                 : status == "PROCESSING" ? RowState::kProcessing
                 : status == "SENT"       ? RowState::kSent
                 : status == "FAILED"     ? RowState::kFailed
                                          : RowState::kSkipped;
      st.attempts = static_cast<int>(pg::GetInt64(r, i, 2));
      st.due = pg::GetText(r, i, 3) == "t";
      st.earlier_unsent = pg::GetInt64(r, i, 4);
      st.held = st.earlier_unsent > 0;
      out.push_back(st);
    }
    return out;
  }

  Status SaveStreamProgress(const StreamProgress& p) override {
    return session_
        ->Exec("save stream progress", pg::sql::SaveStreamProgress(options_.schema),
               {Param::Text(p.slot), Param::Text(SafeText(p.reader)),
                Param::Text(pg::LsnText(p.confirmed_lsn)),
                Param::Text(std::to_string(p.covered_until_us))})
        .status();
  }

  Status OpenStreamProgress(const std::string& slot, const std::string& reader) override {
    return session_
        ->Exec("open stream progress", pg::sql::OpenStreamProgress(options_.schema),
               {Param::Text(slot), Param::Text(SafeText(reader))})
        .status();
  }

  Status DropStreamProgress(const std::string& slot) override {
    return session_
        ->Exec("drop stream progress", pg::sql::DropStreamProgress(options_.schema),
               {Param::Text(slot)})
        .status();
  }

  Result<SlotStatus> StreamSlotStatus(const std::string& slot) override {
    auto res = session_->Exec("slot status", pg::sql::SlotStatus(options_.schema),
                              {Param::Text(slot)});
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    SlotStatus st;
    if (PQntuples(r) == 0) return st;
    st.exists = true;
    st.retained_wal_bytes = pg::GetInt64(r, 0, 0);
    st.active = pg::GetText(r, 0, 1) == "t";
    st.wal_status = pg::GetText(r, 0, 2);
    if (!PQgetisnull(r, 0, 3)) st.lag = std::chrono::milliseconds(pg::GetInt64(r, 0, 3));
    return st;
  }

  Result<StoreStats> Stats() override {
    auto res = session_->Exec("stats", stats_);
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    StoreStats s;
    s.pending = pg::GetInt64(r, 0, 0);
    s.processing = pg::GetInt64(r, 0, 1);
    s.failed = pg::GetInt64(r, 0, 2);
    s.skipped = pg::GetInt64(r, 0, 3);
    s.oldest_unsent_age = std::chrono::milliseconds(pg::GetInt64(r, 0, 4));
    s.held_aggregates = pg::GetInt64(r, 0, 5);
    return s;
  }

  Result<ActivityReport> RecentActivity(std::chrono::seconds window) override {
    auto res = session_->Exec("recent activity", pg::sql::RecentActivity(options_.schema),
                              {Param::Text(std::to_string(window.count()))});
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    ActivityReport out;
    for (int i = 0; i < PQntuples(r); ++i) {
      if (pg::GetText(r, i, 0) == "m") {
        out.minutes.push_back({pg::GetInt64(r, i, 1), pg::GetInt64(r, i, 2), pg::GetInt64(r, i, 3)});
      } else {
        out.relays.push_back({pg::GetText(r, i, 1), pg::GetText(r, i, 4), pg::GetText(r, i, 2),
                              pg::GetInt64(r, i, 3)});
      }
    }
    return out;
  }

  Result<std::int64_t> CountSent() override {
    auto res = session_->Exec("count sent", count_sent_);
    if (!res.ok()) return res.status();
    return pg::GetInt64(res->get(), 0, 0);
  }

  Result<ReplayCounts> ReplayFailed(const ReplaySelection& sel) override {
    if (!IsValidText(sel.event_id) || !IsValidText(sel.aggregate_id) ||
        !IsValidText(sel.event_type)) {
      return Status::InvalidArgument("replay: --event-id, --aggregate and --type must be text");
    }
    auto res = session_->Exec("replay", pg::sql::ReplayFailed(options_.schema),
                              {Param::Text(sel.event_id), Param::Text(sel.aggregate_id),
                               Param::Text(sel.event_type), Param::Text(sel.dry_run ? "true" : "false")});
    if (!res.ok()) return res.status();
    ReplayCounts c;
    c.matched = pg::GetInt64(res->get(), 0, 0);
    c.replayed = pg::GetInt64(res->get(), 0, 1);
    c.released = pg::GetInt64(res->get(), 0, 2);
    c.oldest_age = std::chrono::seconds(pg::GetInt64(res->get(), 0, 3));
    return c;
  }

  Result<SkipResult> Skip(const SkipRequest& req) override {
    if (req.event_id.empty()) return Status::InvalidArgument("skip: event id is required");
    if (!IsValidText(req.event_id)) return Status::InvalidArgument("skip: event id must be text");
    auto res = session_->Exec("skip", pg::sql::Skip(options_.schema),
                              {Param::Text(req.event_id), Param::Text(SafeText(req.by)),
                               Param::Text(SafeText(req.reason)),
                               Param::Text(req.dry_run ? "true" : "false")});
    if (!res.ok()) return res.status();
    SkipResult r;
    r.was = pg::GetText(res->get(), 0, 0);
    r.skipped = pg::GetInt64(res->get(), 0, 1);
    r.released = pg::GetInt64(res->get(), 0, 2);
    return r;
  }

  Result<std::vector<EventRecord>> List(const ListFilter& f) override {
    if (!IsValidText(f.state) || !IsValidText(f.aggregate_id) || !IsValidText(f.event_type)) {
      return Status::InvalidArgument("list: --state, --aggregate and --type must be text");
    }
    if (f.limit < 1) return Status::InvalidArgument("list: limit must be >= 1");
    return pg::EventRecords(session_->Exec(
        "list", pg::sql::List(options_.schema),
        {Param::Text(f.state), Param::Text(f.aggregate_id), Param::Text(f.event_type),
         Param::Text(std::to_string(f.older_than.count())), Param::Text(std::to_string(f.limit))}));
  }

  Result<std::vector<EventRecord>> Find(const std::string& key) override {
    if (!IsValidText(key)) return Status::InvalidArgument("trace: the key must be text");
    return pg::EventRecords(session_->Exec("trace", pg::sql::Find(options_.schema), {Param::Text(key)}));
  }

  Result<std::optional<std::chrono::system_clock::time_point>> OldestUnsent() override {
    auto res = session_->Exec("oldest unsent", pg::sql::OldestUnsent(options_.schema));
    if (!res.ok()) return res.status();
    if (PQntuples(res->get()) == 0) return std::optional<std::chrono::system_clock::time_point>();
    return std::optional<std::chrono::system_clock::time_point>(
        std::chrono::system_clock::time_point(std::chrono::microseconds(pg::GetInt64(res->get(), 0, 0))));
  }

 private:
  // Error texts come from brokers and exceptions; keep them storable as text.
  static std::string SafeText(const std::string& s) { return pg::sql::StorableText(s, 4000); }

  PostgresStoreOptions options_;
  std::unique_ptr<pg::Session> session_;
  PGconn* listening_on_ = nullptr;  // the connection that has run LISTEN
  std::uint64_t stream_session_tuned_ = 0;  // the session generation tuned for StreamStates
  const std::string claim_ordered_, claim_unordered_, mark_sent_, reschedule_, mark_failed_,
      purge_, stats_, stream_states_, count_sent_;
};

}  // namespace

std::string_view RowStateName(RowState s) {
  switch (s) {
    case RowState::kPending: return "PENDING";
    case RowState::kProcessing: return "PROCESSING";
    case RowState::kSent: return "SENT";
    case RowState::kFailed: return "FAILED";
    case RowState::kSkipped: return "SKIPPED";
  }
  return "UNKNOWN";
}

Status ValidateSchemaName(const std::string& name) {
  // 56: the relay LISTENs on outbox_<schema>, and channel names end at 63 bytes.
  if (!pg::sql::IsIdentifier(name, 56)) {
    return Status::InvalidArgument("schema \"" + name +
                                   "\" is not a valid schema name: use [a-z_][a-z0-9_]{0,55}");
  }
  if (pg::sql::IsReservedWord(name)) {
    return Status::InvalidArgument("schema \"" + name +
                                   "\" is a reserved word in PostgreSQL; choose another name "
                                   "(e.g. \"" + name + "_outbox\")");
  }
  return Status::Ok();
}

std::string RedactConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (opts == nullptr) {
    if (err) PQfreemem(err);
    return "<not a valid conninfo; not shown>";
  }
  std::string out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const bool secret = (o->dispchar && std::string(o->dispchar) == "*") ||
                        std::string(o->keyword).find("password") != std::string::npos;
    std::string v = secret ? "***" : o->val;
    std::string quoted = "'";
    for (char c : v) {
      if (c == '\'' || c == '\\') quoted += '\\';
      quoted += c;
    }
    if (!out.empty()) out += ' ';
    out += std::string(o->keyword) + "=" + quoted + "'";
  }
  PQconninfoFree(opts);
  return out;
}

Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options) {
  if (options.layout == StoreLayout::kLog) return pg::OpenPostgresLogStore(options);
  auto session = pg::Session::ConnectFor(
      "", {options.conninfo, options.connect_timeout, options.statement_timeout, "outbox-store"},
      options.schema);
  if (!session.ok()) return session.status();
  if (options.layout == StoreLayout::kDetect) {
    auto held = pg::HeldLayout(**session, options.schema);
    if (!held.ok()) return held.status();
    if (*held == StoreLayout::kLog) return pg::OpenPostgresLogStore(options);
  }
  return std::unique_ptr<Store>(new PostgresStore(options, std::move(session).value()));
}

}  // namespace outbox
