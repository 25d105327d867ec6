// The log store: the Store interface over migrations/log/ (see log_store.h
// and log_page.h for the shape; docs/design.md for the why).
#include "log_store.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <span>

#include "headers_json.h"
#include "log_page.h"
#include "migrate.h"
#include "records.h"
#include "session.h"
#include "sql.h"

namespace outbox::pg {

namespace {

// ---- The statements ({S} is the schema) ----

// $1 reader, $2 lease ms, $3 tokens held, $4 renew: renews the held slots and
// the reader's presence (when $4), then takes free or expired slots up to the
// fair share (the slots not retired: a retired slot, beyond a lowered count, has no
// owner and a lease that never expires; log_settings is not read, so that a count
// change, which locks it, does not stop the relays it waits for). A slot taken
// from a holder that never released it counts a
// restart (its own holder too, taking it back after its lease ran out: as a
// row store's claim counts an attempt, the store cannot tell a holder that
// died from one that stalled). Rows: ('r', slot, token) renewed; ('t', slot, token, hi,
// done_pos, restarts, lo, lo_pos, lo_bounds, hi_lo_pos, hi_pos, hi_bounds) taken;
// ('s', share).
constexpr const char* kLease = R"SQL(
WITH me AS (
  INSERT INTO {S}.readers AS r (reader, expires_at)
  SELECT $1, now() + $2::bigint * interval '1 millisecond' WHERE $4
  ON CONFLICT (reader) DO UPDATE SET expires_at = excluded.expires_at
  RETURNING 1),
gone AS (  -- readers dead for an hour that hold no slot (their progress is folded)
  DELETE FROM {S}.readers d WHERE $4 AND d.reader <> $1
    AND d.expires_at < now() - interval '1 hour' AND NOT EXISTS (SELECT 1 FROM {S}.slots o WHERE o.owner = d.reader)),
share AS (
  SELECT ceil((SELECT count(*) FROM {S}.slots WHERE expires_at <> 'infinity')::numeric /
              ((SELECT count(*) FROM {S}.readers WHERE reader <> $1 AND expires_at > now()) + 1))::int AS n),
renewed AS (
  UPDATE {S}.slots s SET expires_at = now() + $2::bigint * interval '1 millisecond'
  WHERE $4 AND s.owner = $1 AND s.expires_at > now() AND s.token = ANY($3::bigint[])
  RETURNING s.slot, s.token),
free AS (
  SELECT f.slot FROM {S}.slots f
  WHERE f.expires_at <= now()
  ORDER BY f.slot
  LIMIT greatest(0, (SELECT n FROM share) -
                   (SELECT count(*) FROM {S}.slots m
                    WHERE m.owner = $1 AND m.expires_at > now() AND m.token = ANY($3::bigint[])))
  FOR UPDATE SKIP LOCKED),
taken AS (
  UPDATE {S}.slots s SET owner = $1, token = nextval('{S}.lease_token_seq'),
    expires_at = now() + $2::bigint * interval '1 millisecond',
    lo = p.lo, hi = p.hi, done_pos = p.done_pos, lo_pos = p.lo_pos, lo_bounds = p.lo_bounds,
    hi_lo_pos = p.hi_lo_pos, hi_pos = p.hi_pos, hi_bounds = p.hi_bounds,
    restarts = s.restarts + CASE WHEN s.owner IS NOT NULL AND EXISTS (
      SELECT 1 FROM {S}.unpassed(s.slot, p.lo, p.hi, p.done_pos, p.lo_pos, p.lo_bounds, 1))
      THEN 1 ELSE 0 END
  FROM free JOIN {S}.positions p ON p.slot = free.slot
  WHERE s.slot = free.slot
  RETURNING s.slot, s.token, s.hi::text AS hi, s.done_pos, s.restarts, s.lo::text AS lo,
    s.lo_pos, s.lo_bounds, s.hi_lo_pos, s.hi_pos, s.hi_bounds)
SELECT 'r', slot::text, token::text, NULL, '0', '0', NULL, NULL, NULL, NULL, NULL, NULL
FROM renewed
UNION ALL SELECT 't', slot::text, token::text, hi, done_pos::text, restarts::text, lo,
  lo_pos::text, lo_bounds::text, hi_lo_pos::text, hi_pos::text, hi_bounds::text FROM taken
UNION ALL SELECT 's', n::text, '0', NULL, '0', '0', NULL, NULL, NULL, NULL, NULL, NULL FROM share
)SQL";

// $1 slots, $2 tokens: gives the slots back (a clean stop: no restart
// counted), their positions folded from the reader's progress into their rows.
constexpr const char* kRelease = R"SQL(
UPDATE {S}.slots s SET owner = NULL, expires_at = now(), lo = p.lo, hi = p.hi,
  done_pos = p.done_pos, lo_pos = p.lo_pos, lo_bounds = p.lo_bounds, hi_lo_pos = p.hi_lo_pos,
  hi_pos = p.hi_pos, hi_bounds = p.hi_bounds
FROM unnest($1::smallint[], $2::bigint[]) m(slot, token)
JOIN {S}.positions p ON p.slot = m.slot AND p.token = m.token
WHERE s.slot = m.slot AND s.token = m.token
)SQL";

// $1 slot, $2 token: the slot's crash loop is over (its range had nothing left).
constexpr const char* kNoRestarts = R"SQL(
UPDATE {S}.slots SET restarts = 0 WHERE slot = $1::smallint AND token = $2::bigint
)SQL";

// $1 slots, $2 tokens: the slots whose lease the tokens still hold.
constexpr const char* kFence = R"SQL(
SELECT s.slot::text FROM {S}.slots s
JOIN unnest($1::smallint[], $2::bigint[]) m(slot, token) ON s.slot = m.slot AND s.token = m.token
)SQL";

// The columns of a handed-out event (both reads): pos, event_id, type, id,
// event type, payload, headers, dedup key, slot, txid, created (µs), age (µs).
std::string EventColumns(const std::string& t) {
  return t + ".pos::text, " + t + ".event_id::text, " + t + ".aggregate_type, " + t +
         ".aggregate_id, " + t + ".event_type, " + t + ".payload, " + t +
         ".headers::text, " + t + ".dedup_key, " + t +
         ".slot::text, (extract(epoch FROM " + t +
         ".created_at) * 1000000)::bigint::text, (extract(epoch FROM now() - " + t +
         ".created_at) * 1000000)::bigint::text";
}

// $1 slots, $2 tokens, $3 batch, $4 reader, $5 max_attempts, $6 failed holds,
// $7 ordered, $8 lease ms: the due exceptions of the held slots (a retry, or an event
// held behind one), in pos order, each only when no earlier exception of its aggregate
// must go first: one not due yet, one still in flight under this slot's token (its
// claimer gave its page up, its lease runs on), or a FAILED one when it holds; one
// claimed max_attempts times becomes FAILED. Rows: the event columns, then attempts
// and whether it expired to FAILED.
const std::string kClaimExceptions = std::string(R"SQL(
WITH cand AS (
  SELECT x.pos, x.aggregate_type, x.aggregate_id, x.attempts >= $5 AS expire, m.token
  FROM {S}.exceptions x
  JOIN unnest($1::smallint[], $2::bigint[]) m(slot, token) ON m.slot = x.slot
  JOIN {S}.slots s ON s.slot = m.slot AND s.token = m.token
  WHERE x.status IN ('RETRY', 'HELD') AND x.next_attempt_at <= now()
    AND (x.lease_until IS NULL OR x.lease_until <= now() OR x.lease_token IS DISTINCT FROM m.token)
    AND (NOT $7 OR NOT EXISTS (
      SELECT 1 FROM {S}.exceptions y
      WHERE y.aggregate_type = x.aggregate_type AND y.aggregate_id = x.aggregate_id
        AND y.pos < x.pos AND y.status <> 'SENT'
        AND ((y.status IN ('RETRY', 'HELD') AND
              (y.next_attempt_at > now() OR (y.lease_until > now() AND y.lease_token = m.token)))
             OR (y.status = 'FAILED' AND $6))))
  ORDER BY x.pos LIMIT $3
  FOR UPDATE OF x),
pick AS (
  SELECT c.pos, c.expire, c.token FROM cand c
  WHERE NOT ($7 AND $6 AND EXISTS (
    SELECT 1 FROM cand d WHERE d.expire AND d.aggregate_type = c.aggregate_type
      AND d.aggregate_id = c.aggregate_id AND d.pos < c.pos))),
upd AS (
  UPDATE {S}.exceptions x SET
    attempts = x.attempts + CASE WHEN p.expire THEN 0 ELSE 1 END,
    claimed_at = now(), lease_owner = $4, lease_token = p.token,
    lease_until = CASE WHEN p.expire THEN NULL ELSE now() + $8::bigint * interval '1 millisecond' END,
    status = CASE WHEN p.expire THEN 'FAILED' ELSE x.status END,
    failed_at = CASE WHEN p.expire THEN now() ELSE x.failed_at END,
    last_error = CASE WHEN p.expire
      THEN 'claimed ' || x.attempts || ' times without finishing (max_attempts); last error: ' ||
           coalesce(x.last_error, 'none')
      ELSE x.last_error END
  FROM pick p WHERE x.pos = p.pos
  RETURNING x.*, p.expire)
SELECT )SQL") + EventColumns("upd") +
                                     R"SQL(, upd.attempts::text, upd.expire::text
FROM upd ORDER BY upd.pos
)SQL";

// A new upper end for the ranges a claim opens (the log set's open_range(),
// version 7): the snapshot, the pos sequence read before and after it, and the
// transactions that may be running at it (comma-separated).
constexpr const char* kOpenRange = R"SQL(
SELECT hi, pos_before::text, pos_after::text, array_to_string(running, ',')
FROM {S}.open_range()
)SQL";

