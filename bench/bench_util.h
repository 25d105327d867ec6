// Small helpers shared by the benchmark programs: flags, timing, medians, SQL.
#ifndef OUTBOX_BENCH_BENCH_UTIL_H_
#define OUTBOX_BENCH_BENCH_UTIL_H_

#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace outbox::bench {

// --key value flags with defaults; unknown flags are an error naming the flag.
class Flags {
 public:
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults)
      : values_(std::move(defaults)) {
    for (int i = 1; i < argc; ++i) {
      std::string k = argv[i];
      if (k.rfind("--", 0) != 0 || !values_.count(k.substr(2)) || i + 1 >= argc) {
        std::fprintf(stderr, "unknown flag or missing value: %s\nflags:", k.c_str());
        for (const auto& [name, def] : values_) std::fprintf(stderr, " --%s (%s)", name.c_str(), def.c_str());
        std::fprintf(stderr, "\n");
        std::exit(2);
      }
      values_[k.substr(2)] = argv[++i];
    }
  }
  std::string Str(const std::string& k) const { return values_.at(k); }
  int Int(const std::string& k) const { return std::atoi(values_.at(k).c_str()); }

 private:
  std::map<std::string, std::string> values_;
};

inline std::string DefaultDb() {
  const char* v = std::getenv("OUTBOX_PG_URL");
  return v ? v : "";
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Each run's figure, whole, joined by `sep` (the runs column of a table).
inline std::string JoinRates(const std::vector<double>& v, const char* sep = ", ") {
  std::string s;
  for (double x : v) {
    if (!s.empty()) s += sep;
    s += std::to_string(static_cast<long>(x));
  }
  return s;
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline PGconn* MustConnect(const std::string& url) {
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::fprintf(stderr, "connect %s: %s", url.c_str(), PQerrorMessage(c));
    std::exit(1);
  }
  PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
  return c;
}

// Runs SQL, exits on error; returns the number of rows returned or affected.
inline long MustExec(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::fprintf(stderr, "SQL failed: %s\n%s", sql.c_str(), PQresultErrorMessage(r));
    std::exit(1);
  }
  long n = st == PGRES_TUPLES_OK ? PQntuples(r) : std::atol(PQcmdTuples(r));
  PQclear(r);
  return n;
}

// The first column of the first row, or "" (errors included).
inline std::string Scalar(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  std::string v =
      PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  return v;
}

// Peak resident set (VmHWM) of a process, in KiB; -1 if unknown.
inline long PeakRssKb(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_BENCH_UTIL_H_
