#include "session.h"

#include <poll.h>

#include <cstdio>

#include "outbox/postgres.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace outbox::pg {
namespace {

std::string TrimMessage(const char* msg) {
  std::string s = msg ? msg : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// What a refused call needs, said beside PostgreSQL's message (which names
// the table, sequence or schema, not the privilege).
std::string PrivilegeHint(std::string_view what, std::string_view message) {
  const std::string hint = " — a missing privilege, not an outage";
  const std::string doc = " (docs/relay.md, \"Privileges\")";
  if (message.find("for sequence") != std::string_view::npos) {
    return hint + ": `" + std::string(what) + "` needs USAGE on that sequence" + doc;
  }
  if (message.find("for schema") != std::string_view::npos) {
    return hint + ": `" + std::string(what) + "` needs USAGE on that schema" + doc;
  }
  if (message.find("for function") != std::string_view::npos) {
    return hint + ": `" + std::string(what) + "` needs EXECUTE on that function" + doc;
  }
  struct Need {
    std::string_view op, privileges;
  };
  static constexpr Need kNeeds[] = {
      {"claim", "SELECT and UPDATE"}, {"mark sent", "UPDATE"}, {"mark failed", "UPDATE"},
      {"reschedule", "UPDATE"},       {"purge", "DELETE"},     {"stats", "SELECT"},
  };
  for (const Need& n : kNeeds) {
    if (what == n.op && message.find("for table") != std::string_view::npos) {
      return hint + ": `" + std::string(what) + "` needs " + std::string(n.privileges) + " on that table" + doc;
    }
  }
  return hint + doc;
}

// libpq gives no SQLSTATE for a failed connection; these are its (and the
// server's, in English) words for class 28 and a refused CONNECT.
bool RefusedConnection(std::string_view msg) {
  for (std::string_view words : {"password authentication failed", "no pg_hba.conf entry",
                                 "permission denied for database", "authentication failed for user",
                                 "is not permitted to log in"}) {
    if (msg.find(words) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

Status StatusFromResult(PGconn* conn, const PGresult* res, std::string_view what) {
  std::string prefix = std::string(what) + ": ";
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    return Status::Unavailable(prefix + "connection to PostgreSQL lost: " +
                               TrimMessage(conn ? PQerrorMessage(conn) : "no connection"));
  }
  if (res == nullptr) {
    return Status::Unavailable(prefix + TrimMessage(PQerrorMessage(conn)));
  }
  const char* state_c = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  std::string state = state_c ? state_c : "";
  std::string msg = prefix + TrimMessage(PQresultErrorMessage(res));
  if (!state.empty()) {  // on the first line, which is what a log or a header keeps
    const auto nl = msg.find('\n');
    msg.insert(nl == std::string::npos ? msg.size() : nl, " [SQLSTATE " + state + "]");
  }
  std::string cls = state.substr(0, 2);
  // 25006: a read-only transaction, as on a standby after a failover.
  if (cls == "08" || state == "57P01" || state == "57P02" || state == "57P03" || cls == "53" ||
      state == "25006") {
    return Status::Unavailable(msg);
  }
  if (state == "57014") return Status::DeadlineExceeded(msg);  // statement timeout
  if (state == "40001" || state == "40P01" || state == "55P03") {
    return Status::Internal(msg, /*retryable=*/true);  // serialization, deadlock, lock
  }
  if (cls == "22" || cls == "23") return Status::InvalidArgument(msg);
  if (state == "42501" || cls == "28") return Status::PermissionDenied(msg + PrivilegeHint(what, msg));
  if (state == "25P02") return Status::FailedPrecondition(msg);
  if (state == "42P01" || state == "42883" || state == "3F000") {
    // The hint fits our own tables and functions, not a consumer handler's
    // statement (whose schema is the service's own).
    if (what.rfind("inbox handler", 0) == 0) return Status::FailedPrecondition(msg);
    return Status::FailedPrecondition(msg + " (has `outboxctl migrate` been run?)");
  }
  return Status::Internal(msg);
}

namespace {

// Cancel requests still waiting for the server (see SendCancel).
std::atomic<int> cancels_in_flight{0};
constexpr int kMaxCancelsInFlight = 16;

// Asks the server to cancel what `conn` is running (best effort: the answer,
// or its absence, shows in the results). PQcancel opens a connection of its
// own and waits for the server to close it, with no deadline of its own: on a
// path that stops forwarding without closing (a proxy, a load balancer, a NAT
// entry lost) it would block until the path heals, and its caller with it
// (issue 41: the relay hung, ready, for as long as the path was down). So it
// runs on a detached thread that owns the PGcancel (a copy of the address and
// key, independent of `conn`); the caller's grace deadline bounds the wait for
// its effect. At most kMaxCancelsInFlight wait at once; past that the caller
// only waits out its grace and drops the connection.
void SendCancel(PGconn* conn) {
  if (cancels_in_flight.load() >= kMaxCancelsInFlight) return;
  PGcancel* cancel = PQgetCancel(conn);
  if (cancel == nullptr) return;
  ++cancels_in_flight;
  std::thread([cancel] {
    char err[256];
    (void)PQcancel(cancel, err, sizeof err);
    PQfreeCancel(cancel);
    --cancels_in_flight;
  }).detach();
}

// Waits until a PQgetResult on `conn` would not block. Past the deadline it
// sends a cancel and allows kCancelGrace more; past that, Unavailable (the
// caller drops the connection). `timeout` 0: no deadline. `quiet` (a
// pipeline): the deadline counts from the last input, so that a long pipeline
// whose results keep coming is not cut, while a silent path is.
class Awaiter {
 public:
  static constexpr auto kCancelGrace = std::chrono::seconds(5);

  Awaiter(std::string_view what, std::chrono::milliseconds timeout, bool quiet = false)
      : what_(what), timeout_(timeout), quiet_(quiet), deadline_(Clock::now() + timeout) {}

  Status NotBusy(PGconn* conn) {
    while (PQisBusy(conn)) {
      int wait_ms = -1;
      if (timeout_.count() > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
        if (left.count() <= 0) {
          if (cancelled_) {
            return Status::Unavailable(std::string(what_) + ": no answer from PostgreSQL " +
                                       std::to_string(kCancelGrace.count()) +
                                       " s after cancelling a statement that ran past " +
                                       std::to_string(timeout_.count()) + " ms");
          }
          SendCancel(conn);
          cancelled_ = true;
          deadline_ = Clock::now() + kCancelGrace;
          continue;
        }
        wait_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 60'000));
      }
      pollfd p{PQsocket(conn), POLLIN, 0};
      const int r = ::poll(&p, 1, wait_ms);
      if (r < 0 && errno != EINTR) {
        return Status::Unavailable(std::string(what_) + ": poll: " + std::strerror(errno));
      }
      if (r > 0 && PQconsumeInput(conn) != 1) return StatusFromResult(conn, nullptr, what_);
      if (r > 0 && quiet_ && !cancelled_) deadline_ = Clock::now() + timeout_;
    }
    return Status::Ok();
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string_view what_;
  std::chrono::milliseconds timeout_;
  bool quiet_;
  Clock::time_point deadline_;
  bool cancelled_ = false;
};

bool Failed(const PGresult* r) {
  const ExecStatusType st = PQresultStatus(r);
  return st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR || st == PGRES_FATAL_ERROR;
}

}  // namespace

PipelineResult RunPipeline(PGconn* conn, std::string_view what,
                           std::span<const Statement> statements,
                           std::chrono::milliseconds timeout) {
  PipelineResult out;
  out.results.resize(statements.size());
  if (statements.empty()) return out;
  if (PQenterPipelineMode(conn) != 1) {
    out.status = Status::FailedPrecondition(std::string(what) + ": cannot enter pipeline mode: " +
                                            PQerrorMessage(conn));
    return out;
  }
  auto fail = [&](Status st, std::size_t i) {
    if (out.status.ok()) {
      out.status = std::move(st);
      out.failed = i;
    }
  };
  for (std::size_t i = 0; i < statements.size(); ++i) {
    const Statement& s = statements[i];
    std::vector<const char*> values(s.params.size());
    std::vector<int> lengths(s.params.size()), formats(s.params.size());
    for (std::size_t p = 0; p < s.params.size(); ++p) {
      values[p] = s.params[p].null ? nullptr : s.params[p].value.c_str();
      lengths[p] = static_cast<int>(s.params[p].value.size());
      formats[p] = s.params[p].binary ? 1 : 0;
    }
    if (PQsendQueryParams(conn, s.sql.c_str(), static_cast<int>(s.params.size()),
                          s.types.empty() ? nullptr : s.types.data(),
                          values.data(), lengths.data(), formats.data(), 0) != 1) {
      fail(StatusFromResult(conn, nullptr, std::string(what) + ": send"), i);
      break;
    }
  }
  if (PQpipelineSync(conn) != 1) {
    // Nothing will arrive; the connection is broken and the caller must roll back.
    fail(StatusFromResult(conn, nullptr, std::string(what) + ": sync"), 0);
    PQexitPipelineMode(conn);
    return out;
  }
  // Drain every result up to the sync point, whatever happened: each statement
  // gives one result, then a null.
  std::size_t k = 0;
  Awaiter awaiter(what, timeout, /*quiet=*/true);
  for (;;) {
    if (Status st = awaiter.NotBusy(conn); !st.ok()) {
      // The connection is still busy in pipeline mode: unusable, the caller's
      // next statement fails and drops it (Session::DropIfStuck).
      fail(std::move(st), k);
      return out;
    }
    ResultPtr res(PQgetResult(conn));
    if (!res) {
      if (PQstatus(conn) != CONNECTION_OK) {
        fail(StatusFromResult(conn, nullptr, what), k);
        break;
      }
      continue;  // end of one statement's results
    }
    const ExecStatusType st = PQresultStatus(res.get());
    if (st == PGRES_PIPELINE_SYNC) break;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      if (st == PGRES_PIPELINE_ABORTED) {
        fail(Status::Internal(std::string(what) + ": aborted by an earlier failure"), k);
      } else {
        fail(StatusFromResult(conn, res.get(), what), k);
      }
    }
    if (k < out.results.size()) out.results[k] = std::move(res);
    ++k;
  }
  PQexitPipelineMode(conn);
  return out;
}

Result<std::unique_ptr<Session>> Session::ConnectFor(const std::string& what,
                                                     const Options& options,
                                                     const std::string& schema) {
  OUTBOX_RETURN_IF_ERROR(ValidateSchemaName(schema));
  if (options.conninfo.empty()) {
    return Status::InvalidArgument(what + "conninfo is empty: set the PostgreSQL URL");
  }
  return Connect(options);
}

Status CheckResult(PGconn* conn, const PGresult* res, std::string_view what) {
  if (res != nullptr) {
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Status::Ok();
  }
  return StatusFromResult(conn, res, what);
}


Result<ResultPtr> AwaitResults(PGconn* conn, std::string_view what,
                               std::chrono::milliseconds timeout) {
  Awaiter awaiter(what, timeout);
  ResultPtr kept;
  for (;;) {
    OUTBOX_RETURN_IF_ERROR(awaiter.NotBusy(conn));
    ResultPtr res(PQgetResult(conn));
    if (!res) break;
    if (!kept || !Failed(kept.get())) kept = std::move(res);
  }
  if (!kept) return StatusFromResult(conn, nullptr, what);
  return kept;
}

Result<ResultPtr> ExecParams(PGconn* conn, std::string_view what, const std::string& sql,
                             const std::vector<Param>& params, const std::vector<Oid>& types,
                             int result_format, std::chrono::milliseconds timeout) {
  std::vector<const char*> values(params.size());
  std::vector<int> lengths(params.size());
  std::vector<int> formats(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    values[i] = params[i].null ? nullptr : params[i].value.c_str();
    lengths[i] = static_cast<int>(params[i].value.size());
    formats[i] = params[i].binary ? 1 : 0;
  }
  if (PQsendQueryParams(conn, sql.c_str(), static_cast<int>(params.size()),
                        types.empty() ? nullptr : types.data(), values.data(), lengths.data(),
                        formats.data(), result_format) != 1) {
    return StatusFromResult(conn, nullptr, what);
  }
  auto res = AwaitResults(conn, what, timeout);
  if (!res.ok()) return res.status();
  Status st = CheckResult(conn, res->get(), what);
  if (!st.ok()) return st;
  return res;
}

Result<ResultPtr> ExecSimple(PGconn* conn, std::string_view what, const std::string& sql,
                             std::chrono::milliseconds timeout) {
  if (PQsendQuery(conn, sql.c_str()) != 1) return StatusFromResult(conn, nullptr, what);
  auto res = AwaitResults(conn, what, timeout);
  if (!res.ok()) return res.status();
  Status st = CheckResult(conn, res->get(), what);
  if (!st.ok()) return st;
  return res;
}

Result<ConnPtr> Session::Open(const Options& options) {
  const std::string timeout = std::to_string(options.connect_timeout.count());
  // A half-open connection (peer gone without a FIN or RST: a failed-over host,
  // a dropped NAT entry) would block a call for the kernel's ~15 minutes. TCP
  // keepalives notice an idle dead peer within idle + interval * count = 25 s;
  // tcp_user_timeout ends a call whose sent data stays unacknowledged for 30 s.
  // Before dbname, so that the caller's conninfo can override them. Nothing
  // goes in the startup packet's `options` (PgBouncer refuses it), and the
  // name is a fallback: an application_name in the caller's URL wins. The
  // statement timeout is kept by the client (AwaitResults).
  std::vector<const char*> keys = {"keepalives",       "keepalives_idle", "keepalives_interval",
                                   "keepalives_count", "tcp_user_timeout", "dbname",
                                   "connect_timeout",  "fallback_application_name"};
  std::vector<const char*> vals = {"1",     "10", "5", "3", "30000", options.conninfo.c_str(),
                                   timeout.c_str(), options.application_name.c_str()};
  if (options.replication) {  // after dbname: the caller's conninfo cannot turn it off
    keys.push_back("replication");
    vals.push_back("database");
  }
  keys.push_back(nullptr);
  vals.push_back(nullptr);
  ConnPtr conn(PQconnectdbParams(keys.data(), vals.data(), /*expand_dbname=*/1));
  if (!conn) return Status::Unavailable("connect: out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    const std::string msg = "connect to PostgreSQL: " + TrimMessage(PQerrorMessage(conn.get()));
    if (RefusedConnection(msg)) {
      return Status::PermissionDenied(msg + " — the server refused this role: a configuration error, "
                                            "not an outage");
    }
    return Status::Unavailable(msg);
  }
  // libpq would print server notices (e.g. "FATAL: terminating connection") to
  // stderr outside our log format; connection loss surfaces as a Status anyway.
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);
  return conn;
}

Result<std::unique_ptr<Session>> Session::Connect(const Options& options) {
  auto conn = Open(options);
  if (!conn.ok()) return conn.status();
  return std::unique_ptr<Session>(new Session(options, std::move(conn).value()));
}

Status Session::EnsureConnected() {
  if (conn_ && PQstatus(conn_.get()) == CONNECTION_OK) return Status::Ok();
  // Open a fresh connection rather than PQreset, so that a connection whose
  // options changed (e.g. server restarted on the same port) starts clean.
  auto conn = Open(options_);
  if (!conn.ok()) return conn.status();
  conn_ = std::move(conn).value();
  ++generation_;
  return Status::Ok();
}

Result<ResultPtr> Session::Exec(std::string_view what, const std::string& sql,
                                const std::vector<Param>& params, const std::vector<Oid>& types,
                                int result_format) {
  OUTBOX_RETURN_IF_ERROR(EnsureConnected());
  auto res = ExecParams(conn_.get(), what, sql, params, types, result_format,
                        options_.statement_timeout);
  DropIfStuck(res.status());
  return res;
}

Status Session::ExecScript(std::string_view what, const std::string& sql) {
  OUTBOX_RETURN_IF_ERROR(EnsureConnected());
  Status st = ExecSimple(conn_.get(), what, sql, options_.statement_timeout).status();
  DropIfStuck(st);
  return st;
}

void Session::DropIfStuck(const Status& st) {
  // A connection still busy with a statement (no answer after the cancel) can
  // run nothing else; the next call opens a new one.
  if (!st.ok() && conn_ && PQisBusy(conn_.get())) conn_.reset();
}

std::int64_t GetInt64(const PGresult* res, int row, int col) {
  return std::strtoll(PQgetvalue(res, row, col), nullptr, 10);
}

std::string GetText(const PGresult* res, int row, int col) {
  return std::string(PQgetvalue(res, row, col),
                     static_cast<std::size_t>(PQgetlength(res, row, col)));
}

std::optional<std::string> GetOptionalText(const PGresult* res, int row, int col) {
  if (PQgetisnull(res, row, col)) return std::nullopt;
  return GetText(res, row, col);
}

std::string Int64ArrayLiteral(const std::vector<std::int64_t>& values) {
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(values[i]);
  }
  s += '}';
  return s;
}

std::string LsnText(std::uint64_t lsn) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(lsn >> 32),
                static_cast<unsigned>(lsn & 0xffffffffu));
  return buf;
}

