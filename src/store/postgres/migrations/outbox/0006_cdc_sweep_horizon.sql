-- CDC: the sweeper leaves rows of transactions the stream has not passed (stream_progress horizon, stream_sweep_bound())
--
-- Version 6: the CDC sweeper leaves the rows of transactions the stream has
-- not passed. A row's created_at is its transaction's start, so a producer
-- transaction open longer than the margin committed rows "older" than the
-- stream's settled point that the stream had not read yet: the sweeper took
-- them and both published them (a copy per such event, absorbed by inboxes,
-- but the stream is meant to claim nothing).
--   - stream_progress gets a horizon: a snapshot every transaction visible in
--     which had committed before the stream's settled position. Each report
--     notes a candidate (a fresh snapshot and the WAL insert position after
--     it); once the stream has settled past that position, the candidate
--     becomes the horizon and a new one is noted. A transaction visible in a
--     snapshot had written its commit record before the position.
--   - stream_sweep_bound() returns the time bound's seq and the horizon;
--     claims take a row never claimed (attempts = 0) only when the transaction
--     that wrote it is visible in the horizon (xid_passed). Rows the relays
--     have written since (claimed, retried, failed) are the table's life cycle,
--     as before; a replayed row (attempts reset) waits for the horizon to pass
--     its replay (one or two status intervals).

ALTER TABLE {S}.stream_progress ADD COLUMN horizon pg_snapshot, ADD COLUMN candidate pg_snapshot,
                                ADD COLUMN candidate_lsn pg_lsn;
-- Whether the (32-bit) xid p_xid is visible in p_horizon: widened against
-- p_ref (the caller's snapshot xmax, a full xid no row it sees was written by
-- unless locked after an update: such a newer xid has not passed). Frozen xids
-- (below 3) are ancient: passed.
CREATE FUNCTION {S}.xid_passed(p_xid xid, p_ref bigint, p_horizon pg_snapshot) RETURNS boolean
  LANGUAGE sql IMMUTABLE
AS $fn$
  SELECT p_xid::text::bigint < 3
      OR (d BETWEEN 1 AND 2147483648
          AND coalesce(pg_visible_in_snapshot((p_ref - d)::text::xid8, p_horizon), false))
  FROM (SELECT (p_ref % 4294967296 - p_xid::text::bigint + 4294967296) % 4294967296 AS d) x
$fn$;
CREATE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
                                       OUT limit_seq bigint, OUT horizon pg_snapshot)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
AS $fn$
DECLARE
  v_before timestamptz;
BEGIN
  IF p_margin_ms IS NULL THEN
    RETURN;  -- no bound
  END IF;
  SELECT min(p.covered_until) INTO v_before FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond';
  IF v_before IS NULL THEN
    RETURN;  -- no live stream: sweep everything that is due
  END IF;
  -- The oldest horizon of the live streams; none yet (NULL) comes first.
  SELECT p.horizon INTO horizon FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond'
  ORDER BY p.horizon IS NOT NULL, pg_snapshot_xmax(p.horizon)::text::bigint LIMIT 1;
  v_before := v_before - p_margin_ms * interval '1 millisecond';
  SELECT o.seq INTO limit_seq FROM {S}.outbox o
  WHERE o.status IN ('PENDING', 'PROCESSING') AND o.created_at >= v_before
  ORDER BY o.seq LIMIT 1;
  limit_seq := coalesce(limit_seq, 9223372036854775807);
END
$fn$;

