// Plumbing shared by the README's two examples (producer.cc, consumer.cc): the environment,
// a libpq connection and one SQL call, with any failure ending the program. Kept here so
// that the README shows the outbox calls; example code, not part of outbox's API.
#ifndef OUTBOX_EXAMPLES_README_README_H_
#define OUTBOX_EXAMPLES_README_README_H_

#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace readme {

// The examples hold nothing that the process's exit does not release, so a failure
// simply ends them, non-zero.
[[noreturn]] inline void Die(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::exit(1);
}

// The test command sets OUTBOX_PG_URL and OUTBOX_KAFKA_BOOTSTRAP (scripts/testenv).
inline std::string Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') Die(std::string(name) + " is not set");
  return value;
}

using Conn = std::unique_ptr<PGconn, decltype(&PQfinish)>;

inline Conn Connect(const std::string& url) {
  Conn db(PQconnectdb(url.c_str()), &PQfinish);
  if (PQstatus(db.get()) != CONNECTION_OK) Die(PQerrorMessage(db.get()));
  return db;
}

// Runs `sql` and returns the first value of its result ("" when it has none).
inline std::string Exec(PGconn* db, const std::string& sql) {
  PGresult* r = PQexec(db, sql.c_str());
  const ExecStatusType status = PQresultStatus(r);
  const std::string first = PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    Die(sql + ": " + PQerrorMessage(db));
  }
  return first;
}

}  // namespace readme

#endif  // OUTBOX_EXAMPLES_README_README_H_
