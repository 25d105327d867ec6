// PostgreSQL change stream: logical replication of the outbox table's INSERTs
// through the built-in pgoutput plugin (binary tuples), over libpq's
// replication protocol (replication=database, START_REPLICATION ... LOGICAL,
// CopyData frames both ways).
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "outbox/postgres.h"
#include "pgoutput.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SqlState(const PGresult* r) {
  const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  return s ? s : "";
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct Names {
  std::string slot, publication;
};

Result<Names> NamesOf(const PostgresChangeStreamOptions& o) {
  OUTBOX_RETURN_IF_ERROR(ValidateSchemaName(o.schema));
  Names n{o.slot.empty() ? DefaultStreamName(o.schema) : o.slot,
          o.publication.empty() ? DefaultStreamName(o.schema) : o.publication};
  if (!IsStreamName(n.slot)) {
    return Status::InvalidArgument("cdc.slot \"" + n.slot + "\" must match [a-z_][a-z0-9_]{0,62}");
  }
  if (!IsStreamName(n.publication)) {
    return Status::InvalidArgument("cdc.publication \"" + n.publication +
                                   "\" must match [a-z_][a-z0-9_]{0,62}");
  }
  return n;
}

Result<pg::ConnPtr> ConnectReplication(const PostgresChangeStreamOptions& o) {
  if (o.conninfo.empty()) return Status::InvalidArgument("cdc: the database URL is not set");
  pg::Session::Options so;
  so.conninfo = o.conninfo;
  so.connect_timeout = o.connect_timeout;
  so.statement_timeout = std::chrono::milliseconds(0);  // the stream runs for days
  so.application_name = "outbox-stream";
  so.replication = true;
  return pg::Session::OpenConnection(so);
}

// Runs a replication command or simple query; the result, or its error.
Result<pg::ResultPtr> Command(PGconn* c, const std::string& what, const std::string& cmd) {
  pg::ResultPtr r(PQexec(c, cmd.c_str()));
  const auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_COPY_BOTH) return r;
  return pg::StatusFromResult(c, r.get(), what);
}

class PostgresChangeStream final : public ChangeStream {
 public:
  PostgresChangeStream(pg::ConnPtr conn, std::string schema, std::string slot, bool created,
                       bool recreated)
      : conn_(std::move(conn)),
        schema_(std::move(schema)),
        slot_(std::move(slot)),
        created_(created),
        recreated_(recreated) {}

  bool created_slot() const override { return created_; }
  bool recreated_lost_slot() const override { return recreated_; }
  std::string slot() const override { return slot_; }

  Result<ChangeBatch> Next(const ChangeStreamLimits& limits) override {
    ChangeBatch b;
    std::int64_t bytes = 0;
    bool progressed = false;
    bool drained_socket = false;  // PQconsumeInput found nothing more since the last frame
    const auto deadline = Clock::now() + limits.wait;
    PGconn* c = conn_.get();
    for (;;) {
      if (b.events.size() >= limits.max_events ||
          (!b.events.empty() && bytes >= limits.max_bytes)) {
        return b;
      }
      char* buf = nullptr;
      const int n = PQgetCopyData(c, &buf, /*async=*/1);
      if (n > 0) {
        drained_socket = false;
        Status st = Handle(std::string_view(buf, static_cast<std::size_t>(n)), &b, &bytes,
                           &progressed);
        PQfreemem(buf);
        if (!st.ok()) return st;
        continue;
      }
      if (n == 0) {
        if (!b.events.empty() || progressed) {
          // Take what the kernel already holds before returning: one read of
          // libpq's buffer is only ~16 KiB (a few dozen events) of a backlog.
          if (!drained_socket) {
            drained_socket = true;
            if (!PQconsumeInput(c)) return pg::StatusFromResult(c, nullptr, "cdc: read");
            continue;
          }
          return b;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - Clock::now());
        if (left.count() <= 0) return b;
        pollfd p{PQsocket(c), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) {
          return Status::Unavailable("cdc: poll on the replication connection failed");
        }
        if (!PQconsumeInput(c)) return pg::StatusFromResult(c, nullptr, "cdc: read");
        continue;
      }
      // -1: the server ended the COPY (e.g. shutdown, slot dropped); -2: error.
      pg::ResultPtr r(PQgetResult(c));
      Status st = r && PQresultStatus(r.get()) == PGRES_FATAL_ERROR
                      ? pg::StatusFromResult(c, r.get(), "cdc: stream")
                      : Status::Unavailable("cdc: stream ended: " + Trim(PQerrorMessage(c)));
      return Status::Unavailable(st.message());
    }
  }

  Status Confirm(std::uint64_t lsn, bool want_reply) override {
    confirmed_ = std::max(confirmed_, lsn);
    return Send(want_reply);
  }

