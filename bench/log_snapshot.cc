// log_snapshot: issue 42's measurements under a held snapshot and of purge,
// today's store beside the log prototype (bench/log_drain.cc), in one run.
//
// Held snapshot: producers enqueue --rate events/s (each its own transaction,
// 4 sessions, paced) for --seconds while one drainer session hands them over
// (the moment a relay would give them to its producer); the payload carries
// the producer's clock, so the latency is enqueue -> hand-over. Each store
// runs twice: without, then with a REPEATABLE READ transaction holding its
// snapshot for the whole run (a report, a pg_dump, a stuck session). Row
// writes per event are the schema's n_tup_upd + n_tup_del after the inserts,
// per event.
//   today  enqueue(), then Claim (ordered, 500) + MarkSent, one session
//   log    enqueue_log() (enqueue()'s checks and lock, one INSERT into the
//          log), then the prototype's range read + one position UPDATE per
//          page, one session
// Both drainers idle as the relay's poller does (2 ms, doubling to 20 ms,
// back to 2 ms on work).
//
// Purge: --purge-rows events written and delivered, then purged: today's
// store by PurgeSent (retention 0, batches of 1,000: outboxctl purge), the
// log by rotating the current partition away and truncating the delivered
// one. The schema's size (pg_total_relation_size of its tables) is sampled 5 s
// after the purge starts, against its peak.
//
//   log_snapshot --db URL [--rate 3000] [--seconds 40] [--slots 16] [--purge-rows 200000]
#include <atomic>
#include <map>
#include <thread>

#include "drain_common.h"