// $1 slots, $2 tokens, $3 los, $4 his, $5 the pos after which each range is read,
// $6 hi_pos (NULL: none), $7-$10 the stragglers (slot, txid, from, to), $11
// limit, $12 failed holds, $13 ordered: a page of the held slots' ranges, in pos
// order (the log set's read_range(), version 7: one index range scan on (pos,
// slot)). Rows: the event columns, then txid and whether it is held.
constexpr const char* kReadRange = R"SQL(
SELECT * FROM {S}.read_range($1::smallint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[],
                             $6::bigint[], $7::smallint[], $8::text[], $9::bigint[],
                             $10::bigint[], $11::integer, $12::boolean, $13::boolean)
)SQL";

// $1 cuts, $2 reader, $3 progress: a page's end, the positions (the common
// part of the two statements below). When a slot of the page's cuts still has
// its lease under the cut's token (`moved`, under a share lock on the slot's
// row: the fence), the reader's progress row is written — one row per page,
// whatever the slots it covers (the log set's version 3: positions): $3, the
// page's slots' new positions ({slot: {token, lo, hi, done, ...}}: PositionJson),
// computed by the store from the positions it holds: the view `positions` is not read,
// version 6), merged into the row's entries still under their slots' tokens and owned by
// this reader (an expired lease not yet renewed or taken keeps its entry). A slot out of
// its crash loop has its restarts reset on its own row (a write only then).
const std::string kPageEndCtes = R"SQL(
c AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS c(slot smallint, token bigint, reset boolean)),
held AS (  -- the fence: a take-over (an UPDATE of the row) waits for this page end,
           -- or this page end, once it committed, sees its new token and is refused
  SELECT s.slot, s.restarts FROM {S}.slots s JOIN c ON s.slot = c.slot AND s.token = c.token
  FOR SHARE OF s),
moved AS (
  SELECT c.*, h.restarts FROM c JOIN held h ON h.slot = c.slot),
prog AS (
  INSERT INTO {S}.readers AS r (reader, expires_at, progress)
  SELECT $2, now(), $3::jsonb WHERE EXISTS (SELECT 1 FROM moved)
  ON CONFLICT (reader) DO UPDATE SET progress = (
    SELECT coalesce(jsonb_object_agg(e.k, e.v), '{}'::jsonb)
    FROM jsonb_each(r.progress) e(k, v)
    JOIN {S}.slots s ON s.slot = e.k::smallint AND s.token = (e.v ->> 'token')::bigint
                    AND s.owner = r.reader) || excluded.progress
  RETURNING 1),
reset AS (
  UPDATE {S}.slots s SET restarts = 0 FROM moved m
  WHERE m.reset AND m.restarts <> 0 AND s.slot = m.slot AND s.token = m.token
  RETURNING 1)
)SQL";

// $1 cuts, $2 reader, $3 progress, $4 exceptions to copy (JSON): a page's end, in one
// statement: the positions (kPageEndCtes), and the events of the slots that
// moved copied into the exceptions table. Rows: the slots moved.
const std::string kEndPage = "WITH " + kPageEndCtes + R"SQL(,
x AS (
  SELECT * FROM jsonb_to_recordset($4::jsonb)
    AS x(pos bigint, slot smallint, txid text, status text, attempts int, delay_ms bigint,
         error text)),
ins AS (
  INSERT INTO {S}.exceptions (pos, slot, part, event_id, aggregate_type, aggregate_id,
                              event_type, payload, headers, dedup_key, created_at, status,
                              attempts, next_attempt_at, last_error, lease_owner, claimed_at,
                              failed_at)
  SELECT l.pos, l.slot, l.part, l.event_id, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
         l.headers, l.dedup_key, l.created_at, x.status, x.attempts,
         now() + x.delay_ms * interval '1 millisecond', x.error, $2,
         CASE WHEN x.status = 'HELD' THEN NULL ELSE now() END,
         CASE WHEN x.status = 'FAILED' THEN now() END
  FROM x JOIN {S}.log l ON l.slot = x.slot AND l.txid = x.txid::xid8 AND l.pos = x.pos
  WHERE x.slot IN (SELECT slot FROM moved)
  ON CONFLICT (pos) DO NOTHING
  RETURNING 1)
SELECT slot::text FROM moved
)SQL";

// $1 cuts, $2 reader, $3 progress: a page's end with nothing to copy (the happy path): the
// positions alone, planned without the log's partitions.
const std::string kMovePositions = "WITH " + kPageEndCtes + "SELECT slot::text FROM moved";

// $1 settlements (JSON: pos, token, outcome sent|retry|failed, counts,
// delay_ms, error): exception events handed out, settled under their slot's
// token while still in flight (lease_until set by the claim). Idempotent: the
// same statement run again (its first run committed, its reply was lost) finds
// them settled under the same token with the same outcome, changes nothing
// (a non-counting retry does not give its attempt back twice) and returns them
// as settled. Rows: the positions settled.
constexpr const char* kSettleExceptions = R"SQL(
WITH v AS (
  SELECT v.*, CASE v.outcome WHEN 'sent' THEN 'SENT' WHEN 'failed' THEN 'FAILED' ELSE 'RETRY' END
           AS status
  FROM jsonb_to_recordset($1::jsonb)
         AS v(pos bigint, token bigint, outcome text, counts boolean, delay_ms bigint, error text)),
upd AS (
  UPDATE {S}.exceptions x SET
    status = v.status,
    sent_at = CASE WHEN v.outcome = 'sent' THEN now() ELSE x.sent_at END,
    failed_at = CASE WHEN v.outcome = 'failed' THEN now() ELSE x.failed_at END,
    next_attempt_at = CASE WHEN v.outcome = 'retry'
                           THEN now() + v.delay_ms * interval '1 millisecond' ELSE x.next_attempt_at END,
    attempts = greatest(0, x.attempts - CASE WHEN v.outcome = 'retry' AND NOT v.counts THEN 1 ELSE 0 END),
    last_error = CASE WHEN v.outcome = 'sent' THEN x.last_error ELSE v.error END,
    lease_until = NULL
  FROM v, {S}.slots s
  WHERE x.pos = v.pos AND s.slot = x.slot AND s.token = v.token AND x.status IN ('RETRY', 'HELD')
    AND x.lease_until IS NOT NULL AND x.lease_token = v.token
  RETURNING x.pos),
again AS (
  SELECT x.pos FROM {S}.exceptions x
  JOIN v ON x.pos = v.pos
  JOIN {S}.slots s ON s.slot = x.slot AND s.token = v.token
  WHERE x.lease_until IS NULL AND x.lease_token = v.token AND x.status = v.status)
SELECT pos::text FROM upd UNION ALL SELECT pos::text FROM again
)SQL";

// The events no slot has passed yet (each slot's unpassed(), by pos, as the
// read): for the gauges, which must not read the events already sent.
constexpr const char* kUnsent = R"SQL(
unsent AS (
  SELECT l.pos, l.created_at FROM {S}.positions s
  CROSS JOIN LATERAL {S}.unpassed(s.slot, s.lo, s.hi, s.done_pos, s.lo_pos, s.lo_bounds) l
  WHERE NOT EXISTS (SELECT 1 FROM {S}.exceptions z WHERE z.pos = l.pos))
)SQL";

// The gauges' counts. Processing: the exceptions a relay has in flight (a retry
// or a held event claimed again, under its lease), as the view shows them; an
// event in a page of the log is pending (nothing is written per claim).
const std::string kStats = std::string("WITH ") + kUnsent + R"SQL(,
open AS (SELECT created_at, coalesce(lease_until > now(), false) AS busy FROM {S}.exceptions
         WHERE status IN ('RETRY', 'HELD'))
SELECT ((SELECT count(*) FROM unsent) + (SELECT count(*) FROM open WHERE NOT busy))::text,
  (SELECT count(*) FROM open WHERE busy)::text,
  (SELECT count(*) FROM {S}.exceptions WHERE status = 'FAILED')::text,
  (SELECT count(*) FROM {S}.exceptions WHERE status = 'SKIPPED')::text,
  coalesce(greatest(0, extract(epoch FROM now() - least((SELECT min(created_at) FROM unsent),
                                                      (SELECT min(created_at) FROM open))) * 1000),
           0)::bigint::text,
  (SELECT count(*) FROM (
     SELECT DISTINCT f.aggregate_type, f.aggregate_id FROM {S}.exceptions f
     WHERE f.status = 'FAILED' AND EXISTS (
       SELECT 1 FROM {S}.exceptions h WHERE h.aggregate_type = f.aggregate_type
         AND h.aggregate_id = f.aggregate_id AND h.pos > f.pos AND h.status IN ('RETRY', 'HELD'))) a)::text
)SQL";

const std::string kOldestUnsent = std::string("WITH ") + kUnsent + R"SQL(
SELECT (extract(epoch FROM t) * 1000000)::bigint::text FROM (
  SELECT least((SELECT min(created_at) FROM unsent),
               (SELECT min(created_at) FROM {S}.exceptions
                WHERE status IN ('RETRY', 'HELD', 'FAILED'))) AS t) m
WHERE t IS NOT NULL
)SQL";

// $1 event id, $2 aggregate id, $3 event type, $4 dry run.
constexpr const char* kReplay = R"SQL(
WITH sel AS (
  SELECT x.pos, x.aggregate_type, x.aggregate_id, x.created_at FROM {S}.exceptions x
  WHERE x.status = 'FAILED' AND ($1 = '' OR x.event_id::text = lower($1))
    AND ($2 = '' OR x.aggregate_id = $2) AND ($3 = '' OR x.event_type = $3)),
back AS (
  UPDATE {S}.exceptions x SET status = 'RETRY', attempts = 0, next_attempt_at = now(),
    last_error = 'replayed; was: ' || coalesce(x.last_error, '')
  FROM sel WHERE x.pos = sel.pos AND NOT $4 RETURNING x.pos),