Result<std::uint64_t> ParseLsn(std::string_view text) {
  const auto slash = text.find('/');
  auto hex = [](std::string_view h, std::uint64_t* out) {
    if (h.empty() || h.size() > 8) return false;
    std::uint64_t v = 0;
    for (char c : h) {
      int d = (c >= '0' && c <= '9') ? c - '0'
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                       : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<std::uint64_t>(d);
    }
    *out = v;
    return true;
  };
  std::uint64_t hi = 0, lo = 0;
  if (slash == std::string_view::npos || !hex(text.substr(0, slash), &hi) ||
      !hex(text.substr(slash + 1), &lo)) {
    return Status::InvalidArgument("not a WAL position (like 16/B374D848): " + std::string(text));
  }
  return (hi << 32) | lo;
}

namespace {

void AppendQuotedElement(std::string& s, std::string_view v) {
  s += '"';
  for (char c : v) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  s += '"';
}

}  // namespace

std::string TextArrayLiteral(std::span<const std::string> values) {
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    AppendQuotedElement(s, values[i]);
  }
  s += '}';
  return s;
}

std::string TextArrayLiteral(std::span<const std::optional<std::string>> values) {
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    if (values[i]) {
      AppendQuotedElement(s, *values[i]);
    } else {
      s += "NULL";
    }
  }
  s += '}';
  return s;
}

