-- CDC: rows held behind a FAILED event stay out of the sweeper's window; stream_sweep_bound() hands its window to the claim
--
-- Version 8: rows held behind a FAILED event (on_failed = hold) are left out
-- of the sweeper's window. They wait for an operator, maybe for days; with
-- 2,000 of them oldest, version 7's window held nothing else, and a row another
-- aggregate needed swept (a retry, a row the stream handed back, the gap after
-- a lost slot) waited behind them while the stream was live. The aggregates
-- with a FAILED event are read once per call from the partial index of FAILED
-- rows and probed by hash; the walk still passes the held rows (no index skips
-- them), without a probe each (measured: 40 ms for 100,000 held rows). The
-- bound also hands its window to the claim, which walked the same rows again.
--
-- Version 8's tail. The two-argument stream_sweep_bound() stays: the
-- unordered claim uses it (a FAILED event holds nothing there, so no row is
-- held), and so does a relay of version 7 during an upgrade.

CREATE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
                                       p_failed_holds boolean,
                                       OUT limit_seq bigint, OUT horizon pg_snapshot,
                                       OUT window_seqs bigint[])
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET jit = off
  SET random_page_cost = 1.1  -- see claim_ordered(), version 9
AS $fn$
DECLARE
  v_before timestamptz;
  v_last bigint;
  v_walked bigint;
  v_seqs bigint[];
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
  SELECT min(w.seq) FILTER (WHERE w.created_at >= v_before), max(w.seq), count(*),
         coalesce(array_agg(w.seq ORDER BY w.seq), '{}')
    INTO limit_seq, v_last, v_walked, v_seqs
  FROM (SELECT o.seq, o.created_at FROM {S}.outbox o
        WHERE o.status IN ('PENDING', 'PROCESSING')
          -- Two sets, each read once and probed by hash: the aggregates with a
          -- FAILED event, and their unsent events before one (a head before
          -- its FAILED event stays in the window; there are rarely any).
          AND (NOT p_failed_holds
               OR (o.aggregate_type, o.aggregate_id) NOT IN (
                    SELECT f.aggregate_type, f.aggregate_id FROM {S}.outbox f
                    WHERE f.status = 'FAILED')
               OR o.seq IN (
                    SELECT e.seq FROM {S}.outbox f
                    JOIN {S}.outbox e
                      ON e.aggregate_type = f.aggregate_type AND e.aggregate_id = f.aggregate_id
                     AND e.seq < f.seq AND e.status NOT IN ('SENT', 'SKIPPED')
                    WHERE f.status = 'FAILED'))
        ORDER BY o.seq LIMIT 2000) w;
  limit_seq := coalesce(limit_seq,
                        CASE WHEN v_walked < 2000 THEN 9223372036854775807 ELSE v_last + 1 END);
  SELECT coalesce(array_agg(x ORDER BY x), '{}') INTO window_seqs
  FROM unnest(v_seqs) x WHERE x < limit_seq;
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
  v_window bigint[];  -- the sweeper's rows to look at (a live stream)
  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
  SELECT b.limit_seq, b.horizon, b.window_seqs INTO v_limit_seq, v_horizon, v_window
  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms, p_failed_holds) b;
  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound
  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);
  IF v_bounded THEN
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
  ELSE
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
  END IF;
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

ALTER FUNCTION {S}.claim_ordered(integer, text, bigint, integer, boolean, bigint, bigint, bigint)
  SET jit = off;