behind AS (
  UPDATE {S}.exceptions h SET attempts = 0
  FROM (SELECT DISTINCT aggregate_type, aggregate_id, min(pos) OVER (PARTITION BY aggregate_type, aggregate_id) AS p
        FROM sel) a
  WHERE NOT $4 AND h.aggregate_type = a.aggregate_type AND h.aggregate_id = a.aggregate_id
    AND h.pos > a.p AND h.status IN ('RETRY', 'HELD')
  RETURNING h.pos)
SELECT (SELECT count(*) FROM sel)::text, (SELECT count(*) FROM back)::text,
       (SELECT count(*) FROM behind)::text,
       coalesce(extract(epoch FROM now() - (SELECT min(created_at) FROM sel))::bigint, 0)::text
)SQL";

// $1 event id, $2 by, $3 reason, $4 dry run: an exception (FAILED, or waiting:
// RETRY or HELD) becomes SKIPPED; an event not read yet gets a SKIPPED copy,
// which the read then passes over. Rows: was, skipped, released. An event with
// no exception in a slot a live relay leases may be in that relay's page (the
// log writes nothing per claim; a relay with relay.ordered off hands out even
// an event behind an open exception of its aggregate): it is PROCESSING, as a
// claimed row is, and is not skipped. The slot's row is share-locked until the
// skip commits, so no relay takes a free slot meanwhile (a lease's take skips
// locked slots): the first read after it sees the SKIPPED copy.
constexpr const char* kSkip = R"SQL(
WITH k AS (
  SELECT CASE WHEN $1 ~ '^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$'
              THEN $1::uuid END AS id),
target AS (
  SELECT l.pos, l.slot, l.txid, l.event_id FROM k JOIN {S}.log l
    ON l.pos = {S}.pos_for(k.id) AND l.event_id = k.id
  UNION ALL  -- an exception kept after its partition was rotated away
  SELECT x.pos, x.slot, NULL::xid8, x.event_id FROM k JOIN {S}.exceptions x
    ON x.pos = {S}.pos_for(k.id) AND x.event_id = k.id AND x.log_gone),
lease AS MATERIALIZED (
  SELECT o.slot, o.owner IS NOT NULL AND o.expires_at > now() AS live FROM {S}.slots o
  WHERE o.slot IN (SELECT slot FROM target) FOR SHARE),
state AS (
  SELECT t.pos, coalesce(CASE WHEN x.status IN ('RETRY', 'HELD') AND x.lease_until > now()
                              THEN 'PROCESSING'
                              WHEN x.status IN ('RETRY', 'HELD') THEN 'PENDING'
                              ELSE x.status END,
                         CASE WHEN t.txid IS NULL OR {S}.passed(t.txid, t.pos, s.lo, s.hi, s.done_pos)
                              THEN 'SENT'
                              WHEN (SELECT live FROM lease WHERE lease.slot = t.slot)
                              THEN 'PROCESSING'
                              ELSE 'PENDING' END) AS was,
         x.pos IS NOT NULL AS has_row
  FROM target t JOIN {S}.positions s ON s.slot = t.slot LEFT JOIN {S}.exceptions x ON x.pos = t.pos),
upd AS (
  UPDATE {S}.exceptions x SET status = 'SKIPPED', skipped_at = now(), skipped_by = $2,
    skip_reason = $3
  FROM state WHERE NOT $4 AND state.has_row AND x.pos = state.pos
    AND state.was IN ('FAILED', 'PENDING') RETURNING x.pos),
ins AS (
  INSERT INTO {S}.exceptions (pos, slot, part, event_id, aggregate_type, aggregate_id,
                              event_type, payload, headers, dedup_key, created_at, status,
                              skipped_at, skipped_by, skip_reason)
  SELECT l.pos, l.slot, l.part, l.event_id, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
         l.headers, l.dedup_key, l.created_at, 'SKIPPED', now(), $2, $3
  FROM state JOIN {S}.log l ON l.pos = state.pos
  WHERE NOT $4 AND NOT state.has_row AND state.was = 'PENDING'
  ON CONFLICT (pos) DO NOTHING RETURNING pos)
SELECT coalesce((SELECT was FROM state), ''),
       ((SELECT count(*) FROM upd) + (SELECT count(*) FROM ins))::text, '0'
)SQL";

// $1 key: the event whose id is $1 (its pos is in the id, or in converted_ids
// for an event converted from a row store: the (pos, slot) index finds it) or whose dedup
// key is $1.
const std::string kFind = R"SQL(
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, status, attempts,
       extract(epoch FROM now() - created_at)::float8 AS age_s,
       coalesce(dedup_key, '') AS dedup_key, coalesce(last_error, '') AS last_error,
       coalesce(lease_owner, '') AS lease_owner, created_at::text AS created_at,
       coalesce(claimed_at::text, '') AS claimed_at, coalesce(sent_at::text, '') AS sent_at,
       coalesce(failed_at::text, '') AS failed_at, coalesce(skipped_at::text, '') AS skipped_at,
       coalesce(skipped_by, '') AS skipped_by, coalesce(skip_reason, '') AS skip_reason,
       headers::text, octet_length(payload), substring(payload from 1 for 4096)
FROM {S}.outbox
CROSS JOIN (SELECT CASE WHEN $1 ~ '^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$'
                        THEN $1::uuid END AS id) k
WHERE seq = ANY(ARRAY(SELECT {S}.pos_for(k.id) WHERE k.id IS NOT NULL
                      UNION ALL SELECT d.pos FROM {S}.dedup d WHERE d.dedup_key = $1))
  AND (event_id = k.id OR dedup_key = $1)
ORDER BY seq
)SQL";

// Rotation, by time: producers write the ring's current partition
// (log_settings.cur). It moves on once it has been current for a share of the
// retention ($1 s over ring - 2) and holds events, to the next partition if that
// one is empty. Rows: cur, next, whether it is due.
constexpr const char* kRotationDue = R"SQL(
SELECT c.cur::text, ((c.cur + 1) % c.ring)::text,
       (now() - p.opened_at >= $1::bigint * interval '1 second' / (c.ring - 2))::text
FROM {S}.log_settings c JOIN {S}.log_parts p ON p.part = c.cur
)SQL";

// Whether partition %P holds no (committed) event.
constexpr const char* kPartitionEmpty =
    "SELECT (NOT EXISTS (SELECT 1 FROM {S}.log_%P))::text";

// $1 cur, $2 next: the move, once (two purges at once: the second finds cur moved).
constexpr const char* kMoveOn = R"SQL(
WITH sw AS (UPDATE {S}.log_settings SET cur = $2::smallint WHERE cur = $1::smallint RETURNING cur),
closed AS (UPDATE {S}.log_parts SET closed_at = now()
           WHERE part = $1::smallint AND EXISTS (SELECT 1 FROM sw))
UPDATE {S}.log_parts SET opened_at = now(), closed_at = NULL
WHERE part = $2::smallint AND EXISTS (SELECT 1 FROM sw)
)SQL";

// The partitions rotation may empty: not the current one, closed at least the
// retention $1 ago (so their events are that old: a transaction still open at
// the move may add one a little later). Rows: part.
constexpr const char* kRotatable = R"SQL(
SELECT p.part::text FROM {S}.log_parts p, {S}.log_settings c
WHERE p.part <> c.cur AND p.closed_at <= now() - $1::bigint * interval '1 second'
ORDER BY p.closed_at
)SQL";

// Whether every slot's position has passed every event of partition %P (the
// log set's partition_passed(), version 8: per slot by pos, from its lo_pos and
// its stragglers' spans; no scan of the partition's heap: the check runs again
// under its lock).
constexpr const char* kPartitionPassed = R"SQL(
SELECT {S}.partition_passed(%P::smallint)::text
)SQL";

// The events of partition %P, for the purge's count: read up to a million,
// past that the planner's estimate.
constexpr const char* kPartitionRows = R"SQL(
SELECT CASE WHEN n < 1000000 THEN n
            ELSE greatest(n, (SELECT reltuples::bigint FROM pg_class
                              WHERE oid = '{S}.log_%P'::regclass)) END::text
FROM (SELECT count(*) AS n FROM (SELECT 1 FROM {S}.log_%P LIMIT 1000000) l) c
)SQL";

// $1 part: after its partition was truncated (same transaction, under its
// lock), the dedup keys and SENT copies of its events go, with the converted
// ids of the events no copy lists any more, and the other copies are marked as
// having lost their log row. Rows: how many events stay listed from their copy
// (FAILED, SKIPPED, a retry): not purged.
constexpr const char* kForgetPartition = R"SQL(
WITH d AS (DELETE FROM {S}.dedup WHERE part = $1::smallint),
x AS (DELETE FROM {S}.exceptions WHERE status = 'SENT' AND part = $1::smallint),
c AS (DELETE FROM {S}.converted_ids c WHERE c.part = $1::smallint AND NOT EXISTS (
        SELECT 1 FROM {S}.exceptions y WHERE y.pos = c.pos AND y.status <> 'SENT')),
g AS (UPDATE {S}.exceptions SET log_gone = true
      WHERE status <> 'SENT' AND part = $1::smallint AND NOT log_gone RETURNING 1)
SELECT count(*)::text FROM g
)SQL";

// `text` with each %P replaced by a partition's number.
std::string ForPartition(std::string text, const std::string& part) {
  for (std::size_t at = text.find("%P"); at != std::string::npos;
       at = text.find("%P", at)) {
    text.replace(at, 2, part);
  }
  return text;
}

std::string Text(std::int64_t v) { return std::to_string(v); }

std::string SmallintArray(const std::vector<int>& v) {
  std::vector<std::int64_t> w(v.begin(), v.end());
  return Int64ArrayLiteral(w);
}