 private:
  Status Send(bool want_reply) {
    const std::string msg = pg::pgoutput::StatusUpdate(confirmed_, NowUnixUs(), want_reply);
    PGconn* c = conn_.get();
    if (PQputCopyData(c, msg.data(), static_cast<int>(msg.size())) != 1 || PQflush(c) != 0) {
      return Status::Unavailable("cdc: sending the standby status failed: " + Trim(PQerrorMessage(c)));
    }
    return Status::Ok();
  }

  Status Handle(std::string_view frame_bytes, ChangeBatch* b, std::int64_t* bytes,
                bool* progressed) {
    auto frame = pg::pgoutput::DecodeFrame(frame_bytes);
    if (!frame.ok()) return frame.status();
    if (const auto* k = std::get_if<pg::pgoutput::Keepalive>(&*frame)) {
      if (!in_txn_) {
        // Every transaction that committed before wal_end has been sent (or
        // had nothing for us): confirming it lets the slot move on an idle
        // outbox while other tables keep the WAL busy.
        b->confirmable_lsn = std::max(b->confirmable_lsn, k->wal_end);
        b->covered_until_us = std::max(b->covered_until_us, k->send_time_us);
        *progressed = true;
      }
      if (k->reply_requested) return Send(false);
      return Status::Ok();
    }
    const auto& x = std::get<pg::pgoutput::XLogData>(*frame);
    auto msg = pg::pgoutput::DecodeMessage(x.data);
    if (!msg.ok()) return msg.status();
    if (const auto* begin = std::get_if<pg::pgoutput::Begin>(&*msg)) {
      in_txn_ = true;
      commit_time_us_ = begin->commit_time_us;
    } else if (const auto* commit = std::get_if<pg::pgoutput::Commit>(&*msg)) {
      in_txn_ = false;
      b->confirmable_lsn = std::max(b->confirmable_lsn, commit->end_lsn);
      b->covered_until_us = std::max(b->covered_until_us, commit->commit_time_us);
      *progressed = true;
    } else if (const auto* rel = std::get_if<pg::pgoutput::Relation>(&*msg)) {
      if (rel->nspname == schema_ && rel->relname == "outbox") {
        auto layout = pg::pgoutput::LayoutOf(*rel);
        if (!layout.ok()) return layout.status();
        layouts_[rel->id] = *layout;
      } else {
        layouts_.erase(rel->id);
        foreign_.insert_or_assign(rel->id, rel->nspname + "." + rel->relname);
      }
    } else if (const auto* ins = std::get_if<pg::pgoutput::Insert>(&*msg)) {
      auto it = layouts_.find(ins->relation);
      if (it == layouts_.end()) {
        // The publication carries another table: nothing of ours.
        if (foreign_.count(ins->relation)) return Status::Ok();
        return Status::Internal("cdc: an INSERT for relation " + std::to_string(ins->relation) +
                                " arrived before its description");
      }
      auto ev = pg::pgoutput::EventOf(*ins, it->second);
      if (!ev.ok()) return ev.status();
      // From the commit to now, the moment the relay decodes it: the database's
      // commit time against our clock (on one host one clock; across hosts
      // their skew enters — the server's send time alone would leave out the
      // time the change waited in the socket while the relay was busy).
      const std::int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count();
      ev->age_at_claim = std::chrono::microseconds(
          std::max<std::int64_t>(0, std::max(now_us, x.send_time_us) - commit_time_us_));
      *bytes += static_cast<std::int64_t>(ev->event.payload.size());
      b->events.push_back(std::move(ev).value());
    } else if (const auto* m = std::get_if<pg::pgoutput::LogicalMessage>(&*msg)) {
      if (!m->transactional && !in_txn_) {
        b->confirmable_lsn = std::max(b->confirmable_lsn, m->lsn);
        *progressed = true;
      }
    }
    return Status::Ok();
  }

  pg::ConnPtr conn_;
  const std::string schema_, slot_;
  const bool created_, recreated_;
  std::uint64_t confirmed_ = 0;
  bool in_txn_ = false;
  std::int64_t commit_time_us_ = 0;
  std::map<std::uint32_t, pg::pgoutput::OutboxLayout> layouts_;
  std::map<std::uint32_t, std::string> foreign_;
};

}  // namespace

std::string DefaultStreamName(const std::string& schema) { return "outbox_" + schema; }

bool IsStreamName(const std::string& name) {
  return pg::sql::IsIdentifier(name, 63) && !pg::sql::IsReservedWord(name);
}

