// Helpers shared by the integration tests: where the real PostgreSQL and the
// Kafka-protocol broker are (from scripts/testenv's DIR/env, exported by the test
// command), fresh schemas, and timeouts scaled by OUTBOX_TEST_TIMEOUT_FACTOR.
//
// A test that needs the database or the broker and cannot find it FAILS; it only
// skips when OUTBOX_ALLOW_SKIP=1 is set explicitly (never in CI).
#ifndef OUTBOX_TESTS_TEST_ENV_H_
#define OUTBOX_TESTS_TEST_ENV_H_

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>

// A test that arms fault points (OUTBOX_FAULTS) needs binaries built with them
// (OUTBOX_FAULT_POINTS=ON: the dev, asan and tsan presets): in a build without,
// it is skipped and says why.
#if defined(OUTBOX_FAULT_POINTS)
#define OUTBOX_REQUIRE_FAULT_POINTS() (void)0
#else
#define OUTBOX_REQUIRE_FAULT_POINTS() GTEST_SKIP() << "built without OUTBOX_FAULT_POINTS"
#endif

namespace outbox::testing {

inline std::string EnvOr(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

inline bool AllowSkip() { return EnvOr("OUTBOX_ALLOW_SKIP") == "1"; }

// Timeouts in tests are multiplied by this (sanitizer builds and loaded CI hosts
// are slower); the default is 1.
inline std::chrono::milliseconds Scaled(std::chrono::milliseconds base) {
  double f = std::atof(EnvOr("OUTBOX_TEST_TIMEOUT_FACTOR", "1").c_str());
  if (f < 1) f = 1;
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(base.count()) * f));
}

// Polls `pred` every 50 ms until it holds or the (scaled) timeout passes; returns
// its last value. For waiting on real processes and databases, never for timing.
inline bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + Scaled(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// The port a daemon's HTTP server bound, read from its log ("http listening
// address=127.0.0.1:PORT"), waiting up to the (scaled) timeout; 0, and a test
// failure naming the log, when it never appears.
inline int LoggedHttpPort(const std::function<std::string()>& log,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::string marker = "http listening address=127.0.0.1:";
  int port = 0;
  WaitFor([&] {
    const std::string text = log();
    const auto at = text.find(marker);
    if (at != std::string::npos) port = std::atoi(text.c_str() + at + marker.size());
    return port > 0;
  }, timeout);
  if (port <= 0) ADD_FAILURE() << "no HTTP address in the log:\n" << log();
  return port;
}

// Use as: `std::string url; OUTBOX_REQUIRE_ENV(url, "OUTBOX_PG_URL");`
#define OUTBOX_REQUIRE_ENV(var, name)                                                   \
  do {                                                                                  \
    var = ::outbox::testing::EnvOr(name);                                               \
    if (var.empty()) {                                                                  \
      if (::outbox::testing::AllowSkip()) GTEST_SKIP() << name " not set";              \
      FAIL() << name " is not set: run the tests through scripts/test (which starts "   \
                "scripts/testenv), or source DIR/env of a running testenv";             \
    }                                                                                   \
  } while (0)

// The shell command that restarts the test environment's PostgreSQL (fast
// shutdown, waits up to 60 s), as the `postgres` user when we run as root.
// `bin` and `data` come from OUTBOX_PG_BIN and OUTBOX_PG_DATA (scripts/testenv).
inline std::string PostgresRestartCommand(const std::string& bin, const std::string& data) {
  const std::string as_pg = geteuid() == 0 ? "runuser -u postgres -- " : "";
  return as_pg + bin + "/pg_ctl -D " + data + " -m fast -w -t 60 restart >/dev/null";
}

// DROP SCHEMA ... CASCADE, retried on a deadlock: a killed relay's last
// statement may still run on the server and take its locks in the other order.
inline void DropSchemaRetrying(PGconn* c, const std::string& schema) {
  const std::string sql = "DROP SCHEMA IF EXISTS " + schema + " CASCADE";
  for (int attempt = 1;; ++attempt) {
    PGresult* r = PQexec(c, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    const std::string error = ok ? "" : PQresultErrorMessage(r);
    PQclear(r);
    if (ok) return;
    if (error.find("deadlock") == std::string::npos || attempt == 5) {
      ADD_FAILURE() << "statement failed: " << sql << "\n" << error;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// A shell command's exit code and its stdout+stderr.
struct CommandRun {
  int code = -1;
  std::string out;
};

inline CommandRun RunCommand(const std::string& command) {
  CommandRun r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (int i = 0; i < 10; ++i) s += kAlphabet[rng() % 36];
  return s;
}

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;

inline PgConn Connect(const std::string& url) {
  PgConn c(PQconnectdb(url.c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK) {
    ADD_FAILURE() << "cannot connect to " << url << ": " << PQerrorMessage(c.get());
  }
  return c;
}

// Runs a statement; returns the first column of the first row ("" if none).
// Fails the test on error unless `expect_error`.
inline std::string Exec(PGconn* c, const std::string& sql, bool expect_error = false,
                        std::string* error = nullptr) {
  PGresult* r = PQexec(c, sql.c_str());
  ExecStatusType st = PQresultStatus(r);
  bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
  std::string out;
  if (ok && st == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0) {
    out = PQgetvalue(r, 0, 0);
  }
  if (!ok && error) *error = PQresultErrorMessage(r);
  if (ok == expect_error) {
    ADD_FAILURE() << (expect_error ? "expected an error from: " : "statement failed: ") << sql
                  << "\n" << PQresultErrorMessage(r);
  }
  PQclear(r);
  return out;
}

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_TEST_ENV_H_
