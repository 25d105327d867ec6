// Session: one libpq connection with reconnect, parameterised execution and
// SQLSTATE -> Status classification. Internal to the PostgreSQL store.
//
// Thread-safety: not safe for concurrent use (one libpq connection).
#ifndef OUTBOX_SRC_STORE_POSTGRES_SESSION_H_
#define OUTBOX_SRC_STORE_POSTGRES_SESSION_H_

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/status.h"

namespace outbox::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;

// A statement parameter: text, binary bytes, or SQL NULL.
struct Param {
  static Param Text(std::string v) { return Param{std::move(v), false, false}; }
  static Param Binary(std::string v) { return Param{std::move(v), true, false}; }
  static Param Null() { return Param{{}, false, true}; }
  std::string value;
  bool binary = false;
  bool null = false;
};

// Maps a failed result (or a broken connection) to a Status. `what` names the
// operation for the message ("claim", "mark sent", ...).
Status StatusFromResult(PGconn* conn, const PGresult* res, std::string_view what);

// Checks that `res` is a command or tuples result; otherwise the classified error.
Status CheckResult(PGconn* conn, const PGresult* res, std::string_view what);

// Runs one statement with parameters on `conn` (text results).
// result_format 1 asks for binary results (raw bytea; text columns unchanged).
// `timeout` > 0 bounds the statement from the client side (see AwaitResults).
Result<ResultPtr> ExecParams(PGconn* conn, std::string_view what, const std::string& sql,
                             const std::vector<Param>& params, const std::vector<Oid>& types = {},
                             int result_format = 0,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// Runs statements separated by ';' without parameters (the simple protocol);
// the first failed result, or the last one.
Result<ResultPtr> ExecSimple(PGconn* conn, std::string_view what, const std::string& sql,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// Reads every result of the query just sent on `conn` and returns the first
// failed one, or the last. Past `timeout` (> 0) it sends a cancel request and
// goes on reading: the statement ends with SQLSTATE 57014, as with the server's
// statement_timeout. The bound lives in the client, not in a session setting,
// so that nothing leaks into a server connection that PgBouncer hands to other
// clients. Unavailable when the server gives no answer 5 s after the cancel
// (which is sent from a thread of its own, so a path that black-holes cannot
// block the caller):
// the caller must drop the connection.
Result<ResultPtr> AwaitResults(PGconn* conn, std::string_view what,
                               std::chrono::milliseconds timeout);

// One statement of a pipeline.
struct Statement {
  std::string sql;
  std::vector<Param> params;
  std::vector<Oid> types;  // params.size() entries, or none (the server infers)
};

struct PipelineResult {
  std::vector<ResultPtr> results;  // one per statement (those after a failure: aborted)
  Status status;                   // the first failure, or OK
  std::size_t failed = 0;          // index of the first failed statement (when !status.ok())
};

// Sends `statements` in libpq pipeline mode (one round trip), then reads every
// result up to the sync point. REQUIRES: `conn` is idle (not in pipeline mode).
// Inside a transaction block, a failure aborts the rest (they are not run) and
// leaves the transaction failed; the caller rolls back (to a savepoint).
// `timeout` (> 0) bounds how long the server may stay silent (a path that
// black-holes): past it a cancel, past its grace Unavailable with the
// connection left busy (the caller drops it). A pipeline whose results keep
// coming is not cut; the server's statement_timeout bounds each statement.
PipelineResult RunPipeline(PGconn* conn, std::string_view what,
                           std::span<const Statement> statements,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

class Session {
 public:
  struct Options {
    std::string conninfo;
    std::chrono::seconds connect_timeout{5};
    std::chrono::milliseconds statement_timeout{30'000};
    std::string application_name = "outbox";
    // A logical replication connection (replication=database): simple queries
    // and replication commands only (START_REPLICATION, CREATE_REPLICATION_SLOT).
    bool replication = false;
  };

  // The connection alone, for callers that drive libpq themselves (the change
  // stream's COPY BOTH mode).
  static Result<ConnPtr> OpenConnection(const Options& options) { return Open(options); }

  static Result<std::unique_ptr<Session>> Connect(const Options& options);
  // Checks what every store checks first (the schema name; a conninfo is set),
  // then connects. `what` prefixes the errors ("inbox: ...").
  static Result<std::unique_ptr<Session>> ConnectFor(const std::string& what, const Options& options,
                                                     const std::string& schema);

  // Reconnects when the connection was lost. Unavailable if the server is not
  // reachable; the caller backs off and tries again.
  Status EnsureConnected();

  Result<ResultPtr> Exec(std::string_view what, const std::string& sql,
                         const std::vector<Param>& params = {},
                         const std::vector<Oid>& types = {}, int result_format = 0);

  // Runs several statements separated by ';' without parameters.
  Status ExecScript(std::string_view what, const std::string& sql);

  PGconn* raw() { return conn_.get(); }
  // Counts the connections this session opened: a session setting made on one
  // is gone after a reconnect.
  std::uint64_t generation() const { return generation_; }

 private:
  explicit Session(Options options, ConnPtr conn)
      : options_(std::move(options)), conn_(std::move(conn)) {}
  static Result<ConnPtr> Open(const Options& options);
  void DropIfStuck(const Status& st);

  Options options_;
  ConnPtr conn_;
  std::uint64_t generation_ = 1;
};

// Blocks up to `timeout` for a notification on `channel` (LISTENing first on a
// session's new connection: `*listening_on` remembers which connection has);
// true if one came. Used by the stores' WaitForWork.
Result<bool> WaitForNotify(Session& session, const std::string& channel, PGconn** listening_on,
                           std::chrono::milliseconds timeout);

// Helpers for reading text results.
std::int64_t GetInt64(const PGresult* res, int row, int col);
std::string GetText(const PGresult* res, int row, int col);
std::optional<std::string> GetOptionalText(const PGresult* res, int row, int col);

// "{1,2,3}" — a PostgreSQL array literal of integers.
std::string Int64ArrayLiteral(const std::vector<std::int64_t>& values);
// A WAL position as PostgreSQL writes it ("16/B374D848"), and back.
std::string LsnText(std::uint64_t lsn);
Result<std::uint64_t> ParseLsn(std::string_view text);
// A text[] literal; every element quoted and escaped.
std::string TextArrayLiteral(std::span<const std::string> values);
// The same with NULL for each element that has no value.
std::string TextArrayLiteral(std::span<const std::optional<std::string>> values);
// A bytea[] literal: each element in bytea's hex form ("\\x...").
std::string ByteaArrayLiteral(std::span<const std::string_view> values);

inline constexpr Oid kTextOid = 25;
inline constexpr Oid kByteaOid = 17;
inline constexpr Oid kJsonbOid = 3802;
inline constexpr Oid kInt4Oid = 23;
inline constexpr Oid kInt8Oid = 20;
inline constexpr Oid kBoolOid = 16;

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_SESSION_H_