std::string ByteaArrayLiteral(std::span<const std::string_view> values) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    s += "\"\\\\x";  // "\\x: the array literal's escaped backslash, then bytea's hex marker
    for (char ch : values[i]) {
      const auto c = static_cast<unsigned char>(ch);
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
    s += '"';
  }
  s += '}';
  return s;
}

Result<bool> WaitForNotify(Session& session, const std::string& channel, PGconn** listening_on,
                           std::chrono::milliseconds timeout) {
  OUTBOX_RETURN_IF_ERROR(session.EnsureConnected());
  PGconn* c = session.raw();
  if (c != *listening_on) {  // first call, or a new connection after a loss
    OUTBOX_RETURN_IF_ERROR(session.ExecScript("listen", "LISTEN " + channel));
    *listening_on = c;
  }
  auto drain = [c] {
    bool any = false;
    while (PGnotify* n = PQnotifies(c)) {
      any = true;
      PQfreemem(n);
    }
    return any;
  };
  if (!PQconsumeInput(c)) return StatusFromResult(c, nullptr, "listen");
  if (drain()) return true;
  pollfd p{PQsocket(c), POLLIN, 0};
  const int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (r <= 0) return false;
  if (!PQconsumeInput(c)) return StatusFromResult(c, nullptr, "listen");
  return drain();
}

}  // namespace outbox::pg
