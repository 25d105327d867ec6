// store_drain: how fast the PostgreSQL store alone drains a pre-filled outbox
// through Claim + MarkSent (no broker), next to the database's own ceiling — a
// bare batched DELETE ... RETURNING from one connection. All methods run in the
// same process, interleaved run by run, so they see the same machine state.
//
//   store_drain [--db URL] [--rows 200000] [--batch 500] [--runs 3]
//               [--aggregates 1000] [--payload 200]
#include <functional>

#include "drain_common.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kSchema = "bench_store_drain";

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv,
          {{"db", DefaultDb()}, {"rows", "200000"}, {"batch", "500"}, {"runs", "3"},
           {"aggregates", "1000"}, {"payload", "200"}});
  const std::string url = f.Str("db");
  if (url.empty()) {
    std::fprintf(stderr, "store_drain: --db URL or OUTBOX_PG_URL required\n");
    return 2;
  }
  const int rows = f.Int("rows"), batch = f.Int("batch"), runs = f.Int("runs");
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kSchema);
  struct Method {
    std::string name;
    std::function<double()> run;
    std::vector<double> rates;
  };
  std::vector<Method> methods = {
      {"Claim (ordered) + MarkSent, sent_mode=update", [&] { return DrainStore(url, kSchema, SentMode::kUpdate, true, batch, rows); }, {}},
      {"Claim (ordered) + MarkSent, sent_mode=delete", [&] { return DrainStore(url, kSchema, SentMode::kDelete, true, batch, rows); }, {}},
      {"Claim (unordered) + MarkSent, sent_mode=delete", [&] { return DrainStore(url, kSchema, SentMode::kDelete, false, batch, rows); }, {}},
      {"ceiling: bare DELETE ... RETURNING (1 connection)", [&] { return DrainCeiling(admin, kSchema, batch, rows); }, {}},
  };
  for (int r = 0; r < runs; ++r) {
    for (auto& m : methods) {
      FillOutbox(admin, kSchema, rows, f.Int("aggregates"), f.Int("payload"));
      m.rates.push_back(m.run());
      std::fprintf(stderr, "run %d: %-52s %9.0f rows/s\n", r + 1, m.name.c_str(), m.rates.back());
    }
  }
  const double ceiling = Median(methods.back().rates);
  std::printf("| method | rows | batch | median rows/s | runs (rows/s) | / ceiling |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (auto& m : methods) {
    std::string all;
    for (double x : m.rates) {
      if (!all.empty()) all += ", ";
      all += std::to_string(static_cast<long>(x));
    }
    std::printf("| %s | %d | %d | %.0f | %s | %.2f |\n", m.name.c_str(), rows, batch,
                Median(m.rates), all.c_str(), Median(m.rates) / ceiling);
  }
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
