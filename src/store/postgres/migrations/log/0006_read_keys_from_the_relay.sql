-- read_keys() takes each slot's lo from the relay that holds it: a claim no longer reads the reader's row
--
-- Version 6 of the log set. Measured after version 5 (docs/benchmarks.md, "The
-- log's read bounded whatever its cached plan"): under a held snapshot a
-- claim's median went from 2.5 to 4.8 ms and a page end's from 1.7 to 3.6 ms.
-- The reader's row (readers.progress) is rewritten at every page end; while a
-- snapshot lives none of its versions can be pruned, and every lookup of it
-- walks them — read_keys() looked it up once per slot, through the view
-- `positions`. The holder of a slot already knows its position: it wrote it
-- (its page ends), or read it when it took the slot (the lease statement
-- returns lo with hi and done_pos). So the read takes lo as an argument, beside
-- hi and done_pos, and checks only that the tokens still hold (the slots' own
-- rows, rewritten at a tenth of the lease, not per page). A relay's page end
-- likewise computes its slots' new positions from those it holds instead of
-- reading the view (the store's statement, not this file). Version 5's read
-- (five arguments) stays, unused by this release, for a relay of an earlier
-- build still running while this migration is applied; a later version drops
-- it.

-- The keys (slot, txid, pos) of each slot's range (visible in hi, not in lo,
-- after done_pos; hi NULL: a new range, up to this statement's snapshot), in pos
-- order, at most p_limit, with each range's hi, for the slots whose tokens
-- still hold. Bounded by its txid conditions whatever its cached plan (version
-- 5: each running transaction of lo probed on its own, pos compared as pos + 0).
CREATE FUNCTION {S}.read_keys(p_slots smallint[], p_tokens bigint[], p_los text[], p_his text[],
                              p_dones bigint[], p_limit integer)
  RETURNS TABLE (slot text, txid text, pos text, hi text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  WITH m AS MATERIALIZED (
    SELECT u.slot, coalesce(u.hi::pg_snapshot, pg_current_snapshot()) AS hi, u.done,
           u.lo::pg_snapshot AS lo
    FROM unnest(p_slots, p_tokens, p_los, p_his, p_dones) u(slot, token, lo, hi, done)
    JOIN {S}.slots s ON s.slot = u.slot AND s.token = u.token)
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