// A store's reader name, unique across processes and hosts: the owner (the
// relay id) first (operators group by it), then the pid, a per-process
// sequence and a random nonce drawn for the store. Without the nonce two
// relays given the same `relay.id` in containers, where both run as pid 1,
// were one reader: each took the other's slots for its own, and both read them.
std::string ReaderName(const std::string& owner) {
  static std::atomic<int> next{0};
  // Per store, not per process: a forked child draws its own.
  std::uint32_t nonce = 0;
  try {
    std::random_device rd;
    nonce = static_cast<std::uint32_t>(rd());
  } catch (const std::exception&) {  // no entropy source: the clock and an address
    const auto ticks = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    nonce = static_cast<std::uint32_t>(ticks ^ reinterpret_cast<std::uintptr_t>(&next));
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", nonce);
  return (owner.empty() ? std::string("relay") : owner) + "/" +
         std::to_string(::getpid()) + "." + std::to_string(next.fetch_add(1)) + "." + hex;
}

// A slot this store leases: the lease's token, and its range in flight.
struct HeldSlot {
  std::int64_t token = 0;
  // The range's lower end, whose events are done, as the store last wrote it
  // or read it when it took the slot.
  log::RangeEnd lo;
  // The range's upper end, once a page of it was done.
  std::optional<log::RangeEnd> hi;
  std::int64_t done_pos = 0;
  int restarts = 0;
};

// The slots a fenced statement returned (its first column): those it moved.
std::set<int> SlotColumn(const PGresult* r) {
  std::set<int> slots;
  for (int i = 0; i < PQntuples(r); ++i) slots.insert(static_cast<int>(GetInt64(r, i, 0)));
  return slots;
}

// `h`'s position as a page end writes it into the reader's progress (the view
// `positions` reads it back: the keys are the log set's, version 7).
nlohmann::json PositionJson(const HeldSlot& h) {
  nlohmann::json j = {
      {"token", h.token},          {"lo", h.lo.snapshot},       {"done", h.done_pos},
      {"lo_pos", h.lo.pos_before}, {"lo_bounds", h.lo.running}, {"hi", nullptr},
      {"hi_lo_pos", nullptr},      {"hi_pos", nullptr},         {"hi_bounds", nullptr}};
  if (h.hi) {
    j["hi"] = h.hi->snapshot;
    j["hi_lo_pos"] = h.hi->pos_before;
    if (h.hi->pos_after) j["hi_pos"] = *h.hi->pos_after;
    j["hi_bounds"] = h.hi->running;
  }
  return j;
}

// `h`'s position once the cut `c` is done: a finished range's hi becomes lo.
void Advance(HeldSlot* h, const log::SlotCut& c) {
  if (c.range_done) h->lo = c.hi;
  h->hi = c.range_done ? std::nullopt : std::optional<log::RangeEnd>(c.hi);
  h->done_pos = c.range_done ? 0 : c.done_pos;
}

// A range end's transactions and bounds from the JSON text of a slot's
// lo_bounds or hi_bounds ({"xid": bound}); anything else is an error (a bound
// read as none would lose a straggler's events).
Result<std::map<std::string, std::int64_t>> BoundsFromJson(const std::string& text) {
  const nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return Status::Internal("lease slots: a slot's bounds are not a JSON object: " +
                            text);
  std::map<std::string, std::int64_t> out;
  for (const auto& [xid, bound] : j.items()) {
    if (!bound.is_number_integer())
      return Status::Internal("lease slots: a slot's bound is not a number: " + text);
    out[xid] = bound.get<std::int64_t>();
  }
  return out;
}

// A slot taken over, from a row of kLease ('t'): its position as the
// `positions` view folded it. A range an earlier build opened has no hi_lo_pos:
// its upper end then keeps lo's pos_before and bounds (those of an earlier
// snapshot: the read covers more, never less) and has no pos_after.
Result<HeldSlot> TakenSlot(const PGresult* r, int i) {
  HeldSlot h;
  h.token = GetInt64(r, i, 2);
  h.done_pos = GetInt64(r, i, 4);
  h.restarts = static_cast<int>(GetInt64(r, i, 5));
  h.lo.snapshot = GetText(r, i, 6);
  h.lo.pos_before = GetInt64(r, i, 7);
  auto lo_bounds = BoundsFromJson(GetText(r, i, 8));
  if (!lo_bounds.ok()) return lo_bounds.status();
  h.lo.running = std::move(lo_bounds).value();
  if (auto hi = GetOptionalText(r, i, 3)) {
    log::RangeEnd end{*hi, h.lo.pos_before, std::nullopt, h.lo.running};
    if (!PQgetisnull(r, i, 9)) {
      end.pos_before = GetInt64(r, i, 9);
      auto hi_bounds =
          BoundsFromJson(PQgetisnull(r, i, 11) ? std::string("{}") : GetText(r, i, 11));
      if (!hi_bounds.ok()) return hi_bounds.status();
      end.running = std::move(hi_bounds).value();
    }
    if (!PQgetisnull(r, i, 10)) end.pos_after = GetInt64(r, i, 10);
    h.hi = std::move(end);
  }
  return h;
}

class LogStore final : public Store {
 public:
  LogStore(PostgresStoreOptions options, std::unique_ptr<Session> session)
      : options_(std::move(options)), session_(std::move(session)) {}

  ~LogStore() override {
    // The slots first (their positions are folded from the reader's progress
    // into their rows), then the reader, unless it still holds a slot (the
    // release failed: its progress is the slot's position until a taker folds it).
    (void)WriteDeferred();  // the release folds the reader's progress: write it first
    if (!held_.empty()) {
      std::vector<int> slots;
      std::vector<std::int64_t> tokens;
      for (const auto& [slot, h] : held_) slots.push_back(slot), tokens.push_back(h.token);
      (void)session_->Exec(
          "release slots", S(kRelease),
          {Param::Text(SmallintArray(slots)), Param::Text(Int64ArrayLiteral(tokens))});
    }
    if (!reader_.empty()) {
      (void)session_->Exec("leave",
                           S("DELETE FROM {S}.readers WHERE reader = $1 AND NOT EXISTS ("
                             "SELECT 1 FROM {S}.slots WHERE owner = $1)"),
                           {Param::Text(reader_)});
    }
  }

  Result<std::vector<int>> Migrate() override {
    std::vector<int> applied;
    OUTBOX_RETURN_IF_ERROR(
        RefuseOtherLayout(*session_, options_.schema, StoreLayout::kLog));
    OUTBOX_RETURN_IF_ERROR(RunMigrations(*session_, options_.schema, kLogSet, &applied));
    return applied;
  }

  Result<ClaimResult> Claim(const ClaimOptions& o) override {
    if (o.batch_size <= 0)
      return Status::InvalidArgument("claim: batch_size must be > 0");
    if (o.batch_bytes <= 0)
      return Status::InvalidArgument("claim: batch_bytes must be > 0");
    if (o.lease.count() < 0) return Status::InvalidArgument("claim: lease must be >= 0");
    if (o.max_attempts <= 0)
      return Status::InvalidArgument("claim: max_attempts must be > 0");
    // A page in flight holds its events as a lease holds rows: a claim hands
    // out nothing until it is settled, or until it is older than the lease —
    // then its claimer gave it up, and its events are read again (at least
    // once); nothing of it is written.
    const auto now = std::chrono::steady_clock::now();
    if (!page_.Empty() && now - page_at_ < o.lease) return ClaimResult{};
    if (!page_.Empty()) {
      look_.AtOnce();  // abandoned: its exceptions' leases ended with it
    }
    page_ = log::Page();
    page_at_ = now;
    if (reader_.empty()) reader_ = ReaderName(o.owner);
    lease_ = o.lease;
    if (now - written_at_ >= options_.log_position_every)
      OUTBOX_RETURN_IF_ERROR(WriteDeferred());
    OUTBOX_RETURN_IF_ERROR(Lease(o));
    ClaimResult out;
    // A claim hands out exceptions or a page of the log, never both: a page's
    // end (and a crash loop's FAILED) is then about log events only.
    Status st = look_.Due(std::chrono::steady_clock::now()) ? ClaimExceptions(o, &out)
                                                            : Status::Ok();
    if (st.ok() && out.events.empty() && out.expired_to_failed.empty() &&
        std::chrono::steady_clock::now() >= paused_until_) {
      st = ReadLog(o, o.batch_size, &out);
    }
    // Idle: the deferred positions are written now, so that others see them.
    if (st.ok() && out.events.empty() && out.expired_to_failed.empty()) st = WriteDeferred();
    if (!st.ok()) {  // nothing of a claim that failed half-way stays in flight
      page_ = log::Page();
      return st;
    }
    std::sort(out.events.begin(), out.events.end(),
              [](const ClaimedEvent& a, const ClaimedEvent& b) {
                return a.ticket.seq < b.ticket.seq;
              });
    return out;
  }

  Result<TransitionResult> MarkSent(std::span<const Ticket> tickets) override {
    std::vector<Settlement> s;
    for (const Ticket& t : tickets) s.push_back({t, log::Outcome::kSent, true, 0, {}});
    return Settle(s);
  }

  Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) override {
    std::vector<Settlement> s;
    for (const RescheduleItem& it : items) {
      s.push_back({it.ticket, log::Outcome::kRetry, it.attempt_counts,
                   std::max<std::int64_t>(0, it.delay.count()), SafeText(it.error)});
    }
    return Settle(s);
  }

  Result<TransitionResult> MarkFailed(std::span<const FailItem> items) override {
    std::vector<Settlement> s;
    for (const FailItem& it : items) {
      s.push_back({it.ticket, log::Outcome::kFailed, true, 0, SafeText(it.error)});
    }
    return Settle(s);
  }

  Result<bool> WaitForWork(std::chrono::milliseconds timeout) override {
    return WaitForNotify(*session_, "outbox_" + options_.schema, &listening_on_, timeout);
  }

  bool ClaimsSeeEveryRow() const override { return false; }  // its slots' only

  Result<std::int64_t> PurgeSent(std::chrono::seconds retention, int batch) override;
  // Rotation's move to the next partition, when due (kRotationDue).
  Status MoveOnIfDue(std::chrono::seconds retention);

  Result<StoreStats> Stats() override {
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    auto res = session_->Exec("stats", S(kStats));
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    StoreStats s;
    s.pending = GetInt64(r, 0, 0);
    s.processing = GetInt64(r, 0, 1);
    s.failed = GetInt64(r, 0, 2);
    s.skipped = GetInt64(r, 0, 3);
    s.oldest_unsent_age = std::chrono::milliseconds(GetInt64(r, 0, 4));
    s.held_aggregates = GetInt64(r, 0, 5);
    return s;
  }

  Result<std::int64_t> CountSent() override {
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    auto res = session_->Exec("count sent",
                              S("SELECT count(*) FROM {S}.outbox WHERE status = 'SENT'"));
    if (!res.ok()) return res.status();
    return GetInt64(res->get(), 0, 0);
  }

  Result<ReplayCounts> ReplayFailed(const ReplaySelection& sel) override {
    if (!IsValidText(sel.event_id) || !IsValidText(sel.aggregate_id) ||
        !IsValidText(sel.event_type)) {
      return Status::InvalidArgument(
          "replay: --event-id, --aggregate and --type must be text");
    }
    auto res = session_->Exec(
        "replay", S(kReplay),
        {Param::Text(sel.event_id), Param::Text(sel.aggregate_id),
         Param::Text(sel.event_type), Param::Text(sel.dry_run ? "true" : "false")});
    if (!res.ok()) return res.status();
    look_.AtOnce();  // what it released is due now (another process's: within a second)
    ReplayCounts c;
    c.matched = GetInt64(res->get(), 0, 0);
    c.replayed = GetInt64(res->get(), 0, 1);
    c.released = GetInt64(res->get(), 0, 2);
    c.oldest_age = std::chrono::seconds(GetInt64(res->get(), 0, 3));
    return c;
  }

  Result<SkipResult> Skip(const SkipRequest& req) override {
    if (req.event_id.empty())
      return Status::InvalidArgument("skip: event id is required");
    if (!IsValidText(req.event_id))
      return Status::InvalidArgument("skip: event id must be text");
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    auto res = session_->Exec(
        "skip", S(kSkip),
        {Param::Text(req.event_id), Param::Text(SafeText(req.by)),
         Param::Text(SafeText(req.reason)), Param::Text(req.dry_run ? "true" : "false")});
    if (!res.ok()) return res.status();
    look_.AtOnce();  // the aggregate's later events may be released
    SkipResult r;
    r.was = GetText(res->get(), 0, 0);
    r.skipped = GetInt64(res->get(), 0, 1);
    r.released = GetInt64(res->get(), 0, 2);
    return r;
  }

  Result<std::optional<std::chrono::system_clock::time_point>> OldestUnsent() override {
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    auto res = session_->Exec("oldest unsent", S(kOldestUnsent));
    if (!res.ok()) return res.status();
    if (PQntuples(res->get()) == 0)
      return std::optional<std::chrono::system_clock::time_point>();
    return std::optional<std::chrono::system_clock::time_point>(
        std::chrono::system_clock::time_point(
            std::chrono::microseconds(GetInt64(res->get(), 0, 0))));
  }

  Result<std::vector<EventRecord>> List(const ListFilter& f) override {
    if (!IsValidText(f.state) || !IsValidText(f.aggregate_id) ||
        !IsValidText(f.event_type)) {
      return Status::InvalidArgument(
          "list: --state, --aggregate and --type must be text");
    }
    if (f.limit < 1) return Status::InvalidArgument("list: limit must be >= 1");
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    return EventRecords(session_->Exec(
        "list", sql::List(options_.schema),
        {Param::Text(f.state), Param::Text(f.aggregate_id), Param::Text(f.event_type),
         Param::Text(std::to_string(f.older_than.count())),
         Param::Text(std::to_string(f.limit))}));
  }

  Result<std::vector<EventRecord>> Find(const std::string& key) override {
    if (!IsValidText(key)) return Status::InvalidArgument("trace: the key must be text");
    OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
    return EventRecords(session_->Exec("trace", S(kFind), {Param::Text(key)}));
  }

  // The log keeps no send time per event: the minutes count the exceptions'
  // sends and failures, the relays are the slots' holders.
  Result<ActivityReport> RecentActivity(std::chrono::seconds window) override {
    auto res = session_->Exec("recent activity", S(R"SQL(
SELECT 'm', (floor(extract(epoch FROM t) / 60)::bigint * 60)::text,
       count(*) FILTER (WHERE sent)::text, count(*) FILTER (WHERE NOT sent)::text, NULL
FROM (SELECT sent_at AS t, true AS sent FROM {S}.exceptions WHERE status = 'SENT'
      UNION ALL SELECT failed_at, false FROM {S}.exceptions WHERE status = 'FAILED') e
WHERE t >= now() - $1::bigint * interval '1 second' GROUP BY 2
UNION ALL
SELECT 'r', split_part(owner, '/', 1), max(expires_at)::text, '0', 'claims' FROM {S}.slots
WHERE owner IS NOT NULL AND expires_at >= now() - $1::bigint * interval '1 second'
GROUP BY 2 ORDER BY 1, 2)SQL"),
                              {Param::Text(std::to_string(window.count()))});
    if (!res.ok()) return res.status();
    const PGresult* r = res->get();
    ActivityReport out;
    for (int i = 0; i < PQntuples(r); ++i) {
      if (GetText(r, i, 0) == "m") {
        out.minutes.push_back({GetInt64(r, i, 1), GetInt64(r, i, 2), GetInt64(r, i, 3)});
      } else {
        out.relays.push_back({GetText(r, i, 1), GetText(r, i, 4), GetText(r, i, 2), 0});
      }
    }
    return out;
  }

 private:
  struct Settlement {
    Ticket ticket;
    log::Outcome outcome;
    bool counts;
    std::int64_t delay_ms;
    std::string error;
  };

  std::string S(const std::string& text) const {
    return sql::WithSchema(text, options_.schema);
  }
  static std::string SafeText(const std::string& s) { return sql::StorableText(s, 4000); }

  Status Lease(const ClaimOptions& o);
  Status ClaimExceptions(const ClaimOptions& o, ClaimResult* out);
  Status ReadLog(const ClaimOptions& o, int room, ClaimResult* out);
  Status ReadSlots(const ClaimOptions& o, const std::vector<int>& slots, int limit,
                   bool split, ClaimResult* out);
  // A new upper end for the ranges a claim opens (kOpenRange): the end without
  // its bounds (each slot's come from RunningAt), and the transactions that may
  // be running at it.
  struct Opened {
    log::RangeEnd end;
    std::vector<std::string> running;
  };
  Result<Opened> OpenRange();
  // A page of `slots`' ranges, at most `limit` rows (kReadRange); `his` gets
  // each slot's upper end (a range not open yet is opened).
  Result<ResultPtr> ReadRanges(const ClaimOptions& o, const std::vector<int>& slots,
                               int limit, std::map<int, log::RangeEnd>* his);
  // Hands out the first `*used` rows of `r`, fewer when batch_bytes stops it
  // (`*used` then says how many); `slots` gets the slots of the rows covered.
  Status TakePage(const PGresult* r, std::int64_t batch_bytes, int* used,
                  std::set<int>* slots, ClaimResult* out);
  Result<std::set<int>> EndPage();
  // Whether a page end may leave its positions unwritten (options_.log_position_every):
  // only one whose events were all sent (no `exceptions`: page.Exceptions()), within the
  // interval, under a fresh lease.
  bool MayDefer(const log::Page& page, std::span<const log::Entry> exceptions) const;
  // Writes the positions of the slots whose page ends were deferred (unwritten_);
  // a slot refused by its fence is no longer held.
  Status WriteDeferred();
  // The same before a read of positions by this store (stats, list, trace, skip,
  // rotation), unless a page is in flight: a slot refused then would leave the
  // page unfinished; the read sees the positions last written.
  Status WriteBeforeRead() { return page_.Empty() ? WriteDeferred() : Status::Ok(); }
  // The deferred slots but `except`, added to a page end's cuts and progress.
  void AddDeferred(const std::set<int>& except, nlohmann::json* cuts,
                   nlohmann::json* progress) const;
  // After a write: the deferred slots but `except` not in `written` are no longer held.
  void ForgetDeferred(const std::set<int>& except, const std::set<int>& written);
  // The positions of `page`'s slots once its cuts are applied: {slot:
  // PositionJson} (what a page end writes, from the positions the store holds).
  nlohmann::json ProgressAfter(const log::Page& page) const;
  Result<TransitionResult> Settle(const std::vector<Settlement>& items);
  // An exception written or settled at `now` with `outcome`: when the next look
  // for due exceptions must run (a retry when due; its aggregate's later ones at once).
  void NoteException(log::Outcome outcome, std::int64_t delay_ms,
                     std::chrono::steady_clock::time_point now) {
    if (outcome == log::Outcome::kRetry) {
      look_.RetryAt(now + std::chrono::milliseconds(delay_ms));
    } else {
      look_.AtOnce();
    }
  }
  Result<std::set<int>> Fenced(const std::set<int>& slots);

  PostgresStoreOptions options_;
  std::unique_ptr<Session> session_;
  PGconn* listening_on_ = nullptr;
  std::string reader_;  // the relay id, made unique per store: the slots' owner
  std::map<int, HeldSlot> held_;
  // Held slots whose position in held_ is ahead of the reader's row: their page
  // ends were deferred (MayDefer), written by the next call after the interval.
  std::set<int> unwritten_;
  // Held slots whose lo moved over an empty range: written with the next write
  // of positions (a page end's, or the deferred ones'), never on their own.
  std::set<int> quiet_;
  // The slots whose positions the reader's row does not have yet: both sets.
  std::set<int> Unwritten() const {
    std::set<int> slots = unwritten_;
    slots.insert(quiet_.begin(), quiet_.end());
    return slots;
  }
  std::chrono::steady_clock::time_point written_at_{};
  std::chrono::milliseconds lease_{0};  // the last claim's
  log::Page page_;
  log::ExceptionLook look_;  // when a claim looks for due exceptions
  // How often a store holding slots looks for free ones and for other readers.
  static constexpr std::chrono::milliseconds kLookEvery{1000};
  std::chrono::steady_clock::time_point renewed_at_{};
  std::chrono::steady_clock::time_point looked_at_{};
  std::chrono::steady_clock::time_point page_at_{};  // when the page in flight was read
  std::chrono::steady_clock::time_point paused_until_{};
};

