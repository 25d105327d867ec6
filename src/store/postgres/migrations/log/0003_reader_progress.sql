-- readers.progress and the positions view: a reader's page ends write one row, not one per slot
--
-- Version 3 of the log set (issue 42: "one position per reader"). A relay's
-- page end used to update the position of every slot its page covered: under
-- a steady load most pages cover most slots, 0.43 row writes per event
-- (docs/benchmarks.md). Now it writes its reader's row once: progress holds,
-- per slot it leases, {token, lo, hi, done}, newer than the slot's own row.
-- An entry counts only while its token is the slot's (a slot taken over keeps
-- its row's position, into which the taker first folds the holder's entry), so
-- the view `positions` is each slot's position: its holder's entry when it
-- has one under the slot's token, else the slot's row. Every reader of a
-- position reads the view: read_keys(), the outbox view (below, unchanged
-- columns), the store's gauges, rotation's check and skip.

ALTER TABLE {S}.readers ADD COLUMN progress jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE VIEW {S}.positions AS
SELECT s.slot, s.owner, s.token, s.expires_at, s.restarts,
       CASE WHEN p.e IS NULL THEN s.lo ELSE (p.e ->> 'lo')::pg_snapshot END AS lo,
       CASE WHEN p.e IS NULL THEN s.hi ELSE (p.e ->> 'hi')::pg_snapshot END AS hi,
       CASE WHEN p.e IS NULL THEN s.done_pos ELSE (p.e ->> 'done')::bigint END AS done_pos
FROM {S}.slots s
LEFT JOIN LATERAL (
  SELECT r.progress -> s.slot::text AS e FROM {S}.readers r
  WHERE r.reader = s.owner AND (r.progress -> s.slot::text ->> 'token')::bigint = s.token) p
  ON true;

CREATE OR REPLACE FUNCTION {S}.read_keys(p_slots smallint[], p_tokens bigint[], p_his text[], p_dones bigint[],
                              p_limit integer)
  RETURNS TABLE (slot text, txid text, pos text, hi text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  WITH m AS (
    SELECT u.slot, coalesce(u.hi::pg_snapshot, pg_current_snapshot()) AS hi, u.done, s.lo
    FROM unnest(p_slots, p_tokens, p_his, p_dones) u(slot, token, hi, done)
    JOIN {S}.positions s ON s.slot = u.slot AND s.token = u.token)
  SELECT l.slot::text, l.txid::text, l.pos::text, m.hi::text
  FROM m CROSS JOIN LATERAL (
    SELECT r.slot, r.txid, r.pos FROM (
      SELECT l1.slot, l1.txid, l1.pos FROM {S}.log l1
      WHERE l1.slot = m.slot AND l1.txid >= pg_snapshot_xmax(m.lo)
        AND pg_visible_in_snapshot(l1.txid, m.hi) AND l1.pos > m.done
      UNION ALL
      SELECT l2.slot, l2.txid, l2.pos FROM {S}.log l2
      WHERE l2.slot = m.slot AND l2.txid = ANY(ARRAY(SELECT pg_snapshot_xip(m.lo)))
        AND pg_visible_in_snapshot(l2.txid, m.hi) AND l2.pos > m.done) r
    ORDER BY r.pos LIMIT p_limit) l
  ORDER BY l.pos LIMIT p_limit;
END
$fn$;

CREATE OR REPLACE VIEW {S}.outbox AS
SELECT l.pos AS seq, l.event_id, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
       l.headers, l.dedup_key,
       CASE WHEN x.status IN ('RETRY', 'HELD') AND x.lease_until > now() THEN 'PROCESSING'
            WHEN x.status IS NOT NULL THEN
              CASE x.status WHEN 'RETRY' THEN 'PENDING' WHEN 'HELD' THEN 'PENDING' ELSE x.status END
            WHEN {S}.passed(l.txid, l.pos, s.lo, s.hi, s.done_pos) THEN 'SENT'
            ELSE 'PENDING' END AS status,
       coalesce(x.attempts, 0) AS attempts,
       coalesce(x.next_attempt_at, l.created_at) AS available_at,
       x.lease_owner, x.lease_token, x.last_error, l.created_at, x.claimed_at,
       x.sent_at, x.failed_at, x.skipped_at, x.skipped_by, x.skip_reason
FROM {S}.log l
JOIN {S}.positions s ON s.slot = l.slot
LEFT JOIN {S}.exceptions x ON x.pos = l.pos
UNION ALL
SELECT x.pos, x.event_id, x.aggregate_type, x.aggregate_id, x.event_type, x.payload, x.headers,
       x.dedup_key,
       CASE WHEN x.status IN ('RETRY', 'HELD') AND x.lease_until > now() THEN 'PROCESSING'
            WHEN x.status IN ('RETRY', 'HELD') THEN 'PENDING' ELSE x.status END,
       x.attempts, x.next_attempt_at, x.lease_owner, x.lease_token, x.last_error, x.created_at,
       x.claimed_at, x.sent_at, x.failed_at, x.skipped_at, x.skipped_by, x.skip_reason
FROM {S}.exceptions x
WHERE x.log_gone;