Result<std::unique_ptr<ChangeStream>> OpenPostgresChangeStream(
    const PostgresChangeStreamOptions& o) {
  auto names = NamesOf(o);
  if (!names.ok()) return names.status();
  auto conn = ConnectReplication(o);
  if (!conn.ok()) return conn.status();
  PGconn* c = conn->get();

  auto level = Command(c, "cdc: wal_level", "SHOW wal_level");
  if (!level.ok()) return level.status();
  const std::string wal_level = PQgetvalue(level->get(), 0, 0);
  if (wal_level != "logical") {
    return Status::FailedPrecondition(
        "cdc: the server runs with wal_level = " + wal_level +
        "; change data capture needs wal_level = logical (postgresql.conf; then restart)");
  }
  // The publication, and whether it publishes the outbox: dropping the table
  // (DROP SCHEMA ... CASCADE, then migrating again) leaves the publication
  // without it, and a stream of it would decode nothing, every event waiting
  // for the sweeper.
  auto pub = Command(c, "cdc: publication",
                     "SELECT EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname"
                     " AND t.schemaname = '" + o.schema + "' AND t.tablename = 'outbox')"
                     " FROM pg_publication p WHERE p.pubname = '" + names->publication + "'");
  if (!pub.ok()) return pub.status();
  if (PQntuples(pub->get()) == 0) {
    return Status::FailedPrecondition(
        "cdc: publication " + names->publication + " does not exist; run `outboxctl migrate` "
        "as a role that may create it, or: CREATE PUBLICATION " + names->publication +
        " FOR TABLE " + o.schema + ".outbox WITH (publish = 'insert')");
  }
  if (std::string(PQgetvalue(pub->get(), 0, 0)) != "t") {
    return Status::FailedPrecondition(
        "cdc: publication " + names->publication + " does not publish " + o.schema +
        ".outbox (was the table dropped and created again?): ALTER PUBLICATION " +
        names->publication + " ADD TABLE " + o.schema + ".outbox");
  }

  const std::string start = "START_REPLICATION SLOT " + names->slot +
                            " LOGICAL 0/0 (proto_version '1', publication_names '" +
                            names->publication + "', binary 'true', messages 'true')";
  const std::string create =
      "CREATE_REPLICATION_SLOT " + names->slot + " LOGICAL pgoutput NOEXPORT_SNAPSHOT";
  bool created = false, recreated = false;
  for (int round = 0; round < 3; ++round) {
    pg::ResultPtr r(PQexec(c, start.c_str()));
    if (r && PQresultStatus(r.get()) == PGRES_COPY_BOTH) {
      return std::unique_ptr<ChangeStream>(new PostgresChangeStream(
          std::move(conn).value(), o.schema, names->slot, created, recreated));
    }
    const std::string state = r ? SqlState(r.get()) : "";
    const std::string message = r ? Trim(PQresultErrorMessage(r.get())) : Trim(PQerrorMessage(c));
    if (state == "55006") {
      return Status::Fenced("cdc: slot " + names->slot + " is in use by another reader: " + message);
    }
    if (state == "42501") {
      return Status::FailedPrecondition("cdc: " + message +
                                        " (the relay's role needs the REPLICATION attribute: "
                                        "ALTER ROLE ... WITH REPLICATION)");
    }
    if (state == "42704") {  // no such slot: create it (from now on)
      auto made = Command(c, "cdc: create slot", create);
      if (!made.ok()) {
        if (made.status().message().find("42710") != std::string::npos) continue;  // a racer made it
        return made.status();
      }
      created = true;
      continue;
    }
    if (state == "55000" && message.find("no longer") != std::string::npos) {
      // Invalidated (max_slot_wal_keep_size): what it held is gone from the
      // WAL. Drop it and start a new one; the sweeper covers the gap.
      auto dropped = Command(c, "cdc: drop lost slot", "DROP_REPLICATION_SLOT " + names->slot);
      if (!dropped.ok()) return dropped.status();
      recreated = true;
      continue;
    }
    return r ? pg::StatusFromResult(c, r.get(), "cdc: start replication")
             : Status::Unavailable("cdc: start replication: " + message);
  }
  return Status::Internal("cdc: could not start slot " + names->slot + " after creating it");
}

Status DropPostgresSlot(const PostgresChangeStreamOptions& o) {
  auto names = NamesOf(o);
  if (!names.ok()) return names.status();
  auto conn = ConnectReplication(o);
  if (!conn.ok()) return conn.status();
  pg::ResultPtr r(PQexec(conn->get(), ("DROP_REPLICATION_SLOT " + names->slot).c_str()));
  if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return Status::Ok();
  const std::string state = r ? SqlState(r.get()) : "";
  if (state == "42704") return Status::NotFound("cdc: slot " + names->slot + " does not exist");
  if (state == "55006") return Status::Fenced("cdc: slot " + names->slot + " is in use");
  return pg::StatusFromResult(conn->get(), r.get(), "cdc: drop slot");
}

ChangeSource PostgresChangeSource(const PostgresChangeStreamOptions& options) {
  ChangeSource source;
  source.open = [options] { return OpenPostgresChangeStream(options); };
  source.retire_slot = [options] { return DropPostgresSlot(options); };
  return source;
}

}  // namespace outbox
