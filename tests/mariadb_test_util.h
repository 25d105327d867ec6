// Small helpers for tests that talk to the testenv's MariaDB directly
// (libmariadb): connect from its mysql://user@host:port/db URL, run a
// statement and read the first value.
#ifndef OUTBOX_TESTS_MARIADB_TEST_UTIL_H_
#define OUTBOX_TESTS_MARIADB_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <mysql.h>

#include <string>

namespace outbox::testing {

// The URL of database `db` on the server of `base` (mysql://user@host:port/x).
inline std::string MariaDbUrlFor(const std::string& base, const std::string& db) {
  return base.substr(0, base.rfind('/') + 1) + db;
}

// A connection to database `db` ("" for none) on the server of `base`, in UTC;
// null (and a test failure) when it cannot connect. The caller closes it.
inline MYSQL* OpenMariaDb(const std::string& base, const std::string& db) {
  std::string s = base.substr(std::string("mysql://").size());
  const std::string user = s.substr(0, s.find('@'));
  s = s.substr(s.find('@') + 1);
  const std::string host = s.substr(0, s.find(':'));
  const unsigned port = static_cast<unsigned>(std::stoi(s.substr(s.find(':') + 1)));
  MYSQL* c = mysql_init(nullptr);
  if (!mysql_real_connect(c, host.c_str(), user.c_str(), nullptr, db.empty() ? nullptr : db.c_str(),
                          port, nullptr, 0) ||
      mysql_query(c, "SET time_zone = '+00:00'") != 0) {
    ADD_FAILURE() << "mariadb: " << mysql_error(c);
    mysql_close(c);
    return nullptr;
  }
  return c;
}

// Runs `sql`; the first column of the first row ("" if none or NULL); fails the
// test on error.
inline std::string MyQuery(MYSQL* c, const std::string& sql) {
  std::string out;
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) {
    ADD_FAILURE() << sql << ": " << mysql_error(c);
    return out;
  }
  if (MYSQL_RES* r = mysql_store_result(c)) {
    if (MYSQL_ROW row = mysql_fetch_row(r); row && row[0]) out = row[0];
    mysql_free_result(r);
  }
  return out;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_MARIADB_TEST_UTIL_H_
