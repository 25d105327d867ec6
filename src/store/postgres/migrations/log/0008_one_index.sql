-- unpassed(): a slot's events not yet passed, found by pos; the (slot, txid, pos) index dropped, so a producer writes one b-tree
--
-- Version 8 of the log set. Measured (bench/run_log_enqueue_cost.sh,
-- docs/benchmarks.md, "what its enqueue adds"): with version 7's b-tree on
-- (pos, slot) beside the one on (slot, txid, pos), enqueue() on the log added
-- 2.49x the hand-rolled INSERT's cost (1.77x with durable commits), more than
-- the row store's 2.31x (1.62x) in the same run; version 6, one b-tree and a
-- BRIN, had added 1.70x (1.57x). The read needs only (pos, slot). Every other
-- reader of the events a slot has not passed finds them as the read does: the
-- slot's events after its lo_pos, and its stragglers, each over (bound, lo_pos]
-- (unpassed(), below: the lease's restart count, the gauges, the slot count's
-- change and rotation's check, in the store). A relay of an earlier build still
-- running while this is applied reads through read_keys() and read_page(),
-- which then scan the (pos, slot) index instead of searching by txid: slower,
-- not wrong; the relays of this build replace it.

DROP INDEX {S}.log_read;

-- The events of slot p_slot that its position (lo, hi, done, lo_pos, lo_bounds)
-- has not passed, at most p_limit (NULL: all) (its pos and when it was
-- written). Complete: an event not visible in lo
-- either drew its pos after lo_pos was read, or its transaction was running at
-- lo and is in lo_bounds with a bound below its pos (docs/design.md, "The read
-- in pos order"). Each straggler's span is its own index range scan (OFFSET 0:
-- a nested loop over the bounds, whatever the planner estimates for them), made
-- only once its transaction has ended visible and not in lo.
-- PL/pgSQL, so that its plans are made once per session and its callers' plans
-- stay cheap; no JIT (inlined into a caller, the estimates for the bounds put
-- the gauges' statement past jit_above_cost: 2.5 s of compiling for a few
-- index probes, measured), no sequential scan.
CREATE FUNCTION {S}.unpassed(p_slot smallint, p_lo pg_snapshot, p_hi pg_snapshot,
                             p_done bigint, p_lo_pos bigint, p_bounds jsonb,
                             p_limit bigint DEFAULT NULL)
  RETURNS TABLE (pos bigint, created_at timestamptz)
  LANGUAGE plpgsql STABLE ROWS 100
  SET jit = off SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  SELECT u.pos, u.created_at FROM (
    SELECT l.pos, l.created_at FROM {S}.log l
    WHERE l.pos > p_lo_pos AND l.slot = p_slot
      AND NOT {S}.passed(l.txid, l.pos, p_lo, p_hi, p_done)
    UNION ALL
    SELECT y.pos, y.created_at FROM jsonb_each_text(p_bounds) b(x, bound)
    CROSS JOIN LATERAL (
      -- only a transaction that ended visible to this statement and not to lo
      -- has such events (one still running has none to show yet)
      SELECT WHERE pg_visible_in_snapshot(b.x::xid8, pg_current_snapshot())
               AND NOT pg_visible_in_snapshot(b.x::xid8, p_lo)) v
    CROSS JOIN LATERAL (
      SELECT l.pos, l.created_at FROM {S}.log l
      WHERE l.pos > b.bound::bigint AND l.pos <= p_lo_pos AND l.slot = p_slot
        AND l.txid = b.x::xid8 AND NOT {S}.passed(l.txid, l.pos, p_lo, p_hi, p_done)
      OFFSET 0) y) u
  LIMIT p_limit;
END
$fn$;

-- Whether every slot's position has passed every event of partition p_part
-- (rotation's check, made again under the partition's lock): per slot, its
-- unpassed events in that partition alone, found by pos; and no event of a slot
-- without a row (slot rows are never deleted: a slot retired by a lower count
-- keeps its row and its position; looking reads the partition's index whole).
-- PL/pgSQL with no JIT, as unpassed().
CREATE FUNCTION {S}.partition_passed(p_part smallint) RETURNS boolean
  LANGUAGE plpgsql STABLE
  SET jit = off SET enable_seqscan = off
AS $fn$
DECLARE
  v_passed boolean;
BEGIN
  EXECUTE format($q$
    SELECT NOT EXISTS (
             SELECT 1 FROM {S}.positions s CROSS JOIN LATERAL (
               SELECT 1 FROM {S}.%1$I l
               WHERE l.pos > s.lo_pos AND l.slot = s.slot
                 AND NOT {S}.passed(l.txid, l.pos, s.lo, s.hi, s.done_pos)
               UNION ALL
               SELECT 1 FROM jsonb_each_text(s.lo_bounds) b(x, bound)
               CROSS JOIN LATERAL (
                 SELECT WHERE pg_visible_in_snapshot(b.x::xid8, pg_current_snapshot())
                          AND NOT pg_visible_in_snapshot(b.x::xid8, s.lo)) v
               CROSS JOIN LATERAL (
                 SELECT 1 FROM {S}.%1$I l
                 WHERE l.pos > b.bound::bigint AND l.pos <= s.lo_pos AND l.slot = s.slot
                   AND l.txid = b.x::xid8 AND NOT {S}.passed(l.txid, l.pos, s.lo, s.hi, s.done_pos)
                 OFFSET 0) y
               LIMIT 1) u)
           AND NOT EXISTS (SELECT 1 FROM {S}.%1$I l
                           WHERE l.slot > (SELECT max(slot) FROM {S}.slots))$q$,
    'log_' || p_part) INTO v_passed;
  RETURN v_passed;
END
$fn$;
