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
-- has not passed. Complete: an event not visible in lo either drew its pos after
-- lo_pos was read, or its transaction was running at lo and is in lo_bounds
-- with a bound below its pos (docs/design.md, "The read in pos order"). Each
-- straggler's span is its own index range scan (OFFSET 0: a nested loop over
-- the bounds, whatever the planner estimates for them). SQL, so a caller's plan
-- inlines it (a partition's check prunes to that partition).
CREATE FUNCTION {S}.unpassed(p_slot smallint, p_lo pg_snapshot, p_hi pg_snapshot,
                             p_done bigint, p_lo_pos bigint, p_bounds jsonb)
  RETURNS SETOF {S}.log
  LANGUAGE sql STABLE
AS $fn$
  SELECT l.* FROM {S}.log l
  WHERE l.pos > p_lo_pos AND l.slot = p_slot
    AND NOT {S}.passed(l.txid, l.pos, p_lo, p_hi, p_done)
  UNION ALL
  SELECT y.* FROM jsonb_each_text(p_bounds) b(x, bound)
  CROSS JOIN LATERAL (
    SELECT * FROM {S}.log l
    WHERE l.pos > b.bound::bigint AND l.pos <= p_lo_pos AND l.slot = p_slot
      AND l.txid = b.x::xid8 AND NOT {S}.passed(l.txid, l.pos, p_lo, p_hi, p_done)
    OFFSET 0) y
$fn$;
