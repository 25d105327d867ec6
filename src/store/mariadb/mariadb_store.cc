// The Store on MariaDB (docs/design.md, "MariaDB"). Every time comes from the
// database (UTC_TIMESTAMP(6)); every multi-statement operation runs in one
// transaction on the store's session (READ COMMITTED).
//
// The ordered claim reads candidates with plain reads, plans the batch in
// PlanOrderedClaim, and only then locks exactly those rows by primary key
// (FOR UPDATE SKIP LOCKED): a locking scan in InnoDB keeps every examined row
// locked until commit, which would make concurrent claims skip each other's
// whole candidate range. A head stays a head between the read and the lock:
// an aggregate's earlier rows only ever go from unsent to sent, and a later
// commit cannot bring an earlier seq (enqueue's aggregate lock row).
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "claim_plan.h"
#include "headers_json.h"
#include "outbox/mariadb.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

using maria::Rows;
namespace sql = maria::sql;

std::string SeqList(const std::vector<std::int64_t>& seqs) {
  std::string out;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(seqs[i]);
  }
  return out;
}

std::string TicketList(std::span<const Ticket> tickets) {
  std::string out;
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    out += std::string(i ? "," : "") + "(" + std::to_string(tickets[i].seq) + "," +
           std::to_string(tickets[i].token) + ")";
  }
  return out;
}

std::int64_t Int(const std::optional<std::string>& v) { return v ? std::stoll(*v) : 0; }
std::string Str(const std::optional<std::string>& v) { return v ? *v : std::string(); }

// A filter's value as a literal; "" (any) stays "".
std::string QuoteUnlessEmpty(MYSQL* c, const std::string& v) {
  return v.empty() ? std::string() : maria::Quote(c, v);
}

EventRecord ReadRecord(const maria::Row& r) {
  EventRecord e;
  e.seq = Int(r[0]);
  e.event_id = Str(r[1]);
  e.aggregate_type = Str(r[2]);
  e.aggregate_id = Str(r[3]);
  e.event_type = Str(r[4]);
  e.status = Str(r[5]);
  e.attempts = static_cast<int>(Int(r[6]));
  e.age_seconds = r[7] ? std::stod(*r[7]) : 0;
  e.dedup_key = Str(r[8]);
  e.last_error = Str(r[9]);
  e.lease_owner = Str(r[10]);
  e.created_at = Str(r[11]);
  e.claimed_at = Str(r[12]);
  e.sent_at = Str(r[13]);
  e.failed_at = Str(r[14]);
  e.skipped_at = Str(r[15]);
  e.skipped_by = Str(r[16]);
  e.skip_reason = Str(r[17]);
  if (r.size() > 20) {  // Find: headers, payload size, its first bytes
    e.headers = Str(r[18]);
    e.payload_bytes = Int(r[19]);
    e.payload_preview = Str(r[20]);
  }
  return e;
}

class MariaDbStore final : public Store {
 public:
  MariaDbStore(maria::Url url, MariaDbStoreOptions options)
      : url_(std::move(url)), options_(std::move(options)) {}

  Status Connect() {
    auto c = maria::Connect(url_, options_.connect_timeout, /*found_rows=*/true,
                            options_.statement_timeout);
    if (!c.ok()) return c.status();
    conn_ = std::move(c).value();
    return Status::Ok();
  }

  Result<std::vector<int>> Migrate() override {
    return MigrateMariaDb({options_.url, options_.connect_timeout});
  }

