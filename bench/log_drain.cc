// log_drain: issue 42's first step, a prototype of the outbox as a log,
// measured beside today's store and the pipeline floor before anything is
// built. One process, one database session per method, the methods
// interleaved run by run over the same rows (so they see the same machine).
//
// The prototype (bench_log schema, SQL only, created here):
//   log   each event written once: (pos from a sequence, txid =
//         pg_current_xact_id(), slot = hash of the aggregate mod --slots, the
//         event's columns); one index, (slot, txid, pos), which is all the
//         read needs.
//   slot  one row per slot: owner token and, as the position, two snapshots
//         (lo: what is published; hi: the range being published) and the last
//         pos published of the range. A range is what is visible in hi and
//         not in lo: commit visibility, so a transaction open across many
//         ranges is published in the range where it becomes visible, and
//         nobody waits for it.
//   read  a page is the range's next events by pos (the per-aggregate commit
//         order: enqueue takes the aggregate's lock before its nextval); a
//         range bigger than a page has its keys (slot, txid, pos) read once
//         in pos order, then each page is fetched by its keys.
//   write one UPDATE of the slot rows per page (done_pos; at a range's end
//         lo := hi, hi := pg_current_snapshot()), fenced by the token.
//
// Methods (events/s, one session each):
//   claim+mark       today's store: Claim (ordered) + MarkSent, no broker
//   log read+pos     the prototype's page read + position update, no broker
//   today+broker     Claim + Publish (the relay's Kafka producer) + MarkSent
//   log+broker       the prototype's read + Publish + position update
//   log+broker, read-ahead  the same, a big range's next page read on a
//                    second session while this one is published
//   log read+pos, cursor / log+broker, cursor  each range read once in pos
//                    order by a cursor on a read-only session (the next page
//                    fetched during the publish)
//   log+broker, 2 and 4 workers  the relay's overlap: that many sessions,
//                    each reading and advancing its share of the slots, one
//                    shared producer (the relay runs 4 workers by default)
//   floor            the pipeline floor: the same rows read by keyset from a
//                    table with only a primary key, published, no bookkeeping
//   bare DELETE      DELETE ... RETURNING of the outbox's rows (the ceiling
//                    of the earlier issues), no broker
// --store 1: the built log store instead of the prototype's variants.
// --store 2: the built store (its read in pos order since log migration 7),
//   from one session and with 4 workers (DrainLogStoreWorkers), beside the
//   prototype it came from (DrainLogByPos: a page one statement from an index
//   on (pos, slot)) alone, with the broker and with 4 workers, the floor and the
//   bare DELETE.
// --only N: just the N-th method of the mode (from 0), to profile it alone.
// --live SECONDS: the read in pos order under concurrent producers (RunLive).
//
//   log_drain --db URL --mock BIN [--rows 100000] [--batch 500] [--runs 3]
//             [--slots 16] [--aggregates 1000] [--payload 200] [--per-tx 10]
//             [--store 0|1|2] [--only N]
//   log_drain --db URL --live SECONDS [--seed N] [--stragglers 0] [--bounds-from-locks 0]
#include <algorithm>
#include <atomic>
#include <ctime>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "drain_common.h"
#include "mock_broker.h"
#include "outbox/kafka.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kToday = "bench_log_today";
const std::string kLog = "bench_log";

// The result of a query with parameters; exits on error.
struct Rows {
  PGresult* r = nullptr;
  ~Rows() { PQclear(r); }
  int n() const { return PQntuples(r); }
  const char* at(int i, int j) const { return PQgetvalue(r, i, j); }
  std::string str(int i, int j) const { return std::string(at(i, j), static_cast<std::size_t>(PQgetlength(r, i, j))); }
};

std::unique_ptr<Rows> MustQuery(PGconn* c, const std::string& sql, const std::vector<std::string>& params,
                                bool binary_payload = false) {
  std::vector<const char*> v;
  for (const auto& p : params) v.push_back(p.c_str());
  auto out = std::make_unique<Rows>();
  out->r = PQexecParams(c, sql.c_str(), static_cast<int>(v.size()), nullptr, v.data(), nullptr, nullptr,
                        binary_payload ? 1 : 0);
  const ExecStatusType st = PQresultStatus(out->r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::fprintf(stderr, "SQL failed: %s\n%s", sql.c_str(), PQresultErrorMessage(out->r));
    std::exit(1);
  }
  return out;
}

std::string PgArray(const std::vector<std::string>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += v[i];
  }
  s += '}';
  return s;
}

// The prototype's tables, filled with `rows` events, `per_tx` a transaction.
void MakeLog(PGconn* c, int rows, int slots, int aggregates, int payload, int per_tx) {
  const std::string s = kLog;
  MustExec(c, "DROP SCHEMA IF EXISTS " + s + " CASCADE");
  MustExec(c, "CREATE SCHEMA " + s);
  MustExec(c, "CREATE SEQUENCE " + s + ".pos_seq");
  MustExec(c, "CREATE TABLE " + s + ".log (pos bigint NOT NULL DEFAULT nextval('" + s +
                  ".pos_seq'), txid xid8 NOT NULL DEFAULT pg_current_xact_id(), slot smallint NOT NULL, "
                  "event_id uuid NOT NULL, aggregate_type text NOT NULL, aggregate_id text NOT NULL, "
                  "event_type text NOT NULL, payload bytea NOT NULL, headers jsonb NOT NULL, "
                  "created_at timestamptz NOT NULL DEFAULT now())");
  MustExec(c, "CREATE INDEX log_read ON " + s + ".log (slot, txid, pos)");
  MustExec(
      c,
      "CREATE TABLE " + s +
          ".slot (slot int PRIMARY KEY, token bigint NOT NULL, lo pg_snapshot NOT NULL, "
          "hi pg_snapshot, done_pos bigint NOT NULL DEFAULT 0, lo_pos bigint NOT NULL "
          "DEFAULT 0, hi_lo_pos bigint, "
          "hi_pos bigint, lo_bounds jsonb NOT NULL DEFAULT '{}', hi_bounds jsonb) WITH "
          "(fillfactor = 20)");
  MustExec(c, "INSERT INTO " + s + ".slot (slot, token, lo) SELECT g, 1, '1:1:' FROM generate_series(0, " +
                  std::to_string(slots - 1) + ") g");
  // `per_tx` events a transaction, as producers write them (each its own xid).
  MustExec(c, "CREATE PROCEDURE " + s + ".fill(n int, per_tx int, aggs int, payload int, slots int) "
                  "LANGUAGE plpgsql AS $$ BEGIN FOR t IN 0 .. (n / per_tx) - 1 LOOP "
                  "INSERT INTO " + s + ".log (slot, event_id, aggregate_type, aggregate_id, event_type, payload, headers) "
                  "SELECT (hashtext('bench/agg-' || (i % aggs)) & 2147483647) % slots, gen_random_uuid(), 'bench', "
                  "'agg-' || (i % aggs), 'BenchEvent', convert_to(repeat('x', payload), 'UTF8'), "
                  "'{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}' "
                  "FROM generate_series(t * per_tx, t * per_tx + per_tx - 1) i; COMMIT; END LOOP; END $$");
  MustExec(c, "CALL " + s + ".fill(" + std::to_string(rows) + ", " + std::to_string(per_tx) + ", " +
                  std::to_string(aggregates) + ", " + std::to_string(payload) + ", " + std::to_string(slots) + ")");
  // The floor's table: the same rows, a primary key only.
  MustExec(c, "CREATE TABLE " + s + ".floor AS SELECT * FROM " + s + ".log");
  MustExec(c, "ALTER TABLE " + s + ".floor ADD PRIMARY KEY (pos)");
  MustExec(c, "VACUUM ANALYZE " + s + ".log, " + s + ".floor, " + s + ".slot");
  MustExec(c, "CHECKPOINT");
}

