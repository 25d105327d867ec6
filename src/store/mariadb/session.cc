#include "session.h"

#include "outbox/mariadb.h"

#include <errmsg.h>
#include <mysqld_error.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace outbox::maria {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> PercentDecode(std::string_view s, std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) {
      return Status::InvalidArgument(std::string("database URL: bad %-escape in the ") +
                                     std::string(field));
    }
    const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(std::string("database URL: bad %-escape in the ") +
                                     std::string(field));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

Result<Url> ParseUrl(const std::string& text) {
  constexpr std::string_view kScheme = "mysql://";
  std::string_view s = text;
  if (s.substr(0, kScheme.size()) != kScheme) {
    return Status::InvalidArgument("database URL: a MariaDB/MySQL URL starts with mysql://");
  }
  s.remove_prefix(kScheme.size());
  if (auto q = s.find('?'); q != std::string_view::npos) {
    return Status::InvalidArgument("database URL: mysql:// URLs take no ?parameters yet");
  }
  Url url;
  const auto slash = s.find('/');
  if (slash == std::string_view::npos || slash + 1 >= s.size()) {
    return Status::InvalidArgument("database URL: the database name is missing (mysql://user@host:port/DATABASE)");
  }
  auto db = PercentDecode(s.substr(slash + 1), "database");
  if (!db.ok()) return db.status();
  url.database = *db;
  std::string_view authority = s.substr(0, slash);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const auto colon = cred.find(':');
    auto user = PercentDecode(cred.substr(0, colon), "user");
    if (!user.ok()) return user.status();
    url.user = *user;
    if (colon != std::string_view::npos) {
      auto pw = PercentDecode(cred.substr(colon + 1), "password");
      if (!pw.ok()) return pw.status();
      url.password = *pw;
    }
  }
  if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    std::string_view p = authority.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) {
      return Status::InvalidArgument("database URL: the port must be a number 1..65535");
    }
    url.port = port;
    authority = authority.substr(0, colon);
  }
  if (!authority.empty()) url.host = std::string(authority);
  if (url.user.empty()) return Status::InvalidArgument("database URL: the user is missing (mysql://USER@host/db)");
  for (char c : url.database) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$')) {
      return Status::InvalidArgument("database URL: the database name may only contain [A-Za-z0-9_$]");
    }
  }
  return url;
}

}  // namespace outbox::maria

namespace outbox {

bool IsMariaDbUrl(const std::string& url) { return url.rfind("mysql://", 0) == 0; }

Status ValidateMariaDbUrl(const std::string& url) { return maria::ParseUrl(url).status(); }

std::string RedactMariaDbUrl(const std::string& url) {
  auto u = maria::ParseUrl(url);
  if (!u.ok()) return "<not a valid mysql:// URL; not shown>";
  return "mysql://" + u->user + (u->password.empty() ? "" : ":***") + "@" + u->host + ":" +
         std::to_string(u->port) + "/" + u->database;
}

}  // namespace outbox

namespace outbox::maria {

Status LastError(MYSQL* conn, std::string_view what) {
  const unsigned err = mysql_errno(conn);
  std::string msg = std::string(what) + ": " + mysql_error(conn) + " (MariaDB error " +
                    std::to_string(err) + ", SQLSTATE " + mysql_sqlstate(conn) + ")";
  switch (err) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case ER_SERVER_SHUTDOWN:
    case ER_CON_COUNT_ERROR:
    case ER_CONNECTION_KILLED:
      return Status::Unavailable(msg);
    case ER_LOCK_DEADLOCK:
    case ER_LOCK_WAIT_TIMEOUT:
      return Status::Internal(msg, /*retryable=*/true);
    case ER_STATEMENT_TIMEOUT:
      return Status::DeadlineExceeded(msg);
    // The user lacks a privilege (MariaDB's message names it and the table)
    // or may not log in: a configuration error, not an outage.
    case ER_TABLEACCESS_DENIED_ERROR:
    case ER_COLUMNACCESS_DENIED_ERROR:
    case ER_PROCACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_ACCESS_DENIED_ERROR:
    case ER_SPECIFIC_ACCESS_DENIED_ERROR:
      return Status::PermissionDenied(msg + " — a missing privilege, not an outage (docs/relay.md, \"Privileges\")");
    case ER_NO_SUCH_TABLE:
    case ER_SP_DOES_NOT_EXIST:
      return Status::FailedPrecondition(msg + "; run `outboxctl migrate` first");
    case ER_SIGNAL_EXCEPTION:
    case ER_DATA_TOO_LONG:
    case ER_TRUNCATED_WRONG_VALUE:
    case ER_BAD_NULL_ERROR:
    case ER_DUP_ENTRY:
      return Status::InvalidArgument(msg);
    default:
      return Status::Internal(msg);
  }
}