  Result<ClaimResult> Claim(const ClaimOptions& o) override {
    if (o.batch_size <= 0) return Status::InvalidArgument("claim: batch_size must be > 0");
    if (o.batch_bytes <= 0) return Status::InvalidArgument("claim: batch_bytes must be > 0");
    if (o.lease.count() < 0) return Status::InvalidArgument("claim: lease must be >= 0");
    if (o.max_attempts <= 0) return Status::InvalidArgument("claim: max_attempts must be > 0");
    return InTransaction<ClaimResult>("claim", [&](MYSQL* c) -> Result<ClaimResult> {
      auto chosen = o.ordered ? ChooseOrdered(c, o) : ChooseUnordered(c, o);
      if (!chosen.ok()) return chosen.status();
      ClaimResult out;
      if (chosen->empty()) return out;
      const std::string in = SeqList(*chosen);
      auto token = maria::Query(c, "claim: token", sql::NextLeaseToken());
      if (!token.ok()) return token.status();
      const std::string t = Str((*token)[0][0]);
      auto updated =
          maria::Exec(c, "claim: update",
                      sql::ClaimUpdate(in, maria::Quote(c, o.owner), t, o.lease, o.max_attempts));
      if (!updated.ok()) return updated.status();
      auto rows = maria::Query(c, "claim: read", sql::ClaimRead(in));
      if (!rows.ok()) return rows.status();
      for (const auto& r : *rows) {
        if (Str(r[10]) == "FAILED") {
          out.expired_to_failed.push_back(Int(r[0]));
          continue;
        }
        ClaimedEvent ce;
        ce.ticket = Ticket{Int(r[0]), Int(r[9])};
        ce.event_id = Str(r[1]);
        ce.event.aggregate_type = Str(r[2]);
        ce.event.aggregate_id = Str(r[3]);
        ce.event.event_type = Str(r[4]);
        ce.event.payload = Str(r[5]);
        auto headers = store_common::ParseHeadersJson(Str(r[6]));
        if (!headers.ok()) return headers.status();
        ce.event.headers = std::move(headers).value();
        ce.event.dedup_key = r[7];
        ce.attempts = static_cast<int>(Int(r[8]));
        ce.created_at = std::chrono::system_clock::time_point(std::chrono::microseconds(Int(r[11])));
        ce.age_at_claim = std::chrono::microseconds(std::max<std::int64_t>(0, Int(r[12])));
        out.events.push_back(std::move(ce));
      }
      return out;
    });
  }