namespace {

using namespace outbox;
using namespace outbox::bench;
using Clock = std::chrono::steady_clock;

const std::string kToday = "bench_snap_today";
const std::string kLog = "bench_snap_log";
const std::string kStoreSnap = "bench_snap_store";  // --store 1: the built log store's schema

std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The log prototype: as log_drain's, with the payload holding the enqueue
// time, in two partitions (tables log_0 and log_1; `current` says which one
// enqueue_log writes) so that purge can be a rotation.
void MakeLog(PGconn* c, int slots) {
  const std::string s = kLog;
  MustExec(c, "DROP SCHEMA IF EXISTS " + s + " CASCADE");
  MustExec(c, "CREATE SCHEMA " + s);
  MustExec(c, "CREATE SEQUENCE " + s + ".pos_seq");
  for (const char* part : {"log_0", "log_1"}) {
    MustExec(c, "CREATE TABLE " + s + "." + part + " (pos bigint NOT NULL DEFAULT nextval('" + s +
                    ".pos_seq'), txid xid8 NOT NULL DEFAULT pg_current_xact_id(), slot smallint NOT NULL, "
                    "event_id uuid NOT NULL, aggregate_type text NOT NULL, aggregate_id text NOT NULL, "
                    "event_type text NOT NULL, payload bytea NOT NULL, headers jsonb NOT NULL, "
                    "created_at timestamptz NOT NULL DEFAULT now())");
    MustExec(c, "CREATE INDEX ON " + s + "." + part + " (slot, txid, pos)");
  }
  MustExec(c, "CREATE TABLE " + s + ".current (part int NOT NULL)");
  MustExec(c, "INSERT INTO " + s + ".current VALUES (0)");
  MustExec(c, "CREATE TABLE " + s + ".slot (slot int PRIMARY KEY, token bigint NOT NULL, lo pg_snapshot NOT NULL, "
                  "hi pg_snapshot, done_pos bigint NOT NULL DEFAULT 0) WITH (fillfactor = 20)");
  MustExec(c, "INSERT INTO " + s + ".slot (slot, token, lo) SELECT g, 1, pg_current_snapshot() FROM "
                  "generate_series(0, " + std::to_string(slots - 1) + ") g");
  // The position of a group of slots (all of them here: one drainer owns
  // them): one row, written once per round that handed events over.
  MustExec(c, "CREATE TABLE " + s + ".grp (id int PRIMARY KEY, token bigint NOT NULL, lo pg_snapshot NOT NULL, "
                  "hi pg_snapshot, done_pos bigint NOT NULL DEFAULT 0) WITH (fillfactor = 20)");
  MustExec(c, "INSERT INTO " + s + ".grp (id, token, lo) VALUES (0, 1, pg_current_snapshot())");
  // enqueue()'s checks and lock (today's functions), one INSERT into the log.
  MustExec(c, "CREATE FUNCTION " + s + ".enqueue_log(aggregate_type text, aggregate_id text, event_type text, "
                  "payload bytea, headers jsonb) RETURNS uuid LANGUAGE plpgsql VOLATILE AS $fn$ "
                  "DECLARE v_id uuid := " + kToday + ".uuid_v7(); h int; BEGIN "
                  "IF NOT coalesce(" + kToday + ".enqueue_ok(aggregate_type, aggregate_id, event_type, payload, "
                  "headers, NULL), false) THEN PERFORM " + kToday + ".enqueue_refuse(aggregate_type, aggregate_id, "
                  "event_type, payload, headers, NULL); END IF; "
                  "h := hashtext(aggregate_type || E'\\x1f' || aggregate_id); "
                  "PERFORM pg_advisory_xact_lock(hashtext('" + s + "'), h); "
                  "IF (SELECT part FROM " + s + ".current) = 0 THEN "
                  "INSERT INTO " + s + ".log_0 (slot, event_id, aggregate_type, aggregate_id, event_type, payload, "
                  "headers) VALUES ((h & 2147483647) % " + std::to_string(slots) + ", v_id, aggregate_type, "
                  "aggregate_id, event_type, payload, headers); ELSE "
                  "INSERT INTO " + s + ".log_1 (slot, event_id, aggregate_type, aggregate_id, event_type, payload, "
                  "headers) VALUES ((h & 2147483647) % " + std::to_string(slots) + ", v_id, aggregate_type, "
                  "aggregate_id, event_type, payload, headers); END IF; RETURN v_id; END $fn$");
  MustExec(c, "CREATE VIEW " + s + ".log AS SELECT * FROM " + s + ".log_0 UNION ALL SELECT * FROM " + s + ".log_1");
}

std::int64_t RowWrites(PGconn* c, const std::string& schema) {
  const std::string v = Scalar(c, "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables "
                                  "WHERE schemaname = '" + schema + "'");
  return std::atoll(v.c_str());
}

std::int64_t SchemaBytes(PGconn* c, const std::string& schema) {
  return std::atoll(Scalar(c, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '" + schema +
                              "' AND c.relkind = 'r'").c_str());
}

// Hands over events until `stop`, and then, once the producers are `done`
// (their last enqueue counted in `produced`: one may still be committing when
// `stop` is set), until `produced` were handed over (or 20 s after `stop`);
// pushes each event's enqueue -> hand-over latency (ms).
// `round` returns the payloads (enqueue times, µs) of what it handed over.
// `tick`: a round that handed events over is followed by the next no sooner
// than `tick` after it started (fewer, larger rounds: fewer position writes).
void Drain(const std::function<std::vector<std::int64_t>()>& round, const std::atomic<bool>& stop,
           const std::atomic<bool>& done, const std::atomic<long>& produced, std::vector<double>* latencies,
           std::chrono::milliseconds tick) {
  std::chrono::milliseconds idle{2};
  long handed = 0;
  Clock::time_point stopped_at{};
  for (;;) {
    if (stop && stopped_at == Clock::time_point{}) stopped_at = Clock::now();
    if (stop && ((done && handed >= produced) || Clock::now() - stopped_at > std::chrono::seconds(20))) break;
    const auto started = Clock::now();
    const std::vector<std::int64_t> sent_at = round();
    const std::int64_t now = NowUs();
    for (std::int64_t t : sent_at) latencies->push_back(static_cast<double>(now - t) / 1000.0);
    handed += static_cast<long>(sent_at.size());
    if (sent_at.empty()) {
      std::this_thread::sleep_for(idle);
      idle = std::min(idle * 2, std::chrono::milliseconds(20));
    } else {
      idle = std::chrono::milliseconds(2);
      std::this_thread::sleep_until(started + tick);
    }
  }
}

// Where a Store round's time goes (--store 1): each round's Claim and
// MarkSent durations (ms) and its events, reset by RunLoad.
struct RoundTimes {
  std::vector<double> claim_ms, mark_ms;
  long rounds = 0, empty = 0, events = 0;
};
RoundTimes g_rounds;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Outcome {
  double p50 = 0, p99 = 0, max = 0;
  long events = 0;
  double rate = 0;  // events/s the producers reached
  double writes_per_event = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// One run: producers at `rate` for `seconds`, the drainer, and (hold) a
// snapshot held throughout.
Outcome RunLoad(const std::string& url, const std::string& schema, const std::string& enqueue_sql, int rate,
                int seconds, bool hold, const std::function<std::vector<std::int64_t>(PGconn*)>& round,
                std::chrono::milliseconds tick = std::chrono::milliseconds(0)) {
  PGconn* admin = MustConnect(url);
  PGconn* holder = nullptr;
  if (hold) {
    holder = MustConnect(url);
    MustExec(holder, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    MustExec(holder, "SELECT count(*) FROM pg_class");
  }
  const std::int64_t writes_before = RowWrites(admin, schema);
  g_rounds = RoundTimes();
  std::atomic<bool> stop{false}, done{false};
  std::atomic<long> produced{0};
  std::vector<std::thread> producers;
  constexpr int kProducers = 4;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      PGconn* c = MustConnect(url);
      const auto period = std::chrono::nanoseconds(1'000'000'000LL * kProducers / rate);
      auto next = Clock::now() + period * p / kProducers;
      for (long i = 0; !stop; ++i) {
        std::this_thread::sleep_until(next);
        next += period;
        const std::string agg = "agg-" + std::to_string((i * kProducers + p) % 1000);
        const std::string at = std::to_string(NowUs());
        const char* v[2] = {agg.c_str(), at.c_str()};
        PGresult* r = PQexecParams(c, enqueue_sql.c_str(), 2, nullptr, v, nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
          std::fprintf(stderr, "enqueue: %s", PQresultErrorMessage(r));
          std::exit(1);
        }
        PQclear(r);
        ++produced;
      }
      PQfinish(c);
    });
  }
  std::vector<double> latencies;
  std::thread drainer([&] {
    PGconn* c = MustConnect(url);
    Drain([&] { return round(c); }, stop, done, produced, &latencies, tick);
    PQfinish(c);
  });
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : producers) t.join();
  done = true;
  drainer.join();
  if (holder != nullptr) {
    MustExec(holder, "COMMIT");
    PQfinish(holder);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the sessions' statistics flushed
  Outcome o;
  o.events = static_cast<long>(latencies.size());
  if (o.events != produced) {
    std::fprintf(stderr, "%s: %ld of %ld events handed over\n", schema.c_str(), o.events, produced.load());
    std::exit(1);
  }
  o.rate = static_cast<double>(o.events) / seconds;
  o.p50 = Percentile(latencies, 0.50);
  o.p99 = Percentile(latencies, 0.99);
  o.max = Percentile(latencies, 1.0);
  o.writes_per_event = static_cast<double>(RowWrites(admin, schema) - writes_before) / static_cast<double>(o.events);
  PQfinish(admin);
  return o;
}

// Today's drainer round: one claim, its payloads, MarkSent.
std::vector<std::int64_t> TodayRound(Store& store) {
  ClaimOptions co;
  co.batch_size = 500;
  co.owner = "bench";
  const auto t0 = Clock::now();
  auto claim = store.Claim(co);
  g_rounds.claim_ms.push_back(MsSince(t0));
  if (!claim.ok()) {
    std::fprintf(stderr, "claim: %s\n", claim.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<std::int64_t> out;
  std::vector<Ticket> t;
  for (const auto& e : claim->events) {
    out.push_back(std::atoll(e.event.payload.c_str()));
    t.push_back(e.ticket);
  }
  ++g_rounds.rounds;
  g_rounds.events += static_cast<long>(t.size());
  if (t.empty()) {
    ++g_rounds.empty;
    return out;
  }
  const auto t1 = Clock::now();
  if (!store.MarkSent(t).ok()) std::exit(1);
  g_rounds.mark_ms.push_back(MsSince(t1));
  return out;
}

// The log's drainer round: the range's next page, or, when it is done, the
// next range (lo := hi, hi := now) and its first page; one position UPDATE.
std::vector<std::int64_t> LogRound(PGconn* c) {
  const std::string s = kLog;
  const std::string in_range =
      "l.slot = s.slot AND pg_visible_in_snapshot(l.txid, s.hi) AND NOT pg_visible_in_snapshot(l.txid, s.lo) "
      "AND ((l.txid >= pg_snapshot_xmax(s.lo) AND l.txid < pg_snapshot_xmax(s.hi)) "
      "OR l.txid = ANY(ARRAY(SELECT pg_snapshot_xip(s.lo)))) AND l.pos > s.done_pos";
  const std::string page = "SELECT convert_from(l.payload, 'UTF8'), l.slot, l.pos FROM " + s + ".slot s JOIN " + s +
                           ".log l ON " + in_range + " WHERE s.token = 1 AND s.hi IS NOT NULL ORDER BY l.pos LIMIT 500";
  auto read = [&] {
    PGresult* r = PQexec(c, page.c_str());
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
      std::fprintf(stderr, "log page: %s", PQresultErrorMessage(r));
      std::exit(1);
    }
    return r;
  };
  PGresult* r = read();
  if (PQntuples(r) == 0) {
    PQclear(r);
    MustExec(c, "UPDATE " + s + ".slot SET lo = coalesce(hi, lo), hi = pg_current_snapshot(), done_pos = 0 "
                "WHERE token = 1");
    r = read();
  }
  std::vector<std::int64_t> out;
  std::map<int, std::string> last;
  for (int i = 0; i < PQntuples(r); ++i) {
    out.push_back(std::atoll(PQgetvalue(r, i, 0)));
    last[std::atoi(PQgetvalue(r, i, 1))] = PQgetvalue(r, i, 2);
  }
  PQclear(r);
  if (!last.empty()) {
    std::vector<std::string> slots, pos;
    for (const auto& [sl, p] : last) {
      slots.push_back(std::to_string(sl));
      pos.push_back(p);
    }
    auto array = [](const std::vector<std::string>& v) {
      std::string a;
      for (const std::string& x : v) a.append(a.empty() ? "" : ",").append(x);
      return "'{" + a + "}'";
    };
    MustExec(c, "UPDATE " + s + ".slot s SET done_pos = v.pos FROM unnest(" + array(slots) + "::int[], " +
                    array(pos) + "::bigint[]) v(slot, pos) WHERE s.slot = v.slot AND s.token = 1");
  }
  return out;
}

// The log's drainer round with one position row for the group of slots: the
// next page of a range in progress (hi set), or else the events visible now
// and not in lo (the statement's own snapshot, returned with the rows); one
// UPDATE when it handed events over, none otherwise.
std::vector<std::int64_t> LogGroupRound(PGconn* c, int slots) {
  const std::string s = kLog;
  std::string all;
  for (int i = 0; i < slots; ++i) all.append(all.empty() ? "" : ",").append(std::to_string(i));
  const std::string page =
      "WITH g AS (SELECT lo, hi, done_pos, coalesce(hi, pg_current_snapshot()) AS upto FROM " + s +
      ".grp WHERE id = 0 AND token = 1) "
      "SELECT convert_from(l.payload, 'UTF8'), l.pos, g.upto::text, g.hi IS NULL FROM g JOIN " + s + ".log l ON "
      "l.slot = ANY('{" + all + "}'::int[]) AND pg_visible_in_snapshot(l.txid, g.upto) "
      "AND NOT pg_visible_in_snapshot(l.txid, g.lo) AND ((l.txid >= pg_snapshot_xmax(g.lo) "
      "AND l.txid < pg_snapshot_xmax(g.upto)) OR l.txid = ANY(ARRAY(SELECT pg_snapshot_xip(g.lo)))) "
      "AND l.pos > g.done_pos ORDER BY l.pos LIMIT 501";
  PGresult* r = PQexec(c, page.c_str());
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    std::fprintf(stderr, "log group page: %s", PQresultErrorMessage(r));
    std::exit(1);
  }
  const int n = std::min(PQntuples(r), 500);
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(std::atoll(PQgetvalue(r, i, 0)));
  if (n > 0) {
    const bool fresh = PQgetvalue(r, 0, 3)[0] == 't';
    const bool more = PQntuples(r) > 500;
    const std::string upto = PQgetvalue(r, 0, 2), last = PQgetvalue(r, n - 1, 1);
    const std::string set = fresh ? (more ? "hi = '" + upto + "', done_pos = " + last : "lo = '" + upto + "'")
                                  : (more ? "done_pos = " + last : "lo = hi, hi = NULL, done_pos = 0");
    MustExec(c, "UPDATE " + s + ".grp SET " + set + " WHERE id = 0 AND token = 1");
  }
  PQclear(r);
  return out;
}

// The last run's rounds (to stderr: the table on stdout stays a table).
void PrintRounds(int seconds) {
  const RoundTimes& r = g_rounds;
  std::fprintf(stderr,
               "  rounds %ld (%.0f/s, %ld empty), %.1f events a round with events; claim p50/p99/max "
               "%.2f/%.2f/%.1f ms, mark p50/p99/max %.2f/%.2f/%.1f ms\n",
               r.rounds, static_cast<double>(r.rounds) / seconds, r.empty,
               r.rounds > r.empty ? static_cast<double>(r.events) / static_cast<double>(r.rounds - r.empty) : 0.0,
               Percentile(r.claim_ms, 0.5), Percentile(r.claim_ms, 0.99), Percentile(r.claim_ms, 1.0),
               Percentile(r.mark_ms, 0.5), Percentile(r.mark_ms, 0.99), Percentile(r.mark_ms, 1.0));
}

struct PurgeOutcome {
  double peak_mb = 0, after_mb = 0, took_s = 0;
};

// Samples the schema's size 5 s after `purge` starts (it runs on its own thread).
PurgeOutcome MeasurePurge(PGconn* admin, const std::string& schema, const std::function<void()>& purge) {
  PurgeOutcome o;
  o.peak_mb = static_cast<double>(SchemaBytes(admin, schema)) / 1e6;
  const auto t0 = Clock::now();
  std::atomic<bool> done{false};
  std::thread t([&] {
    purge();
    o.took_s = SecondsSince(t0);
    done = true;
  });
  std::this_thread::sleep_until(t0 + std::chrono::seconds(5));
  o.after_mb = static_cast<double>(SchemaBytes(admin, schema)) / 1e6;
  t.join();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"rate", "3000"}, {"seconds", "40"}, {"slots", "16"},
                       {"purge-rows", "200000"}, {"store", "0"}});
  const std::string url = f.Str("db");
  const int rate = f.Int("rate"), seconds = f.Int("seconds"), slots = f.Int("slots"), purge_rows = f.Int("purge-rows");
  if (url.empty() || rate <= 0 || seconds <= 0 || slots <= 0 || purge_rows <= 0) {
    std::fprintf(stderr, "log_snapshot: --db URL (or OUTBOX_PG_URL) required; --rate, --seconds, --slots and "
                         "--purge-rows positive\n");
    return 2;
  }
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kToday);
  PostgresStoreOptions so;
  so.conninfo = url;
  so.schema = kToday;
  auto store = OpenPostgresStore(so);
  if (!store.ok()) return 1;
  const std::string today_sql = "SELECT event_id::text FROM " + kToday +
                                ".enqueue('bench', $1, 'BenchEvent', convert_to($2, 'UTF8'), '{}'::jsonb)";
  const std::string log_sql = "SELECT " + kLog + ".enqueue_log('bench', $1, 'BenchEvent', convert_to($2, 'UTF8'), "
                              "'{}'::jsonb)::text";
  std::printf("| store | snapshot held | events (per s) | p50 ms | p99 ms | max ms | row writes per event after the insert |\n"
              "|---|---|---|---|---|---|---|\n");
  auto row = [](const char* name, bool hold, const Outcome& o) {
    std::printf("| %s | %s | %ld (%.0f) | %.2f | %.2f | %.1f | %.3f |\n", name, hold ? "yes" : "no", o.events, o.rate,
                o.p50, o.p99, o.max, o.writes_per_event);
    std::fflush(stdout);
  };
  if (f.Int("store") == 1) {
    // The built log store (issue 42, step 4) through its Store interface, as a
    // relay worker drives it, beside today's store; no purge part (rotation is
    // LogStoreTest's).
    const std::string store_sql = "SELECT event_id::text FROM " + kStoreSnap +
                                  ".enqueue('bench', $1, 'BenchEvent', convert_to($2, 'UTF8'), '{}'::jsonb)";
    for (bool hold : {false, true}) {
      MustExec(admin, "TRUNCATE " + kToday + ".outbox");
      MustExec(admin, "VACUUM " + kToday + ".outbox");
      Outcome t = RunLoad(url, kToday, today_sql, rate, seconds, hold, [&](PGconn*) { return TodayRound(**store); });
      row("today: enqueue(), Claim + MarkSent", hold, t);
      PrintRounds(seconds);
      // {rounds at most every tick ms, positions written at most every `every` ms}
      const std::pair<int, int> runs[] = {{0, 0}, {0, 10}, {10, 0}};
      for (auto [tick, every] : runs) {
        FillLog(admin, url, kStoreSnap, 10, 10, 10, 10);  // a fresh log schema (its 10 events drained first)
        PostgresStoreOptions lo;
        lo.conninfo = url;
        lo.schema = kStoreSnap;
        lo.log_position_every = std::chrono::milliseconds(every);
        auto log_store = OpenPostgresStore(lo);
        if (!log_store.ok()) return 1;
        while (!TodayRound(**log_store).empty()) {
        }
        Outcome l = RunLoad(url, kStoreSnap, store_sql, rate, seconds, hold,
                            [&](PGconn*) { return TodayRound(**log_store); }, std::chrono::milliseconds(tick));
        row(tick != 0    ? "log store (built): rounds at most every 10 ms, every page end writes"
            : every == 0 ? "log store (built): enqueue(), Claim + MarkSent, every page end writes"
                         : "log store (built): the same, positions written at most every 10 ms (the default)",
            hold, l);
        PrintRounds(seconds);
      }
    }
    MustExec(admin, "DROP SCHEMA IF EXISTS " + kStoreSnap + " CASCADE");
    MustExec(admin, "DROP SCHEMA " + kToday + " CASCADE");
    PQfinish(admin);
    return 0;
  }
  for (bool hold : {false, true}) {
    MustExec(admin, "TRUNCATE " + kToday + ".outbox");
    MustExec(admin, "VACUUM " + kToday + ".outbox");
    Outcome t = RunLoad(url, kToday, today_sql, rate, seconds, hold, [&](PGconn*) { return TodayRound(**store); });
    row("today: enqueue(), Claim + MarkSent", hold, t);
    MakeLog(admin, slots);
    Outcome l = RunLoad(url, kLog, log_sql, rate, seconds, hold, [](PGconn* c) { return LogRound(c); });
    row("log: enqueue_log(), range read + a position row per slot", hold, l);
    MakeLog(admin, slots);
    Outcome g = RunLoad(url, kLog, log_sql, rate, seconds, hold, [slots](PGconn* c) { return LogGroupRound(c, slots); });
    row("log: enqueue_log(), range read + one position row for the slots", hold, g);
    MakeLog(admin, slots);
    Outcome gt = RunLoad(url, kLog, log_sql, rate, seconds, hold, [slots](PGconn* c) { return LogGroupRound(c, slots); },
                         std::chrono::milliseconds(10));
    row("log: the same, rounds at most every 10 ms", hold, gt);
  }

  // Purge: today's by PurgeSent; the log's by rotation and TRUNCATE.
  FillOutbox(admin, kToday, purge_rows, 1000, 200);
  ClaimOptions co;
  co.batch_size = 1000;
  co.owner = "bench";
  (void)DrainCount(**store, co);
  MustExec(admin, "CHECKPOINT");
  PurgeOutcome tp = MeasurePurge(admin, kToday, [&] {
    for (;;) {
      auto n = (*store)->PurgeSent(std::chrono::seconds(0), 1000);
      if (!n.ok()) std::exit(1);
      if (*n < 1000) break;
    }
  });
  MakeLog(admin, slots);
  MustExec(admin, "INSERT INTO " + kLog + ".log_0 (slot, event_id, aggregate_type, aggregate_id, event_type, payload, "
                  "headers) SELECT (hashtext('bench' || E'\\x1f' || 'agg-' || (i % 1000)) & 2147483647) % " +
                  std::to_string(slots) + ", gen_random_uuid(), 'bench', 'agg-' || (i % 1000), 'BenchEvent', "
                  "convert_to(repeat('x', 200), 'UTF8'), '{}' FROM generate_series(1, " +
                  std::to_string(purge_rows) + ") i");
  // Delivered: every slot's position past them; the current partition rotated away.
  MustExec(admin, "UPDATE " + kLog + ".slot SET lo = pg_current_snapshot(), hi = NULL, done_pos = 0");
  MustExec(admin, "UPDATE " + kLog + ".current SET part = 1");
  MustExec(admin, "CHECKPOINT");
  PurgeOutcome lp = MeasurePurge(admin, kLog, [&] {
    PGconn* c = MustConnect(url);  // admin samples the size meanwhile
    MustExec(c, "TRUNCATE " + kLog + ".log_0");
    PQfinish(c);
  });
  std::printf("\n| purge of %d delivered events | peak MB | MB 5 s after the purge started | %% of the peak | purge took s |\n"
              "|---|---|---|---|---|\n", purge_rows);
  for (const auto& [name, p] : {std::pair<const char*, PurgeOutcome>{"today: PurgeSent (outboxctl purge --retention-s 0)", tp},
                                {"log: rotation, then TRUNCATE of the delivered partition", lp}}) {
    std::printf("| %s | %.1f | %.1f | %.0f %% | %.2f |\n", name, p.peak_mb, p.after_mb, 100.0 * p.after_mb / p.peak_mb,
                p.took_s);
  }
  MustExec(admin, "DROP SCHEMA " + kLog + " CASCADE");
  MustExec(admin, "DROP SCHEMA " + kToday + " CASCADE");
  PQfinish(admin);
  return 0;
}