Status LogStore::Lease(const ClaimOptions& o) {
  const auto now = std::chrono::steady_clock::now();
  // The lease and the reader's presence are written at a tenth of the lease,
  // not per claim (a claim's page so holds at least 0.9 of relay.lease_ms); the share
  // (free slots, other readers) is looked at every kLookEvery while the store holds
  // slots, at every claim while it holds none.
  const bool renew = renewed_at_ == std::chrono::steady_clock::time_point{} ||
                     now - renewed_at_ >= o.lease / 10;
  if (!renew && !held_.empty() && now - looked_at_ < kLookEvery) return Status::Ok();
  looked_at_ = now;
  // A renewal may take a lapsed slot again from its folded position: the
  // reader's row must hold it (the look alone takes free slots only).
  if (renew) OUTBOX_RETURN_IF_ERROR(WriteDeferred());
  std::vector<std::int64_t> tokens;
  for (const auto& [slot, h] : held_) tokens.push_back(h.token);
  auto res = session_->Exec(
      "lease slots", S(kLease),
      {Param::Text(reader_), Param::Text(Text(o.lease.count())),
       Param::Text(Int64ArrayLiteral(tokens)), Param::Text(renew ? "true" : "false")});
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  std::map<int, HeldSlot> kept = renew ? std::map<int, HeldSlot>() : held_;
  int share = 0;
  for (int i = 0; i < PQntuples(r); ++i) {
    const std::string kind = GetText(r, i, 0);
    const int slot = static_cast<int>(GetInt64(r, i, 1));
    if (kind == "s") {
      share = slot;
    } else if (kind == "r") {
      if (auto it = held_.find(slot); it != held_.end()) kept[slot] = it->second;
    } else {
      look_.AtOnce();  // its former holder may have left exceptions
      auto h = TakenSlot(r, i);
      if (!h.ok()) return h.status();
      kept[slot] = std::move(h).value();
    }
  }
  if (renew) renewed_at_ = now;
  held_ = std::move(kept);
  // More than the fair share (another relay came): the highest slots go back.
  if (share > 0 && static_cast<int>(held_.size()) > share) {
    // A slot given back has its position folded from the reader's row.
    OUTBOX_RETURN_IF_ERROR(WriteDeferred());
    std::vector<int> slots;
    std::vector<std::int64_t> give;
    while (static_cast<int>(held_.size()) > share) {
      auto last = std::prev(held_.end());
      slots.push_back(last->first);
      give.push_back(last->second.token);
      held_.erase(last);
    }
    return session_
        ->Exec("release slots", S(kRelease),
               {Param::Text(SmallintArray(slots)), Param::Text(Int64ArrayLiteral(give))})
        .status();
  }
  return Status::Ok();
}