  Result<TransitionResult> MarkSent(std::span<const Ticket> tickets) override {
    if (tickets.empty()) return TransitionResult{};
    if (options_.sent_mode == SentMode::kDelete) {
      return Fenced("mark sent", tickets, /*sent_too=*/false,
                    [](const std::string& in) { return sql::MarkSentDelete(in); });
    }
    // 'SENT' too: a retried mark whose commit reply was lost reports applied.
    return Fenced("mark sent", tickets, /*sent_too=*/true,
                  [](const std::string& in) { return sql::MarkSentUpdate(in); });
  }

  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) override {
    if (items.empty()) return TransitionResult{};
    OUTBOX_RETURN_IF_ERROR(Ensure());  // the texts are escaped for this connection
    std::vector<Ticket> tickets;
    std::vector<sql::RescheduleRow> rows;
    for (const RescheduleItem& it : items) {
      tickets.push_back(it.ticket);
      rows.push_back(
          {it.ticket.seq, it.attempt_counts, it.delay, maria::Quote(conn_.get(), it.error)});
    }
    return Fenced("reschedule", tickets, /*sent_too=*/false,
                  [&](const std::string& in) { return sql::Reschedule(rows, in); });
  }

  Result<TransitionResult> MarkFailed(std::span<const FailItem> items) override {
    if (items.empty()) return TransitionResult{};
    OUTBOX_RETURN_IF_ERROR(Ensure());  // the texts are escaped for this connection
    std::vector<Ticket> tickets;
    std::vector<sql::FailRow> rows;
    for (const FailItem& it : items) {
      tickets.push_back(it.ticket);
      rows.push_back({it.ticket.seq, maria::Quote(conn_.get(), it.error)});
    }
    return Fenced("mark failed", tickets, /*sent_too=*/false,
                  [&](const std::string& in) { return sql::MarkFailed(rows, in); });
  }

  Result<std::int64_t> PurgeSent(std::chrono::seconds retention, int batch) override {
    return WithSession<std::int64_t>([&](MYSQL* c) -> Result<std::int64_t> {
      auto n = maria::Exec(c, "purge", sql::PurgeSent(retention, batch));
      if (!n.ok()) return n.status();
      return static_cast<std::int64_t>(*n);
    });
  }

  Result<StoreStats> Stats() override {
    return WithSession<StoreStats>([&](MYSQL* c) -> Result<StoreStats> {
      auto r = maria::Query(c, "stats", sql::Stats());
      if (!r.ok()) return r.status();
      const auto& row = (*r)[0];
      StoreStats s;
      s.pending = Int(row[0]);
      s.processing = Int(row[1]);
      s.failed = Int(row[2]);
      s.skipped = Int(row[3]);
      s.oldest_unsent_age = std::chrono::milliseconds(Int(row[4]));
      s.held_aggregates = Int(row[5]);
      return s;
    });
  }

  Result<ActivityReport> RecentActivity(std::chrono::seconds window) override {
    return WithSession<ActivityReport>([&](MYSQL* c) -> Result<ActivityReport> {
      auto r = maria::Query(c, "recent activity", sql::RecentActivity(window));
      if (!r.ok()) return r.status();
      ActivityReport out;
      for (const auto& row : *r) {
        if (Str(row[0]) == "m") {
          out.minutes.push_back({Int(row[1]), Int(row[2]), Int(row[3])});
        } else {
          out.relays.push_back({Str(row[1]), Str(row[4]), Str(row[2]), Int(row[3])});
        }
      }
      return out;
    });
  }

  Result<std::int64_t> CountSent() override {
    return WithSession<std::int64_t>([&](MYSQL* c) -> Result<std::int64_t> {
      auto r = maria::Query(c, "count sent", sql::CountSent());
      if (!r.ok()) return r.status();
      return Int((*r)[0][0]);
    });
  }

  Result<ReplayCounts> ReplayFailed(const ReplaySelection& sel) override {
    return InTransaction<ReplayCounts>("replay", [&](MYSQL* c) -> Result<ReplayCounts> {
      auto target = maria::Query(c, "replay: select",
                                 sql::ReplaySelect(QuoteUnlessEmpty(c, sel.event_id),
                                                   QuoteUnlessEmpty(c, sel.aggregate_id),
                                                   QuoteUnlessEmpty(c, sel.event_type)));
      if (!target.ok()) return target.status();
      ReplayCounts out;
      out.matched = static_cast<std::int64_t>(target->size());
      std::vector<std::int64_t> seqs;
      std::map<std::pair<std::string, std::string>, std::int64_t> first;
      for (const auto& r : *target) {
        seqs.push_back(Int(r[0]));
        first.emplace(std::make_pair(Str(r[1]), Str(r[2])), Int(r[0]));  // rows come in seq order
        out.oldest_age = std::max(out.oldest_age, std::chrono::seconds(Int(r[3])));
      }
      if (sel.dry_run || seqs.empty()) return out;
      auto done = maria::Exec(c, "replay: update", sql::ReplayUpdate(SeqList(seqs)));
      if (!done.ok()) return done.status();
      out.replayed = static_cast<std::int64_t>(*done);
      for (const auto& [agg, seq] : first) {
        auto n = maria::Exec(c, "replay: release",
                             sql::ReplayRelease(maria::Quote(c, agg.first),
                                                maria::Quote(c, agg.second), seq, SeqList(seqs)));
        if (!n.ok()) return n.status();
        out.released += static_cast<std::int64_t>(*n);
      }
      return out;
    });
  }

  Result<SkipResult> Skip(const SkipRequest& req) override {
    return InTransaction<SkipResult>("skip", [&](MYSQL* c) -> Result<SkipResult> {
      auto target = maria::Query(c, "skip: select", sql::SkipSelect(maria::Quote(c, req.event_id)));
      if (!target.ok()) return target.status();
      SkipResult out;
      if (target->empty()) return out;
      const auto& r = (*target)[0];
      out.was = Str(r[1]);
      if (req.dry_run || (out.was != "FAILED" && out.was != "PENDING")) return out;
      auto done = maria::Exec(
          c, "skip: update",
          sql::SkipUpdate(Str(r[0]), maria::Quote(c, req.by), maria::Quote(c, req.reason)));
      if (!done.ok()) return done.status();
      out.skipped = static_cast<std::int64_t>(*done);
      auto n = maria::Exec(
          c, "skip: release",
          sql::SkipRelease(maria::Quote(c, Str(r[2])), maria::Quote(c, Str(r[3])), Str(r[0])));
      if (!n.ok()) return n.status();
      out.released = static_cast<std::int64_t>(*n);
      return out;
    });
  }

  Result<std::optional<std::chrono::system_clock::time_point>> OldestUnsent() override {
    using Out = std::optional<std::chrono::system_clock::time_point>;
    return WithSession<Out>([&](MYSQL* c) -> Result<Out> {
      auto r = maria::Query(c, "oldest unsent", sql::OldestUnsent());
      if (!r.ok()) return r.status();
      if (r->empty()) return Out{};
      return Out{std::chrono::system_clock::time_point(std::chrono::microseconds(Int((*r)[0][0])))};
    });
  }

  Result<std::vector<EventRecord>> List(const ListFilter& f) override {
    return WithSession<std::vector<EventRecord>>([&](MYSQL* c) -> Result<std::vector<EventRecord>> {
      return Records("list",
                     sql::List(QuoteUnlessEmpty(c, f.state), QuoteUnlessEmpty(c, f.aggregate_id),
                               QuoteUnlessEmpty(c, f.event_type), f.older_than, f.limit));
    });
  }

  Result<std::vector<EventRecord>> Find(const std::string& key) override {
    return WithSession<std::vector<EventRecord>>([&](MYSQL* c) -> Result<std::vector<EventRecord>> {
      return Records("find", sql::Find(maria::Quote(c, key)));
    });
  }

  // MariaDB has no LISTEN/NOTIFY: nothing wakes an idle relay early; its
  // workers poll (relay.poll_max_ms).
  Result<bool> WaitForWork(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(timeout);
    return false;
  }

 private:
  Status Ensure() { return conn_ ? Status::Ok() : Connect(); }

  // Runs `fn` on a connected session; reconnects first after a loss.
  template <typename T, typename Fn>
  Result<T> WithSession(Fn&& fn) {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    Result<T> r = fn(conn_.get());
    if (!r.ok() && r.status().code() == Code::kUnavailable) conn_.reset();
    return r;
  }

  // Runs `fn` inside START TRANSACTION ... COMMIT (ROLLBACK on error).
  template <typename T, typename Fn>
  Result<T> InTransaction(std::string_view what, Fn&& fn) {
    return WithSession<T>([&](MYSQL* c) -> Result<T> {
      auto begun = maria::Exec(c, what, "START TRANSACTION");
      if (!begun.ok()) return begun.status();
      Result<T> r = fn(c);
      if (!r.ok()) {
        (void)maria::Exec(c, what, "ROLLBACK");
        return r;
      }
      auto committed = maria::Exec(c, what, "COMMIT");
      if (!committed.ok()) return committed.status();
      return r;
    });
  }

  // A fenced transition: the rows whose (seq, lease_token) match and that are
  // PROCESSING (`sent_too`: or SENT) are locked and changed by
  // `change(seq list)`; the others are reported refused.
  template <typename Change>
  Result<TransitionResult> Fenced(std::string_view what, std::span<const Ticket> tickets,
                                  bool sent_too, Change&& change) {
    return InTransaction<TransitionResult>(what, [&](MYSQL* c) -> Result<TransitionResult> {
      std::vector<std::int64_t> seqs;
      for (const Ticket& t : tickets) seqs.push_back(t.seq);
      auto held =
          maria::Query(c, what, sql::FenceLock(SeqList(seqs), TicketList(tickets), sent_too));
      if (!held.ok()) return held.status();
      std::set<std::int64_t> applied;
      for (const auto& r : *held) applied.insert(Int(r[0]));
      if (!applied.empty()) {
        auto done = maria::Exec(c, what, change(SeqList({applied.begin(), applied.end()})));
        if (!done.ok()) return done.status();
      }
      TransitionResult out;
      for (const Ticket& t : tickets) {
        if (applied.count(t.seq)) {
          ++out.applied;
        } else {
          out.refused.push_back(t);
        }
      }
      return out;
    });
  }

  Result<std::vector<EventRecord>> Records(std::string_view what, const std::string& sql) {
    auto rows = maria::Query(conn_.get(), what, sql);
    if (!rows.ok()) return rows.status();
    std::vector<EventRecord> out;
    for (const auto& r : *rows) out.push_back(ReadRecord(r));
    return out;
  }

  // Unordered: due rows in seq order, locked as they are read (SKIP LOCKED),
  // then the byte bound.
  Result<std::vector<std::int64_t>> ChooseUnordered(MYSQL* c, const ClaimOptions& o) {
    auto rows = maria::Query(c, "claim", sql::ClaimUnordered(o.batch_size));
    if (!rows.ok()) return rows.status();
    std::vector<std::int64_t> out;
    std::int64_t bytes = 0;
    for (const auto& r : *rows) {
      const std::int64_t len = Int(r[1]);
      if (out.size() >= static_cast<std::size_t>(o.batch_size)) break;
      if (!out.empty() && bytes + len > o.batch_bytes) break;
      out.push_back(Int(r[0]));
      bytes += len;
    }
    return out;
  }

  Result<std::vector<std::int64_t>> ChooseOrdered(MYSQL* c, const ClaimOptions& o) {
    auto head_rows =
        maria::Query(c, "claim: heads", sql::ClaimHeads(o.batch_size, o.failed_holds_aggregate));
    if (!head_rows.ok()) return head_rows.status();
    if (head_rows->empty()) return std::vector<std::int64_t>{};
    std::vector<maria::UnsentRow> heads;
    for (const auto& r : *head_rows) {
      heads.push_back({Int(r[0]), Str(r[1]), Str(r[2]), true, static_cast<int>(Int(r[3])), Int(r[4])});
    }
    // Behind each head: its aggregate's next unsent rows, one index range each,
    // no more than the batch has room for once every head is in (none when
    // the heads fill it: the common case of many interleaved aggregates).
    std::vector<maria::UnsentRow> behind;
    std::vector<sql::RunHead> probes;
    const std::size_t room =
        heads.size() >= static_cast<std::size_t>(o.batch_size) ? 0 : static_cast<std::size_t>(o.batch_size) - heads.size();
    for (const auto& h : heads) {
      if (h.attempts >= o.max_attempts || room == 0) continue;
      probes.push_back({maria::Quote(c, h.aggregate_type), maria::Quote(c, h.aggregate_id), h.seq});
    }
    if (!probes.empty()) {
      auto rows = maria::Query(
          c, "claim: runs", sql::ClaimRuns(probes, o.max_attempts, o.failed_holds_aggregate, room));
      if (!rows.ok()) return rows.status();
      for (const auto& r : *rows) {
        behind.push_back({Int(r[0]), Str(r[1]), Str(r[2]), Int(r[3]) == 1,
                          static_cast<int>(Int(r[4])), Int(r[5])});
      }
    }
    maria::ClaimPick pick =
        maria::PlanOrderedClaim(heads, behind, o.batch_size, o.batch_bytes, o.max_attempts);
    std::vector<std::int64_t> all;
    for (std::size_t i = 0; i < pick.heads.size(); ++i) {
      all.push_back(pick.heads[i]);
      all.insert(all.end(), pick.runs[i].begin(), pick.runs[i].end());
    }
    // Lock exactly those; what another claim holds (or took meanwhile) is skipped.
    auto locked_rows = maria::Query(c, "claim: lock", sql::ClaimLock(SeqList(all)));
    if (!locked_rows.ok()) return locked_rows.status();
    std::set<std::int64_t> locked;
    for (const auto& r : *locked_rows) locked.insert(Int(r[0]));
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < pick.heads.size(); ++i) {
      if (!locked.count(pick.heads[i])) continue;  // another relay's now: so is its run
      out.push_back(pick.heads[i]);
      for (std::int64_t s : pick.runs[i]) {
        if (!locked.count(s)) break;  // a run is a prefix
        out.push_back(s);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  maria::Url url_;
  MariaDbStoreOptions options_;
  maria::ConnPtr conn_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenMariaDbStore(const MariaDbStoreOptions& options) {
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto store = std::make_unique<MariaDbStore>(*url, options);
  OUTBOX_RETURN_IF_ERROR(store->Connect());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace outbox
