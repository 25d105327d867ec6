// Small helpers shared by the example programs (examples/*): flag parsing, a
// thin libpq wrapper, signal handling. Example code: kept short on purpose, not
// part of the library's API.
#ifndef OUTBOX_EXAMPLES_COMMON_EXAMPLE_H_
#define OUTBOX_EXAMPLES_COMMON_EXAMPLE_H_

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace example {


// --key value flags; unknown keys and missing values are usage errors (exit 2).
class Flags {
 public:
  Flags(int argc, char** argv, std::string program, std::map<std::string, std::string> defaults)
      : program_(std::move(program)), values_(std::move(defaults)) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") Usage("");
      if (a.rfind("--", 0) != 0 || !values_.count(a.substr(2))) Usage("unknown argument " + a);
      if (i + 1 >= argc) Usage(a + " needs a value");
      values_[a.substr(2)] = argv[++i];
    }
  }
  const std::string& Str(const std::string& k) const { return values_.at(k); }
  long Int(const std::string& k, long min = 0) const {
    const std::string& v = values_.at(k);
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < min) {
      Usage("--" + k + " must be an integer >= " + std::to_string(min) + ", got \"" + v + "\"");
    }
    return n;
  }
  std::string Required(const std::string& k) const {
    if (values_.at(k).empty()) Usage("--" + k + " is required");
    return values_.at(k);
  }
  [[noreturn]] void Usage(const std::string& error) const {
    if (!error.empty()) std::cerr << program_ << ": " << error << "\n";
    std::cerr << "usage: " << program_;
    for (const auto& [k, v] : values_) std::cerr << " [--" << k << " " << (v.empty() ? "VALUE" : v) << "]";
    std::cerr << "\n";
    std::exit(2);
  }

 private:
  std::string program_;
  std::map<std::string, std::string> values_;
};

struct PgDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
  void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, PgDeleter>;
using Res = std::unique_ptr<PGresult, PgDeleter>;

inline Conn Connect(const std::string& url) {
  Conn c(PQconnectdb(url.c_str()));
  if (PQstatus(c.get()) == CONNECTION_OK) {
    Res r(PQexec(c.get(), "SET TIME ZONE 'UTC'"));
  }
  return c;
}

// Runs `sql` with text parameters. Returns the result when it succeeded, null
// otherwise (the error text in *error and its SQLSTATE in *sqlstate when given).
inline Res Query(PGconn* c, const std::string& sql, const std::vector<std::string>& params = {},
                 std::string* error = nullptr, std::string* sqlstate = nullptr) {
  std::vector<const char*> v;
  for (const auto& p : params) v.push_back(p.c_str());
  Res r(PQexecParams(c, sql.c_str(), static_cast<int>(v.size()), nullptr, v.data(), nullptr,
                     nullptr, 0));
  const ExecStatusType st = PQresultStatus(r.get());
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  if (error) *error = PQresultErrorMessage(r.get());
  if (sqlstate) {
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    *sqlstate = state ? state : "";
  }
  return nullptr;
}

// First column of the first row, or `fallback`.
inline std::string Scalar(PGconn* c, const std::string& sql, const std::vector<std::string>& params = {},
                          const std::string& fallback = "") {
  Res r = Query(c, sql, params);
  if (!r || PQntuples(r.get()) == 0 || PQgetisnull(r.get(), 0, 0)) return fallback;
  return PQgetvalue(r.get(), 0, 0);
}

// Runs a script (several statements); false on error, with a message on stderr.
inline bool Script(PGconn* c, const std::string& sql, const char* what) {
  Res r(PQexec(c, sql.c_str()));
  if (PQresultStatus(r.get()) == PGRES_COMMAND_OK || PQresultStatus(r.get()) == PGRES_TUPLES_OK) return true;
  std::cerr << what << ": " << PQresultErrorMessage(r.get());
  return false;
}

// SIGTERM/SIGINT are blocked in every thread (construct this first, before any
// thread starts, librdkafka's included) and OnStop's callback runs on one thread
// that waits for them, so no work happens inside a signal handler.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&sigs_);
    sigaddset(&sigs_, SIGTERM);
    sigaddset(&sigs_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs_, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }
  void OnStop(std::function<void()> stop) const {
    std::thread([sigs = sigs_, stop = std::move(stop)] {
      int sig = 0;
      sigwait(&sigs, &sig);
      stop();
    }).detach();
  }

 private:
  sigset_t sigs_;
};

// Writes `content` to `path` atomically (readers never see half a file).
inline bool WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace example

#endif  // OUTBOX_EXAMPLES_COMMON_EXAMPLE_H_
