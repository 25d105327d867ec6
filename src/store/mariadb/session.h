// Session: one MariaDB/MySQL connection (libmariadb), URL parsing, escaping and
// server error -> Status classification. Internal to the MariaDB store.
//
// Thread-safety: not safe for concurrent use (one connection).
#ifndef OUTBOX_SRC_STORE_MARIADB_SESSION_H_
#define OUTBOX_SRC_STORE_MARIADB_SESSION_H_

#include <mysql.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/status.h"

namespace outbox::maria {

// mysql://user[:password]@host[:port]/database (user and password percent-decoded).
struct Url {
  std::string user, password, host = "127.0.0.1", database;
  unsigned port = 3306;
};
Result<Url> ParseUrl(const std::string& url);

struct ConnDeleter {
  void operator()(MYSQL* c) const { mysql_close(c); }
};
using ConnPtr = std::unique_ptr<MYSQL, ConnDeleter>;

// Connects (utf8mb4, READ COMMITTED, UTC session time zone, multi-statements
// off). A failed connection is Unavailable and names host and port, never the
// password. `found_rows`: affected-row counts report matched rows, as
// PostgreSQL's do (the store's sessions). `statement_timeout` > 0 bounds each
// statement and each lock wait of the session.
Result<ConnPtr> Connect(const Url& url, std::chrono::seconds timeout, bool found_rows = false,
                        std::chrono::milliseconds statement_timeout = std::chrono::milliseconds(0));

// Maps the connection's last error to a Status naming `what`.
Status LastError(MYSQL* conn, std::string_view what);

// A result set as strings; nullopt for SQL NULL.
using Row = std::vector<std::optional<std::string>>;
using Rows = std::vector<Row>;

// Runs one statement; its rows (empty for statements without a result).
Result<Rows> Query(MYSQL* conn, std::string_view what, const std::string& sql);
// Runs one statement; the affected row count.
Result<std::uint64_t> Exec(MYSQL* conn, std::string_view what, const std::string& sql);

// SQL literals: 'escaped text' (or NULL), X'hex' for bytes.
std::string Quote(MYSQL* conn, std::string_view text);
std::string QuoteOrNull(MYSQL* conn, const std::optional<std::string>& text);
std::string HexLiteral(std::string_view bytes);

// True when the connection is inside a transaction (server status flag; no round trip).
bool InTransaction(MYSQL* conn);

}  // namespace outbox::maria

#endif  // OUTBOX_SRC_STORE_MARIADB_SESSION_H_
