#include "outbox/mariadb_inbox.h"

#include <exception>
#include <map>
#include <set>

#include "headers_json.h"
#include "migrate.h"
#include "outbox/event.h"
#include "inbox/apply.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

namespace sql = maria::sql;

std::int64_t Int(const std::optional<std::string>& v) { return v ? std::stoll(*v) : 0; }
std::string Str(const std::optional<std::string>& v) { return v ? *v : std::string(); }

// The apply strategy is the inbox's (src/inbox/apply.h); this store adds its
// SQL (InboxSession). MariaDB has no fast pass: a savepoint per message first.
class MariaDbInbox final : public InboxStore, public InboxView, private inbox_apply::InboxSession {
 public:
  MariaDbInbox(maria::Url url, MariaDbInboxOptions options, MariaDbHandler handler)
      : url_(std::move(url)), options_(std::move(options)), handler_(std::move(handler)) {}

  Status Connect() {
    auto c = maria::Connect(url_, options_.connect_timeout, /*found_rows=*/false,
                            options_.statement_timeout);
    if (!c.ok()) return c.status();
    conn_ = std::move(c).value();
    return Status::Ok();
  }

  Status Migrate() override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    return maria::RunMigrations(conn_.get(), maria::kInboxSet);
  }

  Status CheckSchema() override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    const std::string how = ": run outbox-consumer --migrate, or outboxctl inbox migrate";
    auto has = maria::Query(conn_.get(), "inbox schema check",
                            "SELECT count(*) FROM information_schema.tables WHERE table_schema = "
                            "DATABASE() AND table_name = 'inbox_migrations'");
    if (!has.ok()) return Lost(has.status());
    if (has->empty() || Str((*has)[0][0]) == "0") {
      return Status::FailedPrecondition(
          "the inbox tables are missing from this database (no inbox_migrations)" + how);
    }
    auto v = maria::Query(conn_.get(), "inbox schema check",
                          "SELECT coalesce(max(version), 0) FROM inbox_migrations");
    if (!v.ok()) return Lost(v.status());
    const long long have = v->empty() ? 0 : Int((*v)[0][0]);
    const auto need = static_cast<long long>(maria::kInboxSet.files().size());
    if (have < need) {
      return Status::FailedPrecondition("the inbox tables are at version " + std::to_string(have) +
                                        ", this build needs " + std::to_string(need) + how);
    }
    return Status::Ok();
  }

  Result<std::vector<MessageOutcome>> Apply(std::span<const InboundMessage> msgs,
                                            std::span<const std::string> keys,
                                            std::span<const std::string> order_keys) override {
    if (!handler_) {
      return Status::FailedPrecondition("inbox apply: this inbox was opened without a handler");
    }
    OUTBOX_RETURN_IF_ERROR(Ensure());
    return inbox_apply::Apply(*this, msgs, keys, order_keys);
  }

  Result<std::int64_t> PurgeStamps(std::chrono::seconds horizon, int batch) override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    auto n = maria::Exec(conn_.get(), "inbox purge",
                         sql::InboxPurgeStamps(Q(options_.consumer), horizon, batch));
    if (!n.ok()) return Lost(n.status());
    return static_cast<std::int64_t>(*n);
  }

  Result<std::vector<StampSummary>> Summary(std::chrono::seconds horizon) override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    auto stamps = maria::Query(conn_.get(), "inbox summary", sql::InboxSummaryStamps(horizon));
    if (!stamps.ok()) return Lost(stamps.status());
    auto parked = maria::Query(conn_.get(), "inbox summary", sql::InboxSummaryParked());
    if (!parked.ok()) return Lost(parked.status());
    std::map<std::string, StampSummary> by;
    for (const auto& r : *stamps) {
      StampSummary& s = by[Str(r[0])];
      s.consumer = Str(r[0]);
      s.stamps = Int(r[1]);
      s.older = Int(r[2]);
      s.oldest_stamp_age = std::chrono::seconds(Int(r[3]));
      s.duplicates = Int(r[4]);
    }
    for (const auto& r : *parked) {
      StampSummary& s = by[Str(r[0])];
      s.consumer = Str(r[0]);
      s.parked = Int(r[1]);
      s.oldest_parked_age = std::chrono::seconds(Int(r[2]));
    }
    std::vector<StampSummary> out;
    for (auto& [k, s] : by) out.push_back(std::move(s));
    return out;
  }

  Result<std::vector<StampRecord>> FindStamps(std::span<const std::string> keys) override {
    std::vector<StampRecord> out;
    std::string in;
    OUTBOX_RETURN_IF_ERROR(Ensure());
    for (const auto& k : keys) {
      if (!IsValidText(k)) continue;  // no stamp can have it
      if (!in.empty()) in += ", ";
      in += Q(k);
    }
    if (in.empty()) return out;
    auto rows = maria::Query(conn_.get(), "inbox find stamps", sql::InboxFindStamps(in));
    if (!rows.ok()) return Lost(rows.status());
    for (const auto& r : *rows) {
      out.push_back({Str(r[0]), Str(r[1]), Str(r[2]), Str(r[3]), Str(r[4]), Str(r[5]), Int(r[6])});
    }
    return out;
  }

  Result<std::set<std::string>> ParkedKeys(std::span<const std::string> order_keys) override {
    std::set<std::string> out;
    if (order_keys.empty()) return out;
    OUTBOX_RETURN_IF_ERROR(Ensure());
    std::string in;
    for (const auto& k : order_keys) {
      if (!in.empty()) in += ", ";
      in += Q(k);
    }
    auto rows = maria::Query(conn_.get(), "inbox parked keys",
                             sql::InboxParkedKeys(Q(options_.consumer), in));
    if (!rows.ok()) return Lost(rows.status());
    for (const auto& r : *rows) out.insert(Str(r[0]));
    return out;
  }

  Status Park(std::span<const ParkedMessage> messages) override {
    if (messages.empty()) return Status::Ok();
    OUTBOX_RETURN_IF_ERROR(Ensure());
    MYSQL* c = conn_.get();
    OUTBOX_RETURN_IF_ERROR(Run("inbox park", "START TRANSACTION"));
    for (const ParkedMessage& p : messages) {
      const InboundMessage& m = p.message;
      const auto ts_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(m.timestamp.time_since_epoch());
      sql::ParkedRow row;
      row.consumer = Q(options_.consumer);
      row.order_key = Q(p.order_key);
      row.dedup_key = Q(p.dedup_key);
      row.topic = Q(m.topic);
      row.partition = m.partition;
      row.offset = m.offset;
      row.key = m.key_is_null ? std::string("NULL") : maria::HexLiteral(m.key);
      row.payload = m.payload_is_null ? std::string("NULL") : maria::HexLiteral(m.payload);
      row.headers = maria::HexLiteral(store_common::EncodeInboxHeaders(m.headers));
      row.ts_ms = ts_ms.count();
      row.attempts = p.attempts;
      row.last_error = p.last_error.empty() ? std::string("NULL") : Q(p.last_error.substr(0, 8000));
      row.delay = p.delay;
      auto done = maria::Exec(c, "inbox park", sql::InboxPark(row));
      if (!done.ok()) {
        (void)maria::Exec(c, "inbox park", "ROLLBACK");
        return Lost(done.status());
      }
    }
    return Run("inbox park", "COMMIT");
  }

  Result<std::vector<ParkedMessage>> Due(int limit) override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    auto rows =
        maria::Query(conn_.get(), "inbox due parked", sql::InboxDue(Q(options_.consumer), limit));
    if (!rows.ok()) return Lost(rows.status());
    std::vector<ParkedMessage> out;
    for (const auto& r : *rows) {
      ParkedMessage p;
      p.id = Int(r[0]);
      p.order_key = Str(r[1]);
      p.dedup_key = Str(r[2]);
      p.message.topic = Str(r[3]);
      p.message.partition = static_cast<int>(Int(r[4]));
      p.message.offset = Int(r[5]);
      p.message.key_is_null = !r[6].has_value();
      p.message.key = Str(r[6]);
      p.message.payload_is_null = !r[7].has_value();
      p.message.payload = Str(r[7]);
      auto headers = store_common::DecodeInboxHeaders(Str(r[8]));
      if (!headers.ok()) return headers.status();
      p.message.headers = std::move(headers).value();
      p.message.timestamp =
          std::chrono::system_clock::time_point(std::chrono::milliseconds(Int(r[9])));
      p.attempts = static_cast<int>(Int(r[10]));
      p.last_error = Str(r[11]);
      out.push_back(std::move(p));
    }
    return out;
  }

  Status Unpark(std::span<const std::int64_t> ids) override {
    if (ids.empty()) return Status::Ok();
    OUTBOX_RETURN_IF_ERROR(Ensure());
    std::string in;
    for (std::int64_t id : ids) {
      if (!in.empty()) in += ',';
      in += std::to_string(id);
    }
    return Run("inbox unpark", sql::InboxUnpark(Q(options_.consumer), in));
  }

  Status Reschedule(std::int64_t id, int attempts, const std::string& error,
                    std::chrono::milliseconds delay) override {
    OUTBOX_RETURN_IF_ERROR(Ensure());
    return Run("inbox reschedule parked", sql::InboxReschedule(Q(options_.consumer), id, attempts,
                                                               Q(error.substr(0, 8000)), delay));
  }

 private:
  Status Ensure() {
    if (conn_) return Status::Ok();
    return Connect();
  }
  std::string Q(std::string_view s) { return maria::Quote(conn_.get(), s); }
  // A lost session is reopened by the next call.
  Status Lost(Status st) {
    if (st.code() == Code::kUnavailable) conn_.reset();
    return st;
  }
  Status Run(std::string_view what, const std::string& sql) {
    auto r = maria::Exec(conn_.get(), what, sql);
    return r.ok() ? Status::Ok() : Lost(r.status());
  }

  // Runs the handler; exceptions become transient errors.
  HandlerResult RunHandler(const InboundMessage& m) override {
    try {
      return handler_(m, conn_.get());
    } catch (const std::exception& e) {
      return HandlerResult::Transient(std::string("handler threw: ") + e.what());
    } catch (...) {
      return HandlerResult::Transient("handler threw a non-standard exception");
    }
  }

  // The stamp: 1 row affected when new, 2 when it existed (its duplicate
  // counted), 0 when it existed and duplicates are not counted.
  Result<bool> Stamp(const InboundMessage& m, const std::string& key) override {
    auto n = maria::Exec(conn_.get(), "inbox stamp",
                         sql::InboxInsertStamp(Q(options_.consumer), Q(key), Q(m.topic),
                                               m.partition, m.offset, options_.count_duplicates));
    if (!n.ok()) return Lost(n.status());
    return *n == 1;
  }

  Status Begin() override { return Run("inbox apply", "START TRANSACTION"); }
  Status Savepoint() override { return Run("inbox apply", "SAVEPOINT m"); }
  // Kept: the next SAVEPOINT m replaces it (a round trip saved per message).
  Status ReleaseSavepoint() override { return Status::Ok(); }
  Status RollbackToSavepoint() override { return Run("inbox apply", "ROLLBACK TO SAVEPOINT m"); }
  Status Commit() override {
    auto committed = maria::Exec(conn_.get(), "inbox commit", "COMMIT");
    if (committed.ok()) return Status::Ok();
    Rollback();
    return Lost(committed.status());
  }
  void Rollback() override {
    if (conn_) (void)maria::Exec(conn_.get(), "inbox apply", "ROLLBACK");
  }
  // Bad data (a constraint, a value out of range) is permanent; the rest transient.
  MessageOutcome OwnFailure(const Status& st) const override {
    return {st.code() == Code::kInvalidArgument ? Outcome::kPermanent : Outcome::kTransient, st.message()};
  }

  maria::Url url_;
  MariaDbInboxOptions options_;
  MariaDbHandler handler_;
  maria::ConnPtr conn_;
};

Result<std::unique_ptr<MariaDbInbox>> Open(const MariaDbInboxOptions& options,
                                           MariaDbHandler handler) {
  if (options.consumer.empty() || options.consumer.size() > 128) {
    return Status::InvalidArgument("inbox: consumer is required (at most 128 characters)");
  }
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto store = std::make_unique<MariaDbInbox>(*url, options, std::move(handler));
  OUTBOX_RETURN_IF_ERROR(store->Connect());
  return store;
}

}  // namespace

Result<std::unique_ptr<InboxStore>> OpenMariaDbInbox(const MariaDbInboxOptions& options,
                                                     MariaDbHandler handler) {
  if (!handler) return Status::InvalidArgument("inbox: a handler is required");
  auto inbox = Open(options, std::move(handler));
  if (!inbox.ok()) return inbox.status();
  return std::unique_ptr<InboxStore>(std::move(inbox).value());
}

Result<std::unique_ptr<InboxView>> OpenMariaDbInboxView(const MariaDbInboxOptions& options) {
  auto inbox = Open(options, nullptr);
  if (!inbox.ok()) return inbox.status();
  return std::unique_ptr<InboxView>(std::move(inbox).value());
}

}  // namespace outbox
