-- claim_ordered(): the polling claim walks a window of the oldest unsent rows and finds heads beyond it by aggregate (a skip scan), not by walking the backlog
--
-- Version 9: the polling claim walks a window, and finds heads beyond it by
-- aggregate. Its cursor used to walk the unsent rows in seq order until it
-- had a batch of heads; when every aggregate's head was in another relay's
-- hands (few or hot aggregates, more workers than aggregates, a restart with
-- a backlog) it walked the whole backlog for nothing — measured: 1.2 s per
-- empty claim at 200,000 rows over 10 aggregates, again and again from every
-- idle worker. Now the cursor takes only the window (the oldest
-- greatest(2,000, 4 x batch) unsent rows, seq order, as before). Only when the
-- window gave nothing and there are unsent rows beyond it, a second pass
-- visits aggregates instead of rows: a skip scan over outbox_aggregate_idx
-- yields each aggregate's first unsent event — its head — in one index
-- descent per aggregate, for the first greatest(2,000, 4 x batch) aggregates
-- in key order (bounded, like the window: with a million one-event aggregates
-- it would otherwise visit them all); the heads past the window go in seq
-- order, locked with SKIP LOCKED, with their runs, as in the first pass. The
-- window always holds the oldest rows, so an aggregate the second pass does
-- not reach is served once its rows are among them. The CDC sweeper keeps
-- stream_sweep_bound()'s window and no second pass (the stream sends the rest).

CREATE OR REPLACE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint, p_sweep_margin_ms bigint, p_stale_ms bigint)
  RETURNS TABLE (seq bigint, event_id text, aggregate_type text, aggregate_id text,
                 event_type text, payload bytea, headers text, dedup_key text, attempts integer,
                 lease_token bigint, status text, created_us bigint, age_us bigint)
  LANGUAGE plpgsql VOLATILE
  -- Ordered index walks that stop early, or nothing (see version 2).
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET jit = off
  -- The table is cached. With the default 4 and statistics from before a
  -- backlog was sent, the planner answered "an earlier unsent event of this
  -- aggregate?" by walking the primary key through every SENT row when
  -- aggregates are few (one probe: 40 ms at 100,000 rows over 10 aggregates).
  SET random_page_cost = 1.1
AS $fn$
#variable_conflict use_column
DECLARE
  v_seqs bigint[] := '{}';
  v_bytes bigint := 0;  -- payload bytes taken so far (octet_length reads no TOAST)
  v_run bigint[];
  v_run_bytes bigint;
  h record;
  -- An explicit cursor, fetched one row at a time (a FOR loop prefetches, and
  -- each prefetched row is a probe).
  heads refcursor;
  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it
  v_horizon pg_snapshot;  -- and, of rows never claimed, only those committed in it
  v_bounded boolean;
  v_window bigint[];  -- the rows the first pass looks at
  v_size integer := greatest(2000, 4 * p_batch);
  v_beyond boolean := false;  -- unsent rows lie past the window (polling only)
  v_end bigint;
  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
  SELECT b.limit_seq, b.horizon, b.window_seqs INTO v_limit_seq, v_horizon, v_window
  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms, p_failed_holds) b;
  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound
  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);
  IF NOT v_bounded THEN
    SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}') INTO v_window
    FROM (SELECT o.seq FROM {S}.outbox o WHERE o.status IN ('PENDING', 'PROCESSING')
          ORDER BY o.seq LIMIT v_size) w;
    v_beyond := cardinality(v_window) >= v_size;
    v_end := v_window[cardinality(v_window)];
  END IF;
  FOR v_pass IN 1..2 LOOP
    IF v_pass = 2 THEN
      EXIT WHEN cardinality(v_seqs) > 0 OR NOT v_beyond;
      -- Each aggregate's head: the first entry of outbox_aggregate_idx after
      -- the previous aggregate's that is unsent (under hold FAILED counts: such
      -- a head is not claimable, and the cursor leaves it). The ORDER BY over
      -- the index's own columns keeps the planner on that index; the heads are
      -- sorted in the aggregate, not by a plan that would walk the table in
      -- seq order to avoid a sort.
      WITH RECURSIVE hd(t, i, s) AS (
        (SELECT x.aggregate_type, x.aggregate_id, x.seq FROM {S}.outbox x
         WHERE x.status NOT IN ('SENT', 'SKIPPED') AND (p_failed_holds OR x.status <> 'FAILED')
         ORDER BY x.aggregate_type, x.aggregate_id, x.seq LIMIT 1)
        UNION ALL
        SELECT n.aggregate_type, n.aggregate_id, n.seq FROM hd CROSS JOIN LATERAL (
          SELECT x.aggregate_type, x.aggregate_id, x.seq FROM {S}.outbox x
          WHERE x.status NOT IN ('SENT', 'SKIPPED') AND (p_failed_holds OR x.status <> 'FAILED')
            AND (x.aggregate_type, x.aggregate_id) > (hd.t, hd.i)
          ORDER BY x.aggregate_type, x.aggregate_id, x.seq LIMIT 1) n
      )
      SELECT coalesce(array_agg(h.s ORDER BY h.s), '{}') INTO v_window
      FROM (SELECT hd.s FROM hd LIMIT v_size) h  -- the recursion stops there
      WHERE h.s > v_end;
    END IF;
    -- Both passes: the candidates' heads in seq order, each locked or skipped.
    OPEN heads NO SCROLL FOR
      SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts,
             octet_length(o.payload)::bigint AS len, o.xmin AS row_xid
      FROM {S}.outbox o
      WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
        AND o.seq = ANY(v_window)
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
      -- A head the stream has not passed: it and the heads after it are the
      -- stream's for now (see migration 7).
      EXIT WHEN v_bounded AND h.attempts = 0
                AND NOT {S}.xid_passed(h.row_xid, v_ref, v_horizon);
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
  END LOOP;
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