CREATE OR REPLACE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint,
                                  p_sweep_margin_ms bigint, p_stale_ms bigint)
  RETURNS TABLE (seq bigint, event_id text, aggregate_type text, aggregate_id text,
                 event_type text, payload bytea, headers text, dedup_key text, attempts integer,
                 lease_token bigint, status text, created_us bigint, age_us bigint)
  LANGUAGE plpgsql VOLATILE
  -- A queue table's statistics are stale by nature (it fills and drains between
  -- ANALYZE runs); with stale stats the planner picks hash or nested-loop-over-
  -- seq-scan anti joins, or bitmap scans plus a sort, that read every unsent
  -- row per claim. The claim is only ever good as ordered index walks that stop
  -- early, so say so.
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
  v_seqs bigint[] := '{}';
  v_bytes bigint := 0;  -- payload bytes taken so far (octet_length reads no TOAST)
  v_run bigint[];
  v_run_bytes bigint;
  h record;
  -- An explicit cursor, fetched one row at a time: a FOR loop over a query
  -- prefetches rows, and here each prefetched row is a probe, so a claim that
  -- already had its batch walked on through every row held behind a hot
  -- aggregate (measured: 9,500 probes, 340 ms, for a claim that needed one head).
  heads refcursor;
  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it
  v_horizon pg_snapshot;  -- and, of rows never claimed, only those committed in it
  v_bounded boolean;
  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
  SELECT b.limit_seq, b.horizon INTO v_limit_seq, v_horizon
  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms) b;
  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound
  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);
  OPEN heads NO SCROLL FOR
    SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts,
           octet_length(o.payload)::bigint AS len, o.xmin AS row_xid
    FROM {S}.outbox o
    WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
      -- A correlated scalar subquery, not NOT EXISTS: the planner may not turn
      -- it into a join, so it is always one index probe per candidate row.
      AND (SELECT e.seq FROM {S}.outbox e
           WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
             AND e.seq < o.seq AND e.status NOT IN ('SENT', 'SKIPPED')
             AND (p_failed_holds OR e.status <> 'FAILED')
           LIMIT 1) IS NULL
    ORDER BY o.seq
    LIMIT p_batch  -- never more heads than rows; also makes the planner walk the index
    FOR UPDATE OF o SKIP LOCKED;
  LOOP
    FETCH heads INTO h;
    EXIT WHEN NOT FOUND;
    EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order
    CONTINUE WHEN v_bounded AND h.attempts = 0
                  AND NOT {S}.xid_passed(h.row_xid, v_ref, v_horizon);  -- the stream's
    -- The byte bound: always at least one row, then stop before going over.
    EXIT WHEN cardinality(v_seqs) > 0 AND v_bytes + h.len > p_max_bytes;
    v_seqs := v_seqs || h.seq;
    v_bytes := v_bytes + h.len;
    EXIT WHEN cardinality(v_seqs) >= p_batch;
    IF h.attempts < p_max_attempts THEN
      SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}'), coalesce(max(w.run_bytes), 0)
        INTO v_run, v_run_bytes
      FROM (
        SELECT i.seq, bool_and(i.ok) OVER (ORDER BY i.seq) AS prefix_ok,
               sum(i.len) OVER (ORDER BY i.seq) AS run_bytes
        FROM (
          SELECT x.seq, octet_length(x.payload)::bigint AS len,
                 (x.status IN ('PENDING', 'PROCESSING') AND x.available_at <= now()
                  AND x.attempts < p_max_attempts AND x.seq < v_limit_seq
                  AND (NOT v_bounded OR x.attempts > 0
                       OR {S}.xid_passed(x.xmin, v_ref, v_horizon))) AS ok
          FROM {S}.outbox x
          WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
            AND x.seq > h.seq AND x.status NOT IN ('SENT', 'SKIPPED')
            AND (p_failed_holds OR x.status <> 'FAILED')
          ORDER BY x.seq
          LIMIT p_batch - cardinality(v_seqs)
        ) i
      ) w
      WHERE w.prefix_ok AND w.run_bytes <= p_max_bytes - v_bytes;
      v_seqs := v_seqs || v_run;
      v_bytes := v_bytes + v_run_bytes;
      EXIT WHEN cardinality(v_seqs) >= p_batch;
    END IF;
  END LOOP;
  CLOSE heads;
  IF cardinality(v_seqs) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH

token AS (SELECT nextval('{S}.lease_token_seq') AS t)
UPDATE {S}.outbox o SET
  status       = CASE WHEN o.attempts >= p_max_attempts THEN 'FAILED' ELSE 'PROCESSING' END,
  attempts     = CASE WHEN o.attempts >= p_max_attempts THEN o.attempts ELSE o.attempts + 1 END,
  lease_owner  = p_owner,
  lease_token  = token.t,
  available_at = now() + p_lease_ms * interval '1 millisecond',
  claimed_at   = now(),
  failed_at    = CASE WHEN o.attempts >= p_max_attempts THEN now() END,
  last_error   = CASE WHEN o.attempts >= p_max_attempts
                      THEN 'claimed ' || o.attempts || ' times without finishing (max_attempts '
                           || p_max_attempts || '); last error: ' || coalesce(o.last_error, 'none')
                      ELSE o.last_error END
FROM token
WHERE o.seq = ANY(v_seqs)
  AND o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
RETURNING o.seq, o.event_id::text, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
          o.headers::text, o.dedup_key, o.attempts, o.lease_token, o.status,
          (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_us,
          (extract(epoch FROM now() - o.created_at) * 1000000)::bigint AS age_us
;
END
$fn$;

DROP FUNCTION {S}.stream_sweep_limit(bigint, bigint);