Result<ConnPtr> Connect(const Url& url, std::chrono::seconds timeout, bool found_rows,
                        std::chrono::milliseconds statement_timeout) {
  ConnPtr c(mysql_init(nullptr));
  if (!c) return Status::Internal("mysql_init: out of memory");
  const unsigned t = static_cast<unsigned>(timeout.count());
  mysql_options(c.get(), MYSQL_OPT_CONNECT_TIMEOUT, &t);
  mysql_options(c.get(), MYSQL_SET_CHARSET_NAME, "utf8mb4");
  mysql_options(c.get(), MYSQL_INIT_COMMAND,
                "SET SESSION tx_isolation = 'READ-COMMITTED', time_zone = '+00:00'");
  if (!mysql_real_connect(c.get(), url.host.c_str(), url.user.c_str(),
                          url.password.empty() ? nullptr : url.password.c_str(),
                          url.database.c_str(), url.port, nullptr,
                          found_rows ? CLIENT_FOUND_ROWS : 0)) {
    Status st = LastError(c.get(), "connect to " + url.host + ":" + std::to_string(url.port));
    if (st.code() == Code::kInternal || st.code() == Code::kUnavailable) {
      return Status::Unavailable(st.message());
    }
    return st;
  }
  if (statement_timeout.count() > 0) {
    const long ms = static_cast<long>(statement_timeout.count());
    const std::string set = "SET SESSION max_statement_time = " + std::to_string(ms / 1000) + "." +
                            std::to_string(1000 + ms % 1000).substr(1) +
                            ", innodb_lock_wait_timeout = " + std::to_string(std::max(1L, ms / 1000));
    auto done = Exec(c.get(), "connect: session timeouts", set);
    if (!done.ok()) return done.status();
  }
  return c;
}

Result<Rows> Query(MYSQL* conn, std::string_view what, const std::string& sql) {
  if (mysql_real_query(conn, sql.data(), sql.size()) != 0) return LastError(conn, what);
  Rows rows;
  MYSQL_RES* res = mysql_store_result(conn);
  if (!res) {
    if (mysql_field_count(conn) != 0) return LastError(conn, what);
    return rows;
  }
  const unsigned n = mysql_num_fields(res);
  while (MYSQL_ROW r = mysql_fetch_row(res)) {
    unsigned long* len = mysql_fetch_lengths(res);
    Row row(n);
    for (unsigned i = 0; i < n; ++i) {
      if (r[i]) row[i] = std::string(r[i], len[i]);
    }
    rows.push_back(std::move(row));
  }
  mysql_free_result(res);
  return rows;
}

Result<std::uint64_t> Exec(MYSQL* conn, std::string_view what, const std::string& sql) {
  if (mysql_real_query(conn, sql.data(), sql.size()) != 0) return LastError(conn, what);
  if (MYSQL_RES* res = mysql_store_result(conn)) mysql_free_result(res);
  return static_cast<std::uint64_t>(mysql_affected_rows(conn));
}

std::string Quote(MYSQL* conn, std::string_view text) {
  std::string out(text.size() * 2 + 3, '\0');
  out[0] = '\'';
  const unsigned long n = mysql_real_escape_string(conn, out.data() + 1, text.data(), text.size());
  out.resize(n + 1);
  out += '\'';
  return out;
}

std::string QuoteOrNull(MYSQL* conn, const std::optional<std::string>& text) {
  return text ? Quote(conn, *text) : std::string("NULL");
}

std::string HexLiteral(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  if (bytes.empty()) return "''";
  std::string out = "X'";
  out.reserve(bytes.size() * 2 + 3);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  out += '\'';
  return out;
}

bool InTransaction(MYSQL* conn) {
  unsigned int status = 0;
  if (mariadb_get_infov(conn, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0) return false;
  return (status & SERVER_STATUS_IN_TRANS) != 0;
}

}  // namespace outbox::maria