using Publisher = std::function<void(std::span<const ClaimedEvent>)>;

ClaimedEvent FromRow(const Rows& r, int i, int first_col) {
  ClaimedEvent e;
  e.event_id = r.str(i, first_col);
  e.event.aggregate_type = r.str(i, first_col + 1);
  e.event.aggregate_id = r.str(i, first_col + 2);
  e.event.event_type = r.str(i, first_col + 3);
  e.event.payload = r.str(i, first_col + 4);
  // The header of every bench row (today's store parses the jsonb the same way).
  e.event.headers.push_back({"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
  return e;
}

// The columns a page carries (payload as bytes: text mode's bytea is hex, so
// it is decoded by the server with convert_from for the bench's ASCII payloads).
const char* kCols = "l.event_id::text, l.aggregate_type, l.aggregate_id, l.event_type, "
                    "convert_from(l.payload, 'UTF8'), l.headers::text";

struct LogStats {
  long events = 0;
  long position_writes = 0;  // slot rows updated
  long pages = 0;
  long stragglers = 0;  // pos order: events read by the stragglers' branch
};

// Publishes a page's first `n` events (kCols, then slot and pos), then moves
// each slot's done_pos to its last pos in the page, fenced by the token (the
// prototype's owner holds token 1). Counts the page and its writes in `stats`.
void PublishAndAdvance(PGconn* c, const Rows& page, int n, const Publisher& publish,
                       LogStats* stats) {
  std::vector<ClaimedEvent> events;
  events.reserve(static_cast<std::size_t>(n));
  std::map<std::string, std::string> last;  // slot -> last pos of the page
  for (int i = 0; i < n; ++i) {
    events.push_back(FromRow(page, i, 0));
    last[page.str(i, 6)] = page.str(i, 7);
  }
  if (publish) publish(events);
  std::vector<std::string> slots, positions;
  for (const auto& [slot, pos] : last) {
    slots.push_back(slot);
    positions.push_back(pos);
  }
  auto u =
      MustQuery(c,
                "UPDATE " + kLog +
                    ".slot s SET done_pos = v.pos FROM unnest($1::int[], "
                    "$2::bigint[]) v(slot, pos) WHERE s.slot = v.slot AND s.token = 1",
                {PgArray(slots), PgArray(positions)});
  stats->position_writes += std::atol(PQcmdTuples(u->r));
  ++stats->pages;
}

// Drains the prototype's log from one session: every slot owned (token 1).
// Returns events/s; `publish` null: no broker.
// `share`: this session's part when several workers drain at once, as the
// relay's do (each owns the slots whose number mod `workers` is `worker`;
// `sent_all` counts every worker's events, to know when the log is drained).
struct Share {
  int worker = 0;
  int workers = 1;
  std::atomic<long>* sent_all = nullptr;
  // Set: the drain ends when sent_all reaches it (producers still writing
  // until then: --live), instead of at `rows`.
  const std::atomic<long>* target = nullptr;
  bool stragglers =
      true;  // pos order: false drops the stragglers' branch (--live's control)
  // pos order: false takes the stragglers' bounds from the snapshots' xip alone,
  // not from pg_locks too (--live's second control).
  bool bounds_from_locks = true;
  // Set: the drain stops at once (--live's watchdog, for a drain that never
  // finds an empty page).
  const std::atomic<bool>* abort = nullptr;
};

double DrainLog(const std::string& url, int batch, long rows, const Publisher& publish, LogStats* stats,
                bool read_ahead = false, Share share = {}) {
  PGconn* c = MustConnect(url);
  std::atomic<long> mine{0};
  std::atomic<long>* sent_all = share.sent_all != nullptr ? share.sent_all : &mine;
  const std::string owned = "s.token = 1 AND s.slot % " + std::to_string(share.workers) + " = " +
                            std::to_string(share.worker);
  const std::string s = kLog;
  // The range of every owned slot: visible in hi, not in lo, after done_pos;
  // as PgQ does, the index is searched from lo's xmax, plus the transactions
  // lo saw running (an open transaction does not widen every read).
  const std::string in_range =
      "l.slot = s.slot AND pg_visible_in_snapshot(l.txid, s.hi) AND NOT pg_visible_in_snapshot(l.txid, s.lo) "
      "AND ((l.txid >= pg_snapshot_xmax(s.lo) AND l.txid < pg_snapshot_xmax(s.hi)) "
      "OR l.txid = ANY(ARRAY(SELECT pg_snapshot_xip(s.lo)))) AND l.pos > s.done_pos";
  const std::string first_page = "SELECT " + std::string(kCols) + ", l.slot, l.pos FROM " + s + ".slot s JOIN " + s +
                                 ".log l ON " + in_range + " WHERE " + owned + " ORDER BY l.pos LIMIT " +
                                 std::to_string(batch + 1);
  const std::string keys = "SELECT l.slot, l.txid, l.pos FROM " + s + ".slot s JOIN " + s + ".log l ON " + in_range +
                           " WHERE " + owned + " ORDER BY l.pos";
  // One index probe per key, whatever the table's statistics say (the LIMIT
  // keeps the planner from turning the lookups into a hash join over a scan of
  // the whole log, which it chose at 20,000 rows).
  const std::string by_keys =
      "SELECT " + std::string(kCols) +
      ", l.slot, l.pos FROM unnest($1::int[], $2::xid8[], "
      "$3::bigint[]) k(slot, txid, pos) CROSS JOIN LATERAL (SELECT * FROM " +
      s +
      ".log l WHERE l.slot = k.slot AND l.txid = k.txid AND l.pos = k.pos LIMIT 1) l "
      "ORDER BY l.pos";
  const std::string next_range = "UPDATE " + s + ".slot s SET lo = coalesce(hi, lo), hi = pg_current_snapshot(), "
                                 "done_pos = 0 WHERE " + owned;
  auto t0 = std::chrono::steady_clock::now();
  MustExec(c, next_range);
  long sent = 0;
  std::vector<std::string> ks, kt, kp;  // a big range's keys, in pos order
  std::size_t next_key = 0;
  // The next page's keys as the by_keys query's parameters; moves next_key on.
  auto key_page = [&] {
    const std::size_t end = std::min(ks.size(), next_key + static_cast<std::size_t>(batch));
    auto part = [&](const std::vector<std::string>& v) {
      return PgArray(std::vector<std::string>(v.begin() + static_cast<long>(next_key), v.begin() + static_cast<long>(end)));
    };
    std::vector<std::string> args = {part(ks), part(kt), part(kp)};
    next_key = end;
    return args;
  };
  PGconn* reader = read_ahead ? MustConnect(url) : nullptr;
  std::future<std::unique_ptr<Rows>> ahead;
  for (;;) {
    std::unique_ptr<Rows> page;
    if (ahead.valid() || next_key < ks.size()) {
      page = ahead.valid() ? ahead.get() : MustQuery(c, by_keys, key_page());
      // Read-ahead: the next page's rows are read on a second session while
      // this one is published (its keys are known; the position is not needed).
      if (reader != nullptr && next_key < ks.size()) {
        ahead = std::async(std::launch::async, [reader, &by_keys, args = key_page()] {
          return MustQuery(reader, by_keys, args);
        });
      }
    } else {
      ks.clear(), kt.clear(), kp.clear();
      next_key = 0;
      page = MustQuery(c, first_page, {});
      if (page->n() > batch) {
        // A range bigger than a page: its keys once, in pos order.
        auto k = MustQuery(c, keys, {});
        for (int i = batch; i < k->n(); ++i) {
          ks.push_back(k->str(i, 0)), kt.push_back(k->str(i, 1)), kp.push_back(k->str(i, 2));
        }
      }
    }
    const int n = std::min(page->n(), batch);
    if (n == 0) {
      if (sent_all->load() >= rows) break;
      stats->position_writes += MustExec(c, next_range);  // the range is done
      continue;
    }
    PublishAndAdvance(c, *page, n, publish, stats);
    sent += n;
    sent_all->fetch_add(n);
  }
  const double secs = SecondsSince(t0);
  PQfinish(c);
  if (reader != nullptr) PQfinish(reader);
  stats->events += sent;
  if (share.sent_all == nullptr && sent != rows) {
    std::fprintf(stderr, "log drain: %ld of %ld events\n", sent, rows);
    std::exit(1);
  }
  return static_cast<double>(sent) / secs;
}

// The log drained through a cursor: each range is read once, in pos order, by
// a read-only REPEATABLE READ transaction on a second session (begun after the
// range's hi was committed, so it sees every event of the range), one FETCH a
// page; the next page is fetched while this one is published, and the
// position is written per page on the first session. The reader holds its
// snapshot for one range only; the log has no dead rows for it to keep.
double DrainLogCursor(const std::string& url, int batch, long rows, const Publisher& publish, LogStats* stats) {
  PGconn* c = MustConnect(url);
  PGconn* reader = MustConnect(url);
  const std::string s = kLog;
  const std::string in_range =
      "l.slot = s.slot AND pg_visible_in_snapshot(l.txid, s.hi) AND NOT pg_visible_in_snapshot(l.txid, s.lo) "
      "AND ((l.txid >= pg_snapshot_xmax(s.lo) AND l.txid < pg_snapshot_xmax(s.hi)) "
      "OR l.txid = ANY(ARRAY(SELECT pg_snapshot_xip(s.lo)))) AND l.pos > s.done_pos";
  const std::string declare = "DECLARE range_cursor NO SCROLL CURSOR FOR SELECT " + std::string(kCols) +
                              ", l.slot, l.pos FROM " + s + ".slot s JOIN " + s + ".log l ON " + in_range +
                              " WHERE s.token = 1 ORDER BY l.pos";
  const std::string fetch = "FETCH " + std::to_string(batch) + " FROM range_cursor";
  const std::string next_range = "UPDATE " + s + ".slot SET lo = coalesce(hi, lo), hi = pg_current_snapshot(), "
                                 "done_pos = 0 WHERE token = 1";
  auto t0 = std::chrono::steady_clock::now();
  long sent = 0;
  for (;;) {
    stats->position_writes += MustExec(c, next_range);
    MustExec(reader, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    MustExec(reader, declare);
    auto next = std::async(std::launch::async, [&] { return MustQuery(reader, fetch, {}); });
    long in_range_sent = 0;
    for (;;) {
      std::unique_ptr<Rows> page = next.get();
      const int n = page->n();
      if (n == 0) break;
      next = std::async(std::launch::async, [&] { return MustQuery(reader, fetch, {}); });
      PublishAndAdvance(c, *page, n, publish, stats);
      in_range_sent += n;
    }
    MustExec(reader, "COMMIT");
    sent += in_range_sent;
    if (sent >= rows) break;
  }
  const double secs = SecondsSince(t0);
  PQfinish(c);
  PQfinish(reader);
  stats->events += sent;
  if (sent != rows) {
    std::fprintf(stderr, "log drain (cursor): %ld of %ld events\n", sent, rows);
    std::exit(1);
  }
  return static_cast<double>(sent) / secs;
}

// The read proposed after step 4 (docs/design.md, "Next: the read in pos
// order"): a range is read in pos order straight from an index on (pos, slot),
// a page one statement, so a page reads what it returns instead of its
// range's keys and then a probe per key. What makes the pos bound safe: each
// range's snapshot is taken between two reads of the pos sequence, lo_pos
// (before) and hi_pos (after); an event of a transaction whose xid came after
// lo has pos > lo_pos (its producer assigns the xid before drawing pos), and
// an event visible in hi has pos <= hi_pos. The stragglers — transactions
// running when lo was taken, ended by hi, whose events drew pos before lo —
// are read from the same index over (bound, lo_pos], each with the bound the
// slot keeps for it (lo_bounds: every transaction that may have been running
// at lo, from lo's xip and from pg_locks, with the lo_pos of the range before
// the first that saw it). Rows of slots another worker owns are read and
// dropped by the scan.
double DrainLogByPos(const std::string& url, int batch, long rows,
                     const Publisher& publish, LogStats* stats, Share share = {}) {
  PGconn* c = MustConnect(url);
  std::atomic<long> mine{0};
  std::atomic<long>* sent_all = share.sent_all != nullptr ? share.sent_all : &mine;
  const std::string s = kLog;
  const std::string owned = "s.token = 1 AND s.slot % " + std::to_string(share.workers) +
                            " = " + std::to_string(share.worker);
  // The owned slots' ranges as arrays indexed by slot + 1 (NULL: not owned),
  // read once a statement (InitPlans: the index's bounds, and the scan stays
  // in pos order; a join would lose the order and sort the whole range).
  const std::string r =
      "WITH r AS MATERIALIZED (SELECT array_agg(CASE WHEN " + owned +
      " THEN s.lo END ORDER BY s.slot) AS los, "
      "array_agg(CASE WHEN " +
      owned +
      " THEN s.hi END ORDER BY s.slot) AS his, "
      "array_agg(CASE WHEN " +
      owned +
      " THEN greatest(s.lo_pos, s.done_pos) END ORDER BY s.slot) AS froms, "
      "min(greatest(s.lo_pos, s.done_pos)) FILTER (WHERE " +
      owned +
      ") AS low, "
      "max(s.hi_pos) FILTER (WHERE " +
      owned + ") AS high FROM " + s + ".slot s) ";
  // Each branch ordered and limited on its own, so the scan of the first stops
  // at a page. The last column tells the branch.
  const std::string limit = " ORDER BY l.pos LIMIT " + std::to_string(batch);
  std::string page_sql =
      r + "(SELECT " + std::string(kCols) + ", l.slot, l.pos, 'p' AS branch FROM " + s +
      ".log l "
      "WHERE l.pos > (SELECT low FROM r) AND l.pos <= (SELECT high FROM r) "
      "AND l.pos > (SELECT froms FROM r)[l.slot + 1] "
      "AND pg_visible_in_snapshot(l.txid, (SELECT his FROM r)[l.slot + 1]) "
      "AND NOT pg_visible_in_snapshot(l.txid, (SELECT los FROM r)[l.slot + 1])" +
      limit + ")";
  if (share.stragglers) {
    page_sql +=
        " UNION ALL (SELECT " + std::string(kCols) + ", l.slot, l.pos, 's' FROM " + s +
        ".slot s "
        "CROSS JOIN LATERAL (SELECT b.key::xid8 AS txid, b.value::bigint AS bound "
        "FROM jsonb_each_text(s.lo_bounds) b WHERE pg_visible_in_snapshot(b.key::xid8, "
        "s.hi)) x "
        "CROSS JOIN LATERAL (SELECT * FROM " +
        s +
        ".log l WHERE l.pos > greatest(x.bound, s.done_pos) "
        "AND l.pos <= s.lo_pos AND l.txid = x.txid AND l.slot = s.slot) l WHERE " +
        owned + limit + ")" + " ORDER BY pos LIMIT " + std::to_string(batch);
  }
  // The last pos drawn (0 before the first: a new sequence's last_value is its
  // start, not yet handed out).
  const std::string pos_now =
      "SELECT coalesce(pg_sequence_last_value('" + s + ".pos_seq'), 0)";
  // The transactions running now, as xid8 (pg_locks: every xid, a prepared
  // transaction's too, not only those under a snapshot's xmax). pg_locks has
  // 32-bit xids: each is widened to the xid8 nearest the snapshot's xmax (a
  // running xid is within 2^31 of it), right across an epoch's wrap.
  const std::string running =
      "SELECT coalesce(array_agg((m.x + ((l.transactionid::text::bigint - (m.x & "
      "4294967295) "
      "+ 6442450944) % 4294967296 - 2147483648))::text), '{}') "
      "FROM pg_locks l, (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS "
      "x) m "
      "WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted";
  // lo := hi (with its lo_pos and bounds); hi := this statement's snapshot,
  // hi_lo_pos := $1 (the sequence read before it), hi_pos := the sequence read
  // after it. hi's bounds cover every transaction that may be running at hi
  // and have drawn pos before $1: its xip, and $2 (read after $1, before the
  // snapshot) from hi's xmax up — a snapshot's xmax is one past the latest
  // completed xid, so a transaction running with a higher xid is in neither
  // part of the snapshot. One that lo's bounds have keeps its bound; any other
  // got its xid after lo's $2 was read, so its pos is above lo's lo_pos.
  const std::string next_range =
      "UPDATE " + s +
      ".slot s SET lo = coalesce(hi, lo), lo_pos = coalesce(hi_lo_pos, lo_pos), "
      "lo_bounds = coalesce(hi_bounds, lo_bounds), hi = pg_current_snapshot(), hi_lo_pos "
      "= $1::bigint, "
      "hi_pos = (" +
      pos_now +
      "), hi_bounds = (SELECT coalesce(jsonb_object_agg(e.x::text, "
      "coalesce((coalesce(s.hi_bounds, s.lo_bounds) ->> e.x::text)::bigint, "
      "coalesce(s.hi_lo_pos, s.lo_pos))), '{}') "
      "FROM (SELECT pg_snapshot_xip(pg_current_snapshot()) UNION SELECT r FROM "
      "unnest($2::xid8[]) r "
      "WHERE r >= pg_snapshot_xmax(pg_current_snapshot())) e(x)), done_pos = 0 WHERE " +
      owned;
  auto new_range = [&] {
    auto before = MustQuery(c, pos_now, {});
    auto live = MustQuery(c, running, {});
    auto u =
        MustQuery(c, next_range,
                  {before->str(0, 0), share.bounds_from_locks ? live->str(0, 0) : "{}"});
    return std::atol(PQcmdTuples(u->r));
  };
  auto done = [&] {
    return sent_all->load() >= (share.target != nullptr ? share.target->load() : rows);
  };
  MustExec(c, "SET enable_bitmapscan = off");  // the build sets it on its read function
  auto t0 = std::chrono::steady_clock::now();
  new_range();
  long sent = 0;
  for (;;) {
    if (share.abort != nullptr && share.abort->load()) break;
    auto page = MustQuery(c, page_sql, {});
    const int n = page->n();
    if (n == 0) {
      if (done()) break;
      stats->position_writes += new_range();  // the range is done
      continue;
    }
    for (int i = 0; i < n; ++i) stats->stragglers += page->str(i, 8) == "s" ? 1 : 0;
    PublishAndAdvance(c, *page, n, publish, stats);
    sent += n;
    sent_all->fetch_add(n);
  }
  const double secs = SecondsSince(t0);
  PQfinish(c);
  stats->events += sent;
  if (share.sent_all == nullptr && sent != rows) {
    std::fprintf(stderr, "log drain (pos order): %ld of %ld events\n", sent, rows);
    std::exit(1);
  }
  return static_cast<double>(sent) / secs;
}

// The log drained by `workers` sessions at once, each with its own slots and
// the one shared producer, as the relay's workers run. Events/s of the whole.
double DrainLogWorkers(const std::string& url, int batch, long rows,
                       const Publisher& publish, LogStats* stats, int workers,
                       bool by_pos = false) {
  std::atomic<long> sent_all{0};
  std::vector<LogStats> each(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto& mine = each[static_cast<std::size_t>(w)];
      if (by_pos) {
        DrainLogByPos(url, batch, rows, publish, &mine, {w, workers, &sent_all});
      } else {
        DrainLog(url, batch, rows, publish, &mine, false, {w, workers, &sent_all});
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = SecondsSince(t0);
  for (const auto& e : each) {
    stats->events += e.events, stats->position_writes += e.position_writes, stats->pages += e.pages;
  }
  if (sent_all.load() != rows) {
    std::fprintf(stderr, "log drain (%d workers): %ld of %ld events\n", workers, sent_all.load(), rows);
    std::exit(1);
  }
  return static_cast<double>(rows) / secs;
}

// The pipeline floor: keyset pages of the floor table, published, nothing written.
double DrainFloor(const std::string& url, int batch, long rows, const Publisher& publish) {
  PGconn* c = MustConnect(url);
  const std::string q = "SELECT " + std::string(kCols) + ", l.pos FROM " + kLog + ".floor l WHERE l.pos > $1 "
                        "ORDER BY l.pos LIMIT " + std::to_string(batch);
  auto t0 = std::chrono::steady_clock::now();
  long sent = 0;
  std::string after = "0";
  for (;;) {
    auto page = MustQuery(c, q, {after});
    if (page->n() == 0) break;
    std::vector<ClaimedEvent> events;
    for (int i = 0; i < page->n(); ++i) events.push_back(FromRow(*page, i, 0));
    publish(events);
    after = page->str(page->n() - 1, 6);
    sent += page->n();
  }
  const double secs = SecondsSince(t0);
  PQfinish(c);
  if (sent != rows) std::exit(1);
  return static_cast<double>(sent) / secs;
}

// Today's pipeline from one session: Claim + Publish + MarkSent.
double DrainTodayWithBroker(const std::string& url, int batch, long rows, const Publisher& publish) {
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = kToday;
  auto store = OpenPostgresStore(o);
  if (!store.ok()) std::exit(1);
  ClaimOptions co;
  co.batch_size = batch;
  co.owner = "bench";
  co.ordered = true;
  auto t0 = std::chrono::steady_clock::now();
  long sent = 0;
  for (;;) {
    auto claim = (*store)->Claim(co);
    if (!claim.ok()) std::exit(1);
    if (claim->events.empty()) break;
    publish(claim->events);
    std::vector<Ticket> t;
    for (const auto& e : claim->events) t.push_back(e.ticket);
    auto m = (*store)->MarkSent(t);
    if (!m.ok() || !m->refused.empty()) std::exit(1);
    sent += static_cast<long>(claim->events.size());
  }
  const double secs = SecondsSince(t0);
  if (sent != rows) std::exit(1);
  return static_cast<double>(sent) / secs;
}

// ---- The built log store (issue 42, step 4) ----

const std::string kStore = "bench_logstore";

// Row writes (updates and deletes) on the schema's tables so far.
long RowWrites(PGconn* admin, const std::string& schema) {
  return std::atol(Scalar(admin, "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables "
                                 "WHERE schemaname = '" + schema + "'").c_str());
}

// The built log store drained from one session: Claim (+ Publish) + MarkSent.
// `stats->position_writes` gets the row writes the drain caused.
double DrainLogStore(PGconn* admin, const std::string& url, int batch, long rows, const Publisher& publish,
                     LogStats* stats) {
  const long writes_before = RowWrites(admin, kStore);
  double rate = 0;
  {
    PostgresStoreOptions o;
    o.conninfo = url;
    o.schema = kStore;
    auto store = OpenPostgresStore(o);
    if (!store.ok()) std::exit(1);
    ClaimOptions co;
    co.batch_size = batch;
    co.owner = "bench";
    auto t0 = std::chrono::steady_clock::now();
    long sent = 0;
    for (;;) {
      auto claim = (*store)->Claim(co);
      if (!claim.ok()) {
        std::fprintf(stderr, "log store claim: %s\n", claim.status().ToString().c_str());
        std::exit(1);
      }
      if (claim->events.empty()) break;
      if (publish) publish(claim->events);
      std::vector<Ticket> t;
      for (const auto& e : claim->events) t.push_back(e.ticket);
      auto m = (*store)->MarkSent(t);
      if (!m.ok() || !m->refused.empty()) std::exit(1);
      sent += static_cast<long>(claim->events.size());
      ++stats->pages;
    }
    rate = static_cast<double>(sent) / SecondsSince(t0);
    if (sent != rows) {
      std::fprintf(stderr, "log store: %ld of %ld events\n", sent, rows);
      std::exit(1);
    }
    stats->events += sent;
  }  // the session ends: its statistics are flushed
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stats->position_writes += RowWrites(admin, kStore) - writes_before;
  return rate;
}

// The built store drained by `workers` stores at once, as the relay's workers
// drain it: each its share of the slots. The stores take their shares on the
// empty schema first (a store takes every free slot at its first claim and gives
// the surplus back at its next look, a second later), then the events are
// written (untimed), then all drain with the one shared producer. Events/s of the whole.
double DrainLogStoreWorkers(PGconn* admin, const std::string& url, int batch, long rows,
                            const Publisher& publish, LogStats* stats, int workers,
                            const std::function<void()>& fill) {
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = kStore;
  std::vector<std::unique_ptr<Store>> stores;
  for (int w = 0; w < workers; ++w) {
    auto store = OpenPostgresStore(o);
    if (!store.ok()) std::exit(1);
    stores.push_back(std::move(store).value());
  }
  ClaimOptions co;
  co.batch_size = batch;
  co.owner = "bench";
  const std::string shares = "SELECT count(DISTINCT owner) = " + std::to_string(workers) +
                             " AND count(*) FILTER (WHERE owner IS NULL) = 0 FROM " +
                             kStore + ".slots";
  for (int round = 0;; ++round) {
    for (auto& st : stores) {
      if (!st->Claim(co).ok()) std::exit(1);
    }
    PGresult* shared = PQexec(admin, shares.c_str());
    const bool even = PQntuples(shared) == 1 && PQgetvalue(shared, 0, 0)[0] == 't';
    PQclear(shared);
    if (even) break;
    if (round == 100) {
      std::fprintf(stderr, "log store workers: the slots were not shared\n");
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fill();
  const long writes_before = RowWrites(admin, kStore);
  std::atomic<long> sent_all{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      Store& st = *stores[static_cast<std::size_t>(w)];
      while (sent_all.load() < rows) {
        if (SecondsSince(t0) > 300) {  // an event lost would otherwise hang the bench
          std::fprintf(stderr, "log store workers: %ld of %ld events after 300 s\n",
                       sent_all.load(), rows);
          std::exit(1);
        }
        auto claim = st.Claim(co);
        if (!claim.ok()) std::exit(1);
        if (claim->events.empty()) continue;
        if (publish) publish(claim->events);
        std::vector<Ticket> t;
        for (const auto& e : claim->events) t.push_back(e.ticket);
        auto m = st.MarkSent(t);
        if (!m.ok() || !m->refused.empty()) std::exit(1);
        sent_all.fetch_add(static_cast<long>(claim->events.size()));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double rate = static_cast<double>(rows) / SecondsSince(t0);
  if (sent_all.load() != rows) {
    std::fprintf(stderr, "log store workers: %ld of %ld events\n", sent_all.load(), rows);
    std::exit(1);
  }
  stats->events += rows;
  stores.clear();  // the sessions end: their statistics are flushed
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stats->position_writes += RowWrites(admin, kStore) - writes_before;
  return rate;
}

// --live SECONDS: the read in pos order's safety under concurrent producers.
// Producers write for SECONDS while one session drains in pos order: two write
// transactions of 1-10 events over 200 aggregates, one holds a transaction open
// for about 0.75 s around five single events (so ranges begin and end while it
// runs). Each producer assigns its xid first and takes its aggregates' locks
// (in order) before its INSERT, as enqueue() does. Then checks that every
// committed event was handed out once, and each aggregate's in pos order (its
// commit order), and that some were stragglers (else the run proved nothing).
// The controls must lose events: --stragglers 0 drops the stragglers' branch;
// --bounds-from-locks 0 takes the bounds from the snapshots' xip alone (a
// transaction running with an xid at or above a snapshot's xmax is in neither
// part of it). The producers' choices come from --seed (0: from the clock).
struct LiveOptions {
  int seconds = 15;
  int batch = 500;
  int slots = 16;
  unsigned seed = 0;
  bool stragglers = true;
  bool bounds_from_locks = true;
};

int RunLive(PGconn* admin, const std::string& url, const LiveOptions& o) {
  MakeLog(admin, 0, o.slots, 200, 0, 1);
  // The stragglers are read through (pos, slot) too: no txid index.
  MustExec(admin, "DROP INDEX " + kLog + ".log_read");
  MustExec(admin, "CREATE INDEX log_pos_slot ON " + kLog + ".log (pos, slot)");
  std::atomic<bool> stop{false};
  std::atomic<long> transactions{0};
  auto producer = [&](int id, bool long_tx) {
    PGconn* p = MustConnect(url);
    unsigned seed = (o.seed + static_cast<unsigned>(id)) * 2654435761U + 1;
    auto next = [&seed](unsigned n) {
      seed = seed * 1103515245U + 12345U;
      return (seed >> 16) % n;
    };
    // The locks in one global order (no deadlock), then the events.
    const std::string lock =
        "SELECT pg_advisory_xact_lock(hashtext('agg-' || a)) FROM "
        "(SELECT DISTINCT a FROM unnest($1::int[]) a ORDER BY a) s";
    const std::string insert =
        "INSERT INTO " + kLog +
        ".log (slot, event_id, aggregate_type, aggregate_id, "
        "event_type, payload, headers) SELECT (hashtext('bench/agg-' || e.a) & "
        "2147483647) % " +
        std::to_string(o.slots) +
        ", gen_random_uuid(), 'bench', 'agg-' || e.a, 'BenchEvent', "
        "convert_to('x', 'UTF8'), '{}' FROM unnest($1::int[]) WITH ORDINALITY e(a, i) "
        "ORDER BY e.i";
    while (!stop.load()) {
      MustExec(p, "BEGIN");
      MustExec(p, "SELECT pg_current_xact_id()");  // the xid before any pos
      // A long transaction writes one aggregate five times (one lock, taken
      // first); a short one 1-10 events of any.
      std::vector<std::string> aggs;
      const int events = long_tx ? 1 : 1 + static_cast<int>(next(10));
      for (int i = 0; i < events; ++i) aggs.push_back(std::to_string(next(200)));
      MustQuery(p, lock, {PgArray(aggs)});
      for (int k = 0; k < (long_tx ? 5 : 1); ++k) {
        MustQuery(p, insert, {PgArray(aggs)});
        if (long_tx) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      }
      MustExec(p, "COMMIT");
      transactions.fetch_add(1);
      if (!long_tx) std::this_thread::sleep_for(std::chrono::microseconds(next(2000)));
    }
    PQfinish(p);
  };
  std::mutex mu;
  std::vector<std::string> handed;  // event ids in hand-over order
  const Publisher record = [&](std::span<const ClaimedEvent> events) {
    std::lock_guard<std::mutex> g(mu);
    for (const auto& e : events) handed.push_back(e.event_id);
  };
  std::atomic<long> sent{0}, target{std::numeric_limits<long>::max()};
  std::atomic<bool> abort{false};
  LogStats stats;
  Share share;
  share.sent_all = &sent;
  share.target = &target;
  share.abort = &abort;
  share.stragglers = o.stragglers;
  share.bounds_from_locks = o.bounds_from_locks;
  std::thread drainer([&] { DrainLogByPos(url, o.batch, 0, record, &stats, share); });
  std::vector<std::thread> producers;
  producers.emplace_back(producer, 1, false);
  producers.emplace_back(producer, 2, false);
  producers.emplace_back(producer, 3, true);
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  stop.store(true);
  for (auto& t : producers) t.join();
  const long total =
      std::atol(Scalar(admin, "SELECT count(*) FROM " + kLog + ".log").c_str());
  // The drain ends at the log's count, or after 5 s without progress (a lost
  // event would keep it waiting: the check below names what is missing), or
  // at 60 s whatever it does (a drain that never finds an empty page).
  target.store(total);
  long before = -1;
  for (int still = 0, waited = 0; sent.load() < total && still < 5 && waited < 60;
       ++waited) {
    const long now = sent.load();
    still = now == before ? still + 1 : 0;
    before = now;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  abort.store(true);
  drainer.join();
  // Each committed event once, and each aggregate's in pos order.
  auto rows = MustQuery(
      admin, "SELECT event_id::text, aggregate_id, pos FROM " + kLog + ".log", {});
  std::map<std::string, std::pair<std::string, long>> by_id;
  for (int i = 0; i < rows->n(); ++i) {
    by_id[rows->str(i, 0)] = {rows->str(i, 1), std::atol(rows->at(i, 2))};
  }
  std::map<std::string, int> seen;
  std::map<std::string, long> last_pos;
  long duplicates = 0, unknown = 0, out_of_order = 0;
  for (const auto& id : handed) {
    if (++seen[id] > 1) ++duplicates;
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      ++unknown;
      continue;
    }
    long& last = last_pos[it->second.first];
    if (it->second.second < last) ++out_of_order;
    last = std::max(last, it->second.second);
  }
  long missing = 0;
  for (const auto& [id, v] : by_id) missing += seen.count(id) == 0 ? 1 : 0;
  std::printf(
      "live (seed %u; stragglers' branch %s, bounds from pg_locks %s): %ld events in %ld "
      "transactions over %d s; handed out %zu (%ld by the stragglers' branch) in %ld "
      "pages; missing %ld, duplicates %ld, unknown %ld, out of aggregate order %ld\n",
      o.seed, o.stragglers ? "on" : "off (control)",
      o.bounds_from_locks ? "on" : "off (control)", total, transactions.load(), o.seconds,
      handed.size(), stats.stragglers, stats.pages, missing, duplicates, unknown,
      out_of_order);
  MustExec(admin, "DROP SCHEMA " + kLog + " CASCADE");
  const bool ordered = duplicates == 0 && unknown == 0 && out_of_order == 0;
  // The read: everything once, in order, stragglers among them. A control: it
  // must lose events (and nothing else).
  if (o.stragglers && o.bounds_from_locks) {
    return ordered && missing == 0 && total > 0 && stats.stragglers > 0 ? 0 : 1;
  }
  return ordered && missing > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv,
          {{"db", DefaultDb()},
           {"mock", ""},
           {"rows", "100000"},
           {"batch", "500"},
           {"runs", "3"},
           {"slots", "16"},
           {"aggregates", "1000"},
           {"payload", "200"},
           {"per-tx", "10"},
           {"store", "0"},
           {"only", "-1"},
           {"live", "0"},
           {"stragglers", "1"},
           {"bounds-from-locks", "1"},
           {"seed", "0"}});
  const std::string url = f.Str("db");
  if (url.empty() || (f.Str("mock").empty() && f.Int("live") == 0)) {
    std::fprintf(stderr,
                 "log_drain: --db URL (or OUTBOX_PG_URL) and --mock BIN required (--live "
                 "needs no mock)\n");
    return 2;
  }
  const int rows = f.Int("rows"), batch = f.Int("batch"), runs = f.Int("runs");
  const int aggregates = f.Int("aggregates"), payload = f.Int("payload");
  // The fill writes whole transactions of --per-tx events: a remainder would
  // never be written, and the drains would wait for it.
  if (f.Int("per-tx") <= 0 || rows <= 0 || rows % f.Int("per-tx") != 0 || batch <= 0 || f.Int("slots") <= 0) {
    std::fprintf(stderr, "log_drain: --rows must be a positive multiple of --per-tx; --batch and --slots positive\n");
    return 2;
  }
  PGconn* admin = MustConnect(url);
  if (f.Int("live") > 0) {
    LiveOptions o;
    o.seconds = f.Int("live");
    o.batch = batch;
    o.slots = f.Int("slots");
    o.seed = f.Int("seed") != 0 ? static_cast<unsigned>(f.Int("seed"))
                                : static_cast<unsigned>(std::time(nullptr));
    o.stragglers = f.Int("stragglers") != 0;
    o.bounds_from_locks = f.Int("bounds-from-locks") != 0;
    return RunLive(admin, url, o);
  }
  MigrateFresh(admin, url, kToday);
  MockBroker mock = StartMockBroker(f.Str("mock"), 3, "outbox.event.bench:32", "log_drain_mock");
  KafkaTransportOptions ko;
  ko.properties["bootstrap.servers"] = mock.bootstrap;
  auto transport = OpenKafkaTransport(ko);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  const Publisher publish = [&](std::span<const ClaimedEvent> events) {
    for (const auto& r : (*transport)->Publish(events)) {
      if (r.outcome != PublishOutcome::kAcked) {
        std::fprintf(stderr, "publish: %s\n", r.error.c_str());
        std::exit(1);
      }
    }
  };
  struct Method {
    std::string name;
    std::function<double()> run;
    std::vector<double> rates;
  };
  LogStats bare_stats, broker_stats, ahead_stats, two_stats, four_stats, cursor_stats, cursor_bare_stats;
  auto fill_today = [&] { FillOutbox(admin, kToday, rows, aggregates, payload); };
  auto fill_log = [&] { MakeLog(admin, rows, f.Int("slots"), aggregates, payload, f.Int("per-tx")); };
  std::vector<Method> methods = {
      {"claim+mark: today's store, Claim (ordered) + MarkSent, no broker",
       [&] { fill_today(); return DrainStore(url, kToday, SentMode::kUpdate, true, batch, rows); }, {}},
      {"log read+pos: the prototype's page read + position update, no broker",
       [&] { fill_log(); return DrainLog(url, batch, rows, nullptr, &bare_stats); }, {}},
      {"log read+pos, cursor: the cursor's read + position update, no broker",
       [&] { fill_log(); return DrainLogCursor(url, batch, rows, nullptr, &cursor_bare_stats); }, {}},
      {"today+broker: Claim + Publish (mock Kafka) + MarkSent",
       [&] { fill_today(); return DrainTodayWithBroker(url, batch, rows, publish); }, {}},
      {"log+broker: the prototype's read + Publish (mock Kafka) + position update",
       [&] { fill_log(); return DrainLog(url, batch, rows, publish, &broker_stats); }, {}},
      {"log+broker, read-ahead: the same, the next page read on a second session during the publish",
       [&] { fill_log(); return DrainLog(url, batch, rows, publish, &ahead_stats, true); }, {}},
      {"log+broker, 2 workers: the same, two sessions each reading its half of the slots, one producer",
       [&] { fill_log(); return DrainLogWorkers(url, batch, rows, publish, &two_stats, 2); }, {}},
      {"log+broker, 4 workers (the relay's default): the same, four sessions",
       [&] { fill_log(); return DrainLogWorkers(url, batch, rows, publish, &four_stats, 4); }, {}},
      {"log+broker, cursor: each range read once in pos order by a cursor, the next page fetched during the publish",
       [&] { fill_log(); return DrainLogCursor(url, batch, rows, publish, &cursor_stats); }, {}},
      {"pipeline floor: keyset read of a primary-key-only copy + Publish, no bookkeeping",
       [&] { fill_log(); return DrainFloor(url, batch, rows, publish); }, {}},
      {"bare DELETE ... RETURNING of the outbox's rows, no broker",
       [&] { fill_today(); return DrainCeiling(admin, kToday, batch, rows); }, {}},
  };
  // --store 1: the built log store (issue 42, step 4) beside today's store,
  // the floor and the bare DELETE, instead of the prototype's variants.
  LogStats store_bare, store_broker;
  if (f.Int("store") == 1) {
    auto fill_store = [&] { FillLog(admin, url, kStore, rows, aggregates, payload, f.Int("per-tx")); };
    methods = {
        {"claim+mark: today's store, Claim (ordered) + MarkSent, no broker",
         [&] { fill_today(); return DrainStore(url, kToday, SentMode::kUpdate, true, batch, rows); }, {}},
        {"log store: the built store's Claim + MarkSent, no broker",
         [&] { fill_store(); return DrainLogStore(admin, url, batch, rows, nullptr, &store_bare); }, {}},
        {"today+broker: Claim + Publish (mock Kafka) + MarkSent",
         [&] { fill_today(); return DrainTodayWithBroker(url, batch, rows, publish); }, {}},
        {"log store+broker: the built store's Claim + Publish (mock Kafka) + MarkSent",
         [&] { fill_store(); return DrainLogStore(admin, url, batch, rows, publish, &store_broker); }, {}},
        {"pipeline floor: keyset read of a primary-key-only copy + Publish, no bookkeeping",
         [&] { fill_log(); return DrainFloor(url, batch, rows, publish); }, {}},
        {"bare DELETE ... RETURNING of the outbox's rows, no broker",
         [&] { fill_today(); return DrainCeiling(admin, kToday, batch, rows); }, {}},
    };
  }
  // --store 2: the read in pos order proposed after step 4, beside the built
  // store, the floor and the bare DELETE (the index it reads is added after the
  // fill, untimed, so the other methods' plans are not changed).
  LogStats pos_bare, pos_broker, pos_four, store_four;
  if (f.Int("store") == 2) {
    auto fill_store = [&] {
      FillLog(admin, url, kStore, rows, aggregates, payload, f.Int("per-tx"));
    };
    // The schema first, empty (the stores share its slots), then its events.
    auto empty_store = [&] { FillLog(admin, url, kStore, 0, 1, 1, 1); };
    auto fill_shared = [&] {
      MustExec(admin, "CALL " + kStore + ".fill(" + std::to_string(rows) + ", " +
                          std::to_string(f.Int("per-tx")) + ", " +
                          std::to_string(aggregates) + ", " + std::to_string(payload) +
                          ")");
      MustExec(admin, "VACUUM ANALYZE " + kStore + ".log, " + kStore + ".slots");
      MustExec(admin, "CHECKPOINT");
    };
    auto fill_pos = [&] {
      fill_log();
      MustExec(admin, "CREATE INDEX log_pos_slot ON " + kLog + ".log (pos, slot)");
      MustExec(admin, "VACUUM ANALYZE " + kLog + ".log");
    };
    methods = {
        {"log store+broker: the built store's Claim + Publish (mock Kafka) + MarkSent",
         [&] {
           fill_store();
           return DrainLogStore(admin, url, batch, rows, publish, &store_broker);
         },
         {}},
        {"log store+broker, 4 workers (the relay's default): four stores, each its share "
         "of the slots, one producer",
         [&] {
           empty_store();
           return DrainLogStoreWorkers(admin, url, batch, rows, publish, &store_four, 4,
                                       fill_shared);
         },
         {}},
        {"pos order: a page read from the (pos, slot) index + position update, no broker",
         [&] {
           fill_pos();
           return DrainLogByPos(url, batch, rows, nullptr, &pos_bare);
         },
         {}},
        {"pos order+broker: the same + Publish (mock Kafka)",
         [&] {
           fill_pos();
           return DrainLogByPos(url, batch, rows, publish, &pos_broker);
         },
         {}},
        {"pos order+broker, 4 workers: four sessions, each its quarter of the slots, one "
         "producer",
         [&] {
           fill_pos();
           return DrainLogWorkers(url, batch, rows, publish, &pos_four, 4, true);
         },
         {}},
        {"pipeline floor: keyset read of a primary-key-only copy + Publish, no "
         "bookkeeping",
         [&] {
           fill_log();
           return DrainFloor(url, batch, rows, publish);
         },
         {}},
        {"bare DELETE ... RETURNING of the outbox's rows, no broker",
         [&] {
           fill_today();
           return DrainCeiling(admin, kToday, batch, rows);
         },
         {}},
    };
  }
  for (int run = 0; run < runs; ++run) {
    // Alternate the order so no method always runs first (or last).
    std::vector<Method*> order;
    for (auto& m : methods) {
      if (f.Int("only") < 0 || &m - methods.data() == f.Int("only")) order.push_back(&m);
    }
    if (run % 2 == 1) std::reverse(order.begin(), order.end());
    for (Method* m : order) {
      m->rates.push_back(m->run());
      std::fprintf(stderr, "run %d: %s %.0f\n", run + 1, m->name.c_str(), m->rates.back());
    }
  }
  if (f.Int("only") >= 0) return 0;  // one method: no table to print
  if (f.Int("store") == 2) {
    // The floor and the bare DELETE are the last two methods.
    const double built = Median(methods[0].rates),
                 floor = Median(methods[methods.size() - 2].rates),
                 bare_delete = Median(methods.back().rates);
    std::printf(
        "| method (one session unless named) | median events/s | runs | / built store | "
        "/ floor | "
        "/ bare DELETE |\n|---|---|---|---|---|---|\n");
    for (const auto& m : methods) {
      std::printf("| %s | %.0f | %s | %.2f | %.2f | %.2f |\n", m.name.c_str(),
                  Median(m.rates), JoinRates(m.rates, " ").c_str(),
                  Median(m.rates) / built, Median(m.rates) / floor,
                  Median(m.rates) / bare_delete);
    }
    std::printf(
        "\nPosition writes (slot rows updated) per event, pos order: %.4f without the "
        "broker, %.4f "
        "with it, %.4f with 4 workers.\n",
        static_cast<double>(pos_bare.position_writes) /
            static_cast<double>(pos_bare.events),
        static_cast<double>(pos_broker.position_writes) /
            static_cast<double>(pos_broker.events),
        static_cast<double>(pos_four.position_writes) /
            static_cast<double>(pos_four.events));
    MustExec(admin, "DROP SCHEMA IF EXISTS " + kStore + " CASCADE");
    MustExec(admin, "DROP SCHEMA IF EXISTS " + kLog + " CASCADE");
    MustExec(admin, "DROP SCHEMA " + kToday + " CASCADE");
    PQfinish(admin);
    return 0;
  }
  const double claim_mark = Median(methods[0].rates),
               floor = Median(methods[f.Int("store") == 1 ? 4 : 9].rates);
  std::printf("| method (one session unless named) | median events/s | runs | / claim+mark | / floor |\n|---|---|---|---|---|\n");
  for (const auto& m : methods) {
    std::printf("| %s | %.0f | %s | %.2f | %.2f |\n", m.name.c_str(), Median(m.rates), JoinRates(m.rates, " ").c_str(),
                Median(m.rates) / claim_mark, Median(m.rates) / floor);
  }
  if (f.Int("store") == 1) {
    std::printf("\nRow writes (updates + deletes, every table of the log schema) per event: %.4f without "
                "the broker, %.4f with it, in %.1f and %.1f pages per run (today's store: 2, the claim and the "
                "mark).\n",
                static_cast<double>(store_bare.position_writes) / static_cast<double>(store_bare.events),
                static_cast<double>(store_broker.position_writes) / static_cast<double>(store_broker.events),
                static_cast<double>(store_bare.pages) / runs, static_cast<double>(store_broker.pages) / runs);
    MustExec(admin, "DROP SCHEMA IF EXISTS " + kStore + " CASCADE");
    MustExec(admin, "DROP SCHEMA IF EXISTS " + kLog + " CASCADE");
    MustExec(admin, "DROP SCHEMA " + kToday + " CASCADE");
    PQfinish(admin);
    return 0;
  }
  std::printf("\nPosition writes (slot rows updated) per event: %.4f without the broker, %.4f with it "
              "(pages of %d; today's store: 2 row writes per event, the claim and the mark).\n",
              static_cast<double>(bare_stats.position_writes) / static_cast<double>(bare_stats.events),
              static_cast<double>(broker_stats.position_writes) / static_cast<double>(broker_stats.events), batch);
  std::printf("With 2 workers: %.4f; with 4: %.4f (each worker's pages are smaller when the slots are shared out).\n",
              static_cast<double>(two_stats.position_writes) / static_cast<double>(two_stats.events),
              static_cast<double>(four_stats.position_writes) / static_cast<double>(four_stats.events));
  MustExec(admin, "DROP SCHEMA " + kLog + " CASCADE");
  MustExec(admin, "DROP SCHEMA " + kToday + " CASCADE");
  PQfinish(admin);
  return 0;
}