ClaimedEvent EventFromRow(const PGresult* r, int i, int attempts) {
  ClaimedEvent ce;
  ce.event_id = GetText(r, i, 1);
  ce.event.aggregate_type = GetText(r, i, 2);
  ce.event.aggregate_id = GetText(r, i, 3);
  ce.event.event_type = GetText(r, i, 4);
  ce.event.payload = GetText(r, i, 5);  // binary result: the raw bytes
  ce.event.dedup_key = GetOptionalText(r, i, 7);
  ce.attempts = attempts;
  ce.created_at =
      std::chrono::system_clock::time_point(std::chrono::microseconds(GetInt64(r, i, 9)));
  ce.age_at_claim =
      std::chrono::microseconds(std::max<std::int64_t>(0, GetInt64(r, i, 10)));
  return ce;
}

Status LogStore::ClaimExceptions(const ClaimOptions& o, ClaimResult* out) {
  if (held_.empty()) return Status::Ok();
  std::vector<int> slots;
  std::vector<std::int64_t> tokens;
  for (const auto& [slot, h] : held_) slots.push_back(slot), tokens.push_back(h.token);
  // Before the statement: a retry that comes due while it runs is looked for again.
  const auto looked_at = std::chrono::steady_clock::now();
  auto res = session_->Exec(
      "claim exceptions", S(kClaimExceptions),
      {Param::Text(SmallintArray(slots)), Param::Text(Int64ArrayLiteral(tokens)),
       Param::Text(Text(o.batch_size)), Param::Text(SafeText(reader_)),
       Param::Text(Text(o.max_attempts)),
       Param::Text(o.failed_holds_aggregate ? "true" : "false"),
       Param::Text(o.ordered ? "true" : "false"), Param::Text(Text(o.lease.count()))},
      {}, /*result_format=*/1);
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  look_.Looked(looked_at, PQntuples(r) > 0);
  // Those handed out are due again when their lease ends, if not settled by then.
  if (PQntuples(r) > 0) look_.RetryAt(std::chrono::steady_clock::now() + o.lease);
  for (int i = 0; i < PQntuples(r); ++i) {
    const std::int64_t pos = GetInt64(r, i, 0);
    if (GetText(r, i, 12) == "true") {
      out->expired_to_failed.push_back(pos);
      continue;
    }
    ClaimedEvent ce = EventFromRow(r, i, static_cast<int>(GetInt64(r, i, 11)));
    auto headers = store_common::ParseHeadersJson(GetText(r, i, 6));
    if (!headers.ok()) return headers.status();
    ce.event.headers = std::move(headers).value();
    const int slot = static_cast<int>(GetInt64(r, i, 8));
    ce.ticket = Ticket{pos, held_[slot].token};
    log::Entry e;
    e.pos = pos;
    e.slot = slot;
    e.exception = true;
    page_.Add(e);
    out->events.push_back(std::move(ce));
  }
  return Status::Ok();
}

Status LogStore::ReadLog(const ClaimOptions& o, int room, ClaimResult* out) {
  // A slot in a crash loop is read alone, with its smaller limit; one found
  // with nothing left to read leaves the loop.
  // (A page's end may drop a slot whose lease was lost: the loop runs over a copy.)
  std::vector<std::pair<int, int>> held;  // slot, restarts
  for (const auto& [slot, h] : held_) held.emplace_back(slot, h.restarts);
  std::vector<int> slots;
  for (const auto& [slot, restarts] : held) {
    if (restarts < o.max_attempts) {
      slots.push_back(slot);
      continue;
    }
    OUTBOX_RETURN_IF_ERROR(
        ReadSlots(o, {slot}, log::PageLimit(restarts - 1, o.max_attempts, o.batch_size),
                  /*split=*/true, out));
    if (!out->events.empty() || !out->expired_to_failed.empty() || !page_.Empty())
      return Status::Ok();
    auto it = held_.find(slot);
    if (it == held_.end()) continue;
    OUTBOX_RETURN_IF_ERROR(
        session_
            ->Exec("slot out of its crash loop", S(kNoRestarts),
                   {Param::Text(Text(slot)), Param::Text(Text(it->second.token))})
            .status());
    it->second.restarts = 0;
    slots.push_back(slot);
  }
  if (slots.empty()) return Status::Ok();
  return ReadSlots(o, slots, room, /*split=*/false, out);
}

