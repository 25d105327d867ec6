// claim_race: the seed's measurement on PostgreSQL. N threads, each with its own
// connection, drain the same rows; every row handed to a worker counts as a
// claim. The atomic claim (Store::Claim: one UPDATE ... FOR UPDATE SKIP LOCKED
// with a lease) must hand each row out once; the naive find-then-update (SELECT
// the pending rows, then UPDATE them) hands rows out several times.
//
//   claim_race [--db URL] [--rows 300] [--threads 10] [--batch 10]
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "drain_common.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const char* kSchema = "bench_claim_race";

struct Tally {
  std::mutex mu;
  long claims = 0;
  std::set<long> unique;
  void Add(const std::vector<long>& seqs) {
    std::lock_guard<std::mutex> l(mu);
    claims += static_cast<long>(seqs.size());
    unique.insert(seqs.begin(), seqs.end());
  }
};

void Fill(PGconn* c, int rows) {
  MustExec(c, std::string("TRUNCATE ") + kSchema + ".outbox");
  // One aggregate per row, so ordering never holds a row back: the race is
  // about the claim alone, as in the seed.
  MustExec(c, std::string("INSERT INTO ") + kSchema +
                  ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "
                  "SELECT " + kSchema + ".uuid_v7(), 'race', 'agg-' || i, 'Raced', '\\x00' "
                  "FROM generate_series(1, " + std::to_string(rows) + ") i");
}

void RunAtomic(const std::string& url, int threads, int batch, Tally& tally) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      PostgresStoreOptions o;
      o.conninfo = url;
      o.schema = kSchema;
      auto store = OpenPostgresStore(o);
      if (!store.ok()) {
        std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
        std::exit(1);
      }
      ClaimOptions co;
      co.batch_size = batch;
      co.owner = "worker-" + std::to_string(t);
      for (;;) {
        auto c = (*store)->Claim(co);
        if (!c.ok()) {
          std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
          std::exit(1);
        }
        if (c->events.empty()) break;
        std::vector<long> seqs;
        std::vector<Ticket> tickets;
        for (const auto& e : c->events) {
          seqs.push_back(e.ticket.seq);
          tickets.push_back(e.ticket);
        }
        tally.Add(seqs);
        auto m = (*store)->MarkSent(tickets);
        if (!m.ok()) std::exit(1);
      }
    });
  }
  for (auto& t : ts) t.join();
}

void RunNaive(const std::string& url, int threads, int batch, Tally& tally) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      PGconn* c = MustConnect(url);
      const std::string select = std::string("SELECT seq FROM ") + kSchema +
                                 ".outbox WHERE status = 'PENDING' ORDER BY seq LIMIT " +
                                 std::to_string(batch);
      for (;;) {
        // find ...
        PGresult* r = PQexec(c, select.c_str());
        std::vector<long> seqs;
        for (int i = 0; i < PQntuples(r); ++i) seqs.push_back(std::atol(PQgetvalue(r, i, 0)));
        PQclear(r);
        if (seqs.empty()) break;
        tally.Add(seqs);
        // ... then update: nothing stops another worker from having found the same rows.
        std::string ids;
        for (long s : seqs) {
          if (!ids.empty()) ids += ',';
          ids += std::to_string(s);
        }
        MustExec(c, std::string("UPDATE ") + kSchema +
                        ".outbox SET status = 'SENT', sent_at = now() WHERE seq IN (" + ids + ")");
      }
      PQfinish(c);
    });
  }
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"rows", "300"}, {"threads", "10"}, {"batch", "10"}});
  const std::string url = f.Str("db");
  if (url.empty()) {
    std::fprintf(stderr, "claim_race: --db URL or OUTBOX_PG_URL required\n");
    return 2;
  }
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kSchema);
  const int rows = f.Int("rows"), threads = f.Int("threads"), batch = f.Int("batch");
  std::printf("| method | rows | workers | batch | claims | unique | duplicates |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const char* method : {"atomic claim (Store::Claim)", "naive SELECT then UPDATE"}) {
    Fill(admin, rows);
    Tally tally;
    if (method[0] == 'a') {
      RunAtomic(url, threads, batch, tally);
    } else {
      RunNaive(url, threads, batch, tally);
    }
    std::printf("| %s | %d | %d | %d | %ld | %zu | %ld |\n", method, rows, threads, batch,
                tally.claims, tally.unique.size(),
                tally.claims - static_cast<long>(tally.unique.size()));
  }
  MustExec(admin, std::string("DROP SCHEMA ") + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
