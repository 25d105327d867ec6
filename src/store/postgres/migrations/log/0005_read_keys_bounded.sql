-- read_keys(): each slot's position read once, and no plan may scan a slot's whole partition
--
-- Version 5 of the log set. Measured (bench/log_snapshot.cc's round times,
-- auto_explain of a relay's session at 3,000 events/s): read_keys() took
-- 5-6 ms a call and grew with the partition, where today's claim takes about
-- 1 ms. Two causes, both in version 3's body:
--   - the xip branch (the transactions lo saw running) could be planned with
--     (slot) or (slot, pos > done) as its index condition and txid = ANY(xip)
--     as a mere filter (the planner keeps such a path for its order, and
--     chose it while the log was empty): it then read every event of the slot
--     in the partition, 1,700 a slot ten seconds into the run, at every call.
--     A plpgsql plan is cached for the session's life, so a plan made while
--     the log was small stays. Now each running transaction of lo is probed
--     on its own, (slot, txid) equal to a value from a subquery that cannot
--     be flattened (OFFSET 0), and pos is compared as `pos + 0`, which no
--     index can take: both branches are bounded by their txid conditions,
--     whatever the statistics were when the plan was made;
--   - the CTE m (each slot's position, from the view `positions`) was inlined,
--     so the view's CASE over the reader's progress was evaluated in every
--     index condition of every partition's scan: 16 slots x 2 branches x the
--     ring's partitions. m is now MATERIALIZED: each slot's position is read
--     once a call.
-- The readers' rows are rewritten at every page end (their progress); a
-- fillfactor of 20 keeps those updates heap-only, as the slots' rows are.

ALTER TABLE {S}.readers SET (fillfactor = 20);

CREATE OR REPLACE FUNCTION {S}.read_keys(p_slots smallint[], p_tokens bigint[], p_his text[], p_dones bigint[],
                              p_limit integer)
  RETURNS TABLE (slot text, txid text, pos text, hi text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  WITH m AS MATERIALIZED (
    SELECT u.slot, coalesce(u.hi::pg_snapshot, pg_current_snapshot()) AS hi, u.done, s.lo
    FROM unnest(p_slots, p_tokens, p_his, p_dones) u(slot, token, hi, done)
    JOIN {S}.positions s ON s.slot = u.slot AND s.token = u.token)
  SELECT l.slot::text, l.txid::text, l.pos::text, m.hi::text
  FROM m CROSS JOIN LATERAL (
    SELECT r.slot, r.txid, r.pos FROM (
      SELECT l1.slot, l1.txid, l1.pos FROM {S}.log l1
      WHERE l1.slot = m.slot AND l1.txid >= pg_snapshot_xmax(m.lo)
        AND pg_visible_in_snapshot(l1.txid, m.hi) AND l1.pos + 0 > m.done
      UNION ALL
      SELECT y.slot, y.txid, y.pos FROM pg_snapshot_xip(m.lo) x(txid)
      CROSS JOIN LATERAL (
        SELECT l2.slot, l2.txid, l2.pos FROM {S}.log l2
        WHERE l2.slot = m.slot AND l2.txid = x.txid
          AND pg_visible_in_snapshot(l2.txid, m.hi) AND l2.pos + 0 > m.done
        OFFSET 0) y) r
    ORDER BY r.pos LIMIT p_limit) l
  ORDER BY l.pos LIMIT p_limit;
END
$fn$;