Result<LogStore::Opened> LogStore::OpenRange() {
  auto res = session_->Exec("open range", S(kOpenRange));
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  Opened out;
  out.end.snapshot = GetText(r, 0, 0);
  out.end.pos_before = GetInt64(r, 0, 1);
  out.end.pos_after = GetInt64(r, 0, 2);
  const std::string running = GetText(r, 0, 3);
  for (std::size_t at = 0; at < running.size();) {
    const std::size_t comma = std::min(running.find(',', at), running.size());
    out.running.push_back(running.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

Result<ResultPtr> LogStore::ReadRanges(const ClaimOptions& o,
                                       const std::vector<int>& slots, int limit,
                                       std::map<int, log::RangeEnd>* his) {
  std::optional<Opened> fresh;  // one new upper end for every range opened now
  for (int slot : slots) {
    const HeldSlot& h = held_.at(slot);  // the caller passes held slots only
    if (h.hi) {
      (*his)[slot] = *h.hi;
      continue;
    }
    if (!fresh) {
      auto opened = OpenRange();
      if (!opened.ok()) return opened.status();
      fresh = std::move(opened).value();
    }
    log::RangeEnd hi = fresh->end;
    hi.running = log::RunningAt(h.lo, fresh->running);
    (*his)[slot] = std::move(hi);
  }
  std::vector<std::int64_t> tokens, froms, x_slots, x_froms, x_tos;
  std::vector<std::string> los, hi_snapshots, x_txids;
  std::vector<std::optional<std::string>> hi_pos;
  for (int slot : slots) {
    const HeldSlot& h = held_.at(slot);
    const log::RangeEnd& hi = his->at(slot);
    const std::int64_t done = h.hi ? h.done_pos : 0;
    tokens.push_back(h.token);
    los.push_back(h.lo.snapshot);
    hi_snapshots.push_back(hi.snapshot);
    froms.push_back(std::max(h.lo.pos_before, done));
    hi_pos.push_back(hi.pos_after ? std::optional<std::string>(Text(*hi.pos_after))
                                  : std::nullopt);
    for (const log::Straggler& x : log::Stragglers(h.lo, done)) {
      x_slots.push_back(slot);
      x_txids.push_back(x.txid);
      x_froms.push_back(x.from);
      x_tos.push_back(x.to);
    }
  }
  return session_->Exec(
      "read log page", S(kReadRange),
      {Param::Text(SmallintArray(slots)), Param::Text(Int64ArrayLiteral(tokens)),
       Param::Text(TextArrayLiteral(std::span<const std::string>(los))),
       Param::Text(TextArrayLiteral(std::span<const std::string>(hi_snapshots))),
       Param::Text(Int64ArrayLiteral(froms)),
       Param::Text(TextArrayLiteral(std::span<const std::optional<std::string>>(hi_pos))),
       Param::Text(Int64ArrayLiteral(x_slots)),
       Param::Text(TextArrayLiteral(std::span<const std::string>(x_txids))),
       Param::Text(Int64ArrayLiteral(x_froms)), Param::Text(Int64ArrayLiteral(x_tos)),
       Param::Text(Text(limit)), Param::Text(o.failed_holds_aggregate ? "true" : "false"),
       Param::Text(o.ordered ? "true" : "false")},
      {}, /*result_format=*/1);
}

Status LogStore::ReadSlots(const ClaimOptions& o, const std::vector<int>& all, int limit,
                           bool split, ClaimResult* out) {
  // The slots still held (a page end earlier in this claim may have lost one).
  std::vector<int> slots;
  for (int slot : all) {
    if (held_.count(slot)) slots.push_back(slot);
  }
  if (slots.empty()) return Status::Ok();
  // One row past the page tells whether the ranges go on after it.
  std::map<int, log::RangeEnd> his;
  auto res = ReadRanges(o, slots, limit + 1, &his);
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  const int rows = PQntuples(r);
  const int slot0 = slots.front();
  // The crash loop's check: the event its last holder died with stood alone
  // (`limit` is the page its last holder died in).
  if (split && log::KillerStandsAlone(held_[slot0].restarts, o.max_attempts,
                                      std::min(rows, limit))) {
    log::Entry e;
    e.pos = GetInt64(r, 0, 0);
    e.slot = slot0;
    e.txid = GetText(r, 0, 11);
    e.attempts = held_[slot0].restarts;
    page_.Add(e);
    page_.Settle(e.pos, log::Outcome::kFailed, true, 0,
                 "the relay stopped with this event in flight " +
                     std::to_string(held_[slot0].restarts) +
                     " times (max_attempts); it was published alone last time");
    page_.Cut({slot0, held_[slot0].token, his.at(slot0), e.pos, rows == 1, true});
    auto moved = EndPage();
    if (!moved.ok()) return moved.status();
    if (moved->count(slot0)) out->expired_to_failed.push_back(e.pos);
    return Status::Ok();
  }
  if (split) limit = log::PageLimit(held_[slot0].restarts, o.max_attempts, o.batch_size);
  int used =
      std::min(limit, rows);  // rows the page covers (the bytes bound may stop it early)
  std::set<int> with_rows;
  OUTBOX_RETURN_IF_ERROR(TakePage(r, o.batch_bytes, &used, &with_rows, out));
  // Every range is read up to the page's last pos: each slot's position moves
  // there, its range done when no row is left after the page. One already
  // begun with nothing left is closed. One opened now with nothing in it moves
  // this store's lo without a write of its own (an idle claim writes nothing):
  // the next read of the slot starts from its pos_before, not from a lo_pos that
  // may be far behind (every page scans from the lowest of its slots'). The move
  // goes with the next write of positions (quiet_); until then the database
  // keeps the earlier lo, from which a taker reads the same nothing.
  const bool done = used == rows;
  const std::int64_t last = used > 0 ? GetInt64(r, used - 1, 0) : 0;
  for (int slot : slots) {
    HeldSlot& h = held_[slot];
    const bool reset = !split || done;
    if (!done) {
      page_.Cut({slot, h.token, his.at(slot), std::max(last, h.hi ? h.done_pos : 0),
                 false, reset});
    } else if (with_rows.count(slot) || h.hi) {
      page_.Cut({slot, h.token, his.at(slot), last, true, reset});
    } else {
      h.lo = his.at(slot);
      quiet_.insert(slot);
    }
  }
  if (page_.Complete()) {  // nothing handed out (all held or skipped, or an empty range
                           // closed)
    auto moved = EndPage();
    if (!moved.ok()) return moved.status();
  }
  return Status::Ok();
}

Status LogStore::TakePage(const PGresult* r, std::int64_t batch_bytes, int* used,
                          std::set<int>* slots, ClaimResult* out) {
  std::int64_t bytes = 0;
  for (int i = 0; i < *used; ++i) {
    const std::int64_t size = PQgetlength(r, i, 5);
    if (i > 0 && bytes + size > batch_bytes) {
      *used = i;  // this event and those after it wait for the next page
      break;
    }
    bytes += size;
    log::Entry e;
    e.pos = GetInt64(r, i, 0);
    e.slot = static_cast<int>(GetInt64(r, i, 8));
    e.txid = GetText(r, i, 11);
    slots->insert(e.slot);
    if (GetText(r, i, 12) == "true") {  // an earlier exception of its aggregate holds it
      page_.Hold(e);
      continue;
    }
    e.attempts = held_[e.slot].restarts + 1;
    ClaimedEvent ce = EventFromRow(r, i, e.attempts);
    auto headers = store_common::ParseHeadersJson(GetText(r, i, 6));
    if (!headers.ok()) return headers.status();
    ce.event.headers = std::move(headers).value();
    ce.ticket = Ticket{e.pos, held_[e.slot].token};
    page_.Add(e);
    out->events.push_back(std::move(ce));
  }
  return Status::Ok();
}

Result<std::set<int>> LogStore::EndPage() {
  log::Page page = std::move(page_);
  page_ = log::Page();
  std::set<int> moved;
  const std::vector<log::Entry> exceptions = page.Exceptions();
  if (page.WritesNothing()) {  // the broker was out: the same events are read again,
                               // later
    paused_until_ =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(page.MinDelayMs());
    for (const log::SlotCut& c : page.cuts()) moved.insert(c.slot);
    for (const log::Entry& e : exceptions) moved.insert(e.slot);
    return moved;
  }
  nlohmann::json cuts = nlohmann::json::array(), copies = nlohmann::json::array();
  for (const log::SlotCut& c : page.cuts())
    cuts.push_back({{"slot", c.slot}, {"token", c.token}, {"reset", c.reset}});
  for (const log::Entry& e : exceptions) {
    const char* status = e.outcome == log::Outcome::kHeld     ? "HELD"
                         : e.outcome == log::Outcome::kFailed ? "FAILED"
                                                              : "RETRY";
    copies.push_back(
        {{"pos", e.pos},
         {"slot", e.slot},
         {"txid", e.txid},
         {"status", status},
         {"attempts", e.outcome == log::Outcome::kHeld ? 0
                      : e.attempt_counts               ? e.attempts
                                                       : e.attempts - 1},
         {"delay_ms", e.delay_ms},
         {"error", e.error.empty() ? nlohmann::json() : nlohmann::json(e.error)}});
  }
  if (cuts.empty()) return moved;
  const auto now = std::chrono::steady_clock::now();
  // Held slots under a fresh lease: the fence would pass them.
  if (MayDefer(page, exceptions)) {
    for (const log::SlotCut& c : page.cuts()) {
      Advance(&held_.at(c.slot), c);
      unwritten_.insert(c.slot);
      moved.insert(c.slot);
    }
    return moved;
  }
  nlohmann::json progress = ProgressAfter(page);
  std::set<int> page_slots;
  for (const log::SlotCut& c : page.cuts()) page_slots.insert(c.slot);
  AddDeferred(page_slots, &cuts, &progress);  // they go with this write
  auto res =
      copies.empty()
          ? session_->Exec("end page", S(kMovePositions),
                           {Param::Text(cuts.dump()), Param::Text(reader_),
                            Param::Text(progress.dump())})
          : session_->Exec("end page", S(kEndPage),
                           {Param::Text(cuts.dump()), Param::Text(reader_),
                            Param::Text(progress.dump()), Param::Text(copies.dump())});
  if (!res.ok()) {  // the page stays in flight: the caller's retry of its settlement ends
                    // it
    page_ = std::move(page);
    return res.status();
  }
  const std::set<int> written = SlotColumn(res->get());
  written_at_ = now;
  // After the statement: a retry is due no sooner than the database's now() + delay.
  const auto noted_at = std::chrono::steady_clock::now();
  for (const log::Entry& e : exceptions) NoteException(e.outcome, e.delay_ms, noted_at);
  ForgetDeferred(page_slots, written);
  for (int slot : page_slots) {
    if (written.count(slot)) moved.insert(slot);
  }
  for (const log::SlotCut& c : page.cuts()) {
    auto it = held_.find(c.slot);
    if (it == held_.end()) continue;
    if (!moved.count(c.slot)) {  // the lease went to another relay
      held_.erase(it);
      continue;
    }
    HeldSlot& h = it->second;
    Advance(&h, c);
    if (c.reset) h.restarts = 0;
  }
  return moved;
}

nlohmann::json LogStore::ProgressAfter(const log::Page& page) const {
  nlohmann::json progress = nlohmann::json::object();
  for (const log::SlotCut& c : page.cuts()) {
    auto it = held_.find(c.slot);
    if (it == held_.end()) continue;  // not written: nothing of the slot is known here
    HeldSlot next = it->second;
    Advance(&next, c);
    next.token = c.token;
    progress[std::to_string(c.slot)] = PositionJson(next);
  }
  return progress;
}

bool LogStore::MayDefer(const log::Page& page,
                        std::span<const log::Entry> exceptions) const {
  const auto every = options_.log_position_every;
  const auto now = std::chrono::steady_clock::now();
  if (every.count() <= 0 || now - written_at_ >= every) return false;
  // A retry, failure or hold is copied into the exceptions at once, with the positions.
  if (!exceptions.empty()) return false;
  // Only early in the lease (renewed at renewed_at_): a page end within it is
  // not fenced out, and the next one, unless its round outlasts half the
  // lease (a publish that slow, an outage), writes before the lease can lapse.
  if (now + every >= renewed_at_ + lease_ / 2) return false;
  for (const log::SlotCut& c : page.cuts()) {
    auto it = held_.find(c.slot);
    if (it == held_.end() || it->second.token != c.token) return false;
    // A slot counting restarts is written at every page end: the crash-loop
    // check reads where its last holder's pages ended.
    if (it->second.restarts != 0) return false;
  }
  return true;
}

void LogStore::AddDeferred(const std::set<int>& except, nlohmann::json* cuts,
                           nlohmann::json* progress) const {
  for (int slot : Unwritten()) {
    auto it = held_.find(slot);
    if (except.count(slot) || it == held_.end()) continue;
    cuts->push_back({{"slot", slot}, {"token", it->second.token}, {"reset", false}});
    (*progress)[std::to_string(slot)] = PositionJson(it->second);
  }
}

void LogStore::ForgetDeferred(const std::set<int>& except, const std::set<int>& written) {
  for (int slot : Unwritten()) {
    if (except.count(slot) || written.count(slot)) continue;
    held_.erase(slot);  // refused by its fence: its lease went to another relay
  }
  unwritten_.clear();
  quiet_.clear();
}

Status LogStore::WriteDeferred() {
  if (unwritten_.empty()) return Status::Ok();
  nlohmann::json cuts = nlohmann::json::array(), progress = nlohmann::json::object();
  AddDeferred({}, &cuts, &progress);
  auto res = session_->Exec(
      "write positions", S(kMovePositions),
      {Param::Text(cuts.dump()), Param::Text(reader_), Param::Text(progress.dump())});
  if (!res.ok()) return res.status();  // kept: written by the next call
  const std::set<int> written = SlotColumn(res->get());
  written_at_ = std::chrono::steady_clock::now();
  ForgetDeferred({}, written);
  return Status::Ok();
}

Result<std::set<int>> LogStore::Fenced(const std::set<int>& slots) {
  std::vector<int> s;
  std::vector<std::int64_t> tokens;
  for (int slot : slots) {
    auto it = held_.find(slot);
    if (it == held_.end()) continue;
    s.push_back(slot);
    tokens.push_back(it->second.token);
  }
  if (s.empty()) return std::set<int>();
  auto res = session_->Exec(
      "fence", S(kFence),
      {Param::Text(SmallintArray(s)), Param::Text(Int64ArrayLiteral(tokens))});
  if (!res.ok()) return res.status();
  return SlotColumn(res->get());
}

Result<TransitionResult> LogStore::Settle(const std::vector<Settlement>& items) {
  static constexpr const char* kOutcomes[] = {"open", "sent", "retry", "failed", "held"};
  TransitionResult out;
  nlohmann::json xs = nlohmann::json::array();
  std::vector<const Settlement*> exceptions;  // settled in the page once their statement ran
  std::vector<Ticket> log_tickets;
  std::map<std::int64_t, int> slot_of;  // a log ticket's slot
  for (const Settlement& s : items) {
    const log::Entry* e = page_.Find(s.ticket.seq);
    const auto held = e ? held_.find(e->slot) : held_.end();
    if (e == nullptr || held == held_.end() || held->second.token != s.ticket.token ||
        e->outcome != log::Outcome::kOpen) {
      out.refused.push_back(s.ticket);
      continue;
    }
    if (e->exception) {
      exceptions.push_back(&s);
      xs.push_back({{"pos", s.ticket.seq},
                    {"token", s.ticket.token},
                    {"outcome", kOutcomes[static_cast<int>(s.outcome)]},
                    {"counts", s.counts},
                    {"delay_ms", s.delay_ms},
                    {"error", s.error}});
    } else {
      slot_of[s.ticket.seq] = e->slot;
      page_.Settle(s.ticket.seq, s.outcome, s.counts, s.delay_ms, s.error);
      log_tickets.push_back(s.ticket);
    }
  }
  // A statement that fails leaves this call's settlements open: the caller's
  // retry of the same call applies them (its end may have been written; writing
  // it again is harmless), instead of finding them settled and refusing them.
  auto reopen = [&] {
    for (const Ticket& t : log_tickets) page_.Reopen(t.seq);
  };
  if (!xs.empty()) {
    auto res = session_->Exec("settle exceptions", S(kSettleExceptions),
                              {Param::Text(xs.dump())});
    if (!res.ok()) {
      reopen();
      return res.status();
    }
    std::set<std::int64_t> done;
    for (int i = 0; i < PQntuples(res->get()); ++i)
      done.insert(GetInt64(res->get(), i, 0));
    const auto now = std::chrono::steady_clock::now();
    for (const Settlement* s : exceptions) {
      // Refused ones too: the slot went to another relay, this page is done with them.
      page_.Settle(s->ticket.seq, s->outcome, s->counts, s->delay_ms, s->error);
      if (done.count(s->ticket.seq)) {
        NoteException(s->outcome, s->delay_ms, now);
        ++out.applied;
      } else {
        out.refused.push_back(s->ticket);
      }
    }
  }
  // The page's end is written by the call that settles its last event; until
  // then a log event's settlement holds while its slot's lease does.
  std::set<int> slots;
  for (const auto& [seq, slot] : slot_of) slots.insert(slot);
  Result<std::set<int>> live = page_.Complete() ? EndPage() : Fenced(slots);
  if (!live.ok()) {
    reopen();
    return live.status();
  }
  for (const Ticket& t : log_tickets) {
    if (live->count(slot_of[t.seq])) {
      ++out.applied;
    } else {
      out.refused.push_back(t);
    }
  }
  return out;
}

Status LogStore::MoveOnIfDue(std::chrono::seconds retention) {
  const std::vector<Param> r = {Param::Text(Text(retention.count()))};
  auto due = session_->Exec("rotation: due", S(kRotationDue), r);
  if (!due.ok()) return due.status();
  if (PQntuples(due->get()) != 1 || GetText(due->get(), 0, 2) != "true")
    return Status::Ok();
  const std::string cur = GetText(due->get(), 0, 0), next = GetText(due->get(), 0, 1);
  // Not from an empty partition (nothing would go), not into a full one (the
  // ring is full: the retention outlasts it; the current one grows until the
  // next can be emptied).
  auto cur_empty =
      session_->Exec("rotation: current empty", S(ForPartition(kPartitionEmpty, cur)));
  if (!cur_empty.ok()) return cur_empty.status();
  auto next_empty =
      session_->Exec("rotation: next empty", S(ForPartition(kPartitionEmpty, next)));
  if (!next_empty.ok()) return next_empty.status();
  if (GetText(cur_empty->get(), 0, 0) == "true" ||
      GetText(next_empty->get(), 0, 0) != "true") {
    return Status::Ok();
  }
  return session_
      ->Exec("rotation: move on", S(kMoveOn), {Param::Text(cur), Param::Text(next)})
      .status();
}

Result<std::int64_t> LogStore::PurgeSent(std::chrono::seconds retention, int batch) {
  if (batch <= 0) return Status::InvalidArgument("purge: batch must be > 0");
  OUTBOX_RETURN_IF_ERROR(WriteBeforeRead());
  OUTBOX_RETURN_IF_ERROR(MoveOnIfDue(retention));
  auto parts = session_->Exec("rotation: partitions", S(kRotatable),
                              {Param::Text(Text(retention.count()))});
  if (!parts.ok()) return parts.status();
  std::int64_t removed = 0;
  for (int i = 0; i < PQntuples(parts->get()); ++i) {
    const std::string part = GetText(parts->get(), i, 0);
    const std::string check = ForPartition(kPartitionPassed, part);
    // First without the lock: the relays' reads touch every partition, and a
    // partition that does not qualify is not worth making them wait for.
    auto may = session_->Exec("rotation: look", S(check));
    if (!may.ok()) return may.status();
    if (GetText(may->get(), 0, 0) != "true") continue;
    auto count = session_->Exec("rotation: count", S(ForPartition(kPartitionRows, part)));
    if (!count.ok()) return count.status();
    const std::int64_t rows = GetInt64(count->get(), 0, 0);
    if (rows == 0) continue;
    // Under the partition's lock (a producer still committing into it makes the
    // lock wait, up to lock_timeout): check again, then empty it.
    Status st = session_->ExecScript(
        "rotation: lock", S("BEGIN; SET LOCAL lock_timeout = '2s'; LOCK TABLE {S}.log_" +
                            part + " IN ACCESS EXCLUSIVE MODE"));
    if (st.ok()) {
      auto res = session_->Exec("rotation: check", S(check));
      st = res.status();
      if (st.ok() && GetText(res->get(), 0, 0) == "true") {
        st = session_->ExecScript("rotation: truncate", S("TRUNCATE {S}.log_" + part));
        if (st.ok()) {
          auto kept = session_->Exec("rotation: keys and copies", S(kForgetPartition),
                                     {Param::Text(part)});
          st = kept.status();
          if (st.ok()) removed += rows - GetInt64(kept->get(), 0, 0);
        }
      }
    }
    if (!st.ok()) {  // a lock not had in time included: the session is left usable
      (void)session_->ExecScript("rotation: rollback", "ROLLBACK");
      return st;
    }
    OUTBOX_RETURN_IF_ERROR(session_->ExecScript("rotation: commit", "COMMIT"));
  }
  return removed;
}

}  // namespace

std::string SettleExceptionsStatement(const std::string& schema) {
  return sql::WithSchema(kSettleExceptions, schema);
}

Result<std::unique_ptr<Store>> OpenPostgresLogStore(const PostgresStoreOptions& options) {
  auto session = Session::ConnectFor("",
                                     {options.conninfo, options.connect_timeout,
                                      options.statement_timeout, "outbox-store"},
                                     options.schema);
  if (!session.ok()) return session.status();
  return std::unique_ptr<Store>(new LogStore(options, std::move(session).value()));
}

}  // namespace outbox::pg
