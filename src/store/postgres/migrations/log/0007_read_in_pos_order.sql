-- read_range(): a relay's page read in pos order from one index on (pos, slot), each range bounded by the pos sequence
--
-- Version 7 of the log set. Measured (bench/log_drain.cc, docs/benchmarks.md,
-- "The read in pos order"): a claim spent most of its time in two reads, the
-- range's keys (read_keys(), one index search per slot and per transaction lo
-- saw running) and then the page by key (read_page(), one probe per event);
-- with the broker, 0.31-0.37x the pipeline floor. Reading the page straight
-- from an index on (pos, slot), in pos order, bounded by pos, reached 0.72-0.98x.
--
-- What makes a pos bound safe (docs/design.md, "The read in pos order"):
--   - a range's upper snapshot hi is taken between two reads of the pos
--     sequence: pos_before (before it; the next range's lo_pos) and hi_pos
--     (after it). An event visible in hi was written before hi: pos <= hi_pos;
--   - enqueue() and enqueue_batch() now assign the transaction's id before they
--     draw a pos (below). A transaction whose id came after lo_pos was read draws
--     pos > lo_pos, so the main scan, pos in (lo_pos, hi_pos], finds its events;
--   - the others, transactions that may have been running at lo (lo's xip, and
--     every transaction id holding its lock in pg_locks, read after lo_pos and
--     before lo: a snapshot's xmax is one past the latest completed id, so a
--     transaction running with a higher one is in neither part of it) are the
--     range's bounds: each with the lo_pos of the range before the first that
--     saw it running. Once one ends visible in hi, its events are read over
--     (bound, lo_pos] too: the stragglers.
--   The relay computes the bounds and keeps them in its progress with the rest of
--   the position; a range opened by an earlier build (no hi_pos) is read without
--   an upper pos bound, and a position without lo_pos (0, as every slot after
--   this migration) reads its first range from the start of the log.
-- The sequence must hand out values as it draws them: CACHE 1 (a session's
-- cached values would be drawn after a read of last_value that already counts them).
--
-- The (slot, txid, pos) index stays, for the lease's restart check, the gauges,
-- rotation, skip and the straggler scans; the BRIN index on pos gives way to the
-- b-tree on (pos, slot), which also serves every lookup by pos (trace, settle).
-- read_keys() (version 6) and read_page() stay, for a relay of an earlier build
-- still running while this is applied; version 5's read_keys() is dropped.

ALTER SEQUENCE {S}.log_pos CACHE 1;

ALTER TABLE {S}.slots
  ADD COLUMN lo_pos bigint NOT NULL DEFAULT 0,
  ADD COLUMN lo_bounds jsonb NOT NULL DEFAULT '{}'::jsonb,
  ADD COLUMN hi_lo_pos bigint,
  ADD COLUMN hi_pos bigint,
  ADD COLUMN hi_bounds jsonb;

-- Each slot's lo_pos from its events, while the (slot, txid, pos) index still
-- serves the search: the lowest pos of an event its lo does not show (searched
-- from lo's xmin on) less one, else the sequence's last value. ALTER SEQUENCE above
-- waited for every producer that had drawn a pos (nextval holds a lock on the
-- sequence that conflicts with it) and holds off the others until this
-- commits: no event this statement cannot see has a pos at or below it. (A
-- slot's lo in a reader's progress is newer than its row's: this bound, from
-- the row's, is lower, so it covers that lo too.) Without this every slot's
-- first read would start from the log's first event.
UPDATE {S}.slots s SET lo_pos = coalesce(
  (SELECT min(l.pos) - 1 FROM {S}.log l
   WHERE l.slot = s.slot AND l.txid >= pg_snapshot_xmin(s.lo)
     AND NOT pg_visible_in_snapshot(l.txid, s.lo)),
  (SELECT CASE WHEN q.is_called THEN q.last_value ELSE 0 END FROM {S}.log_pos q));

-- A relay of an earlier build moves a slot's hi (its release, its take-over, a
-- slot count's change) without the bounds that go with it: they then no longer
-- describe that hi, and a stale hi_pos would cut its range short. They are
-- cleared whenever hi changes and they do not (hi_pos NULL: no upper bound;
-- hi_lo_pos NULL: the range end keeps lo's, which are lower).
CREATE FUNCTION {S}.slots_hi_bounds_follow() RETURNS trigger
  LANGUAGE plpgsql
AS $fn$
BEGIN
  IF NEW.hi::text IS DISTINCT FROM OLD.hi::text AND NEW.hi_pos IS NOT DISTINCT FROM OLD.hi_pos
     AND NEW.hi_lo_pos IS NOT DISTINCT FROM OLD.hi_lo_pos THEN
    NEW.hi_lo_pos := NULL;
    NEW.hi_pos := NULL;
    NEW.hi_bounds := NULL;
  END IF;
  RETURN NEW;
END
$fn$;
CREATE TRIGGER slots_hi_bounds_follow BEFORE UPDATE OF hi ON {S}.slots
  FOR EACH ROW EXECUTE FUNCTION {S}.slots_hi_bounds_follow();

DROP INDEX {S}.log_pos_brin;
CREATE INDEX log_by_pos ON {S}.log (pos, slot);

DROP FUNCTION {S}.read_keys(smallint[], bigint[], text[], bigint[], integer);

-- Each slot's position, as in version 3, with the pos bounds: an entry of a
-- reader's progress written by an earlier build has none; it then keeps the slot
-- row's lo_pos and lo_bounds (those of an earlier lo: lower, so the read covers
-- more, never less) and an open range without hi_pos (no upper bound).
CREATE OR REPLACE VIEW {S}.positions AS
SELECT s.slot, s.owner, s.token, s.expires_at, s.restarts,
       CASE WHEN p.e IS NULL THEN s.lo ELSE (p.e ->> 'lo')::pg_snapshot END AS lo,
       CASE WHEN p.e IS NULL THEN s.hi ELSE (p.e ->> 'hi')::pg_snapshot END AS hi,
       CASE WHEN p.e IS NULL THEN s.done_pos ELSE (p.e ->> 'done')::bigint END AS done_pos,
       CASE WHEN p.e ? 'lo_pos' THEN (p.e ->> 'lo_pos')::bigint ELSE s.lo_pos END AS lo_pos,
       CASE WHEN p.e ? 'lo_pos' THEN coalesce(nullif(p.e -> 'lo_bounds', 'null'::jsonb), '{}')
            ELSE s.lo_bounds END AS lo_bounds,
       CASE WHEN p.e IS NULL THEN s.hi_lo_pos ELSE (p.e ->> 'hi_lo_pos')::bigint END AS hi_lo_pos,
       CASE WHEN p.e IS NULL THEN s.hi_pos ELSE (p.e ->> 'hi_pos')::bigint END AS hi_pos,
       CASE WHEN p.e IS NULL THEN s.hi_bounds
            ELSE nullif(p.e -> 'hi_bounds', 'null'::jsonb) END AS hi_bounds
FROM {S}.slots s
LEFT JOIN LATERAL (
  SELECT r.progress -> s.slot::text AS e FROM {S}.readers r
  WHERE r.reader = s.owner AND (r.progress -> s.slot::text ->> 'token')::bigint = s.token) p
  ON true;

-- A 32-bit transaction id (pg_locks shows them so) as the xid8 nearest p_near:
-- a running id is within 2^31 of the current one, so this is right across an
-- epoch's wrap too.
CREATE FUNCTION {S}.xid8_near(p_xid bigint, p_near xid8) RETURNS xid8
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT greatest(0, n + ((p_xid - (n & 4294967295) + 6442450944) % 4294967296 - 2147483648))::text::xid8
  FROM (SELECT p_near::text::bigint AS n) m
$fn$;

-- A new range's upper end, for every slot the caller opens one for: the pos
-- sequence's last value read before the snapshot (pos_before) and after it
-- (pos_after), the snapshot, and the transactions that may be running at it
-- (its xip, and those holding their id's lock, read between the first read and
-- the snapshot, from its xmax up), but those of sessions in other databases
-- (they cannot write this log; a prepared transaction's database is not known:
-- it stays). The statements run in this order, each with its own snapshot
-- (VOLATILE, READ COMMITTED: the relay's session). It refuses to run on a
-- sequence it may not read (a role without the privilege could read NULL, as
-- nothing drawn yet) or one that caches values (a session's cached values are
-- drawn after a read of last_value that already counts them).
CREATE FUNCTION {S}.open_range(OUT hi text, OUT pos_before bigint, OUT pos_after bigint,
                               OUT running text[])
  LANGUAGE plpgsql VOLATILE
  SET jit = off
AS $fn$
DECLARE
  v_locks bigint[];
  v_elsewhere bigint[];
  v_hi pg_snapshot;
BEGIN
  IF NOT has_sequence_privilege('{S}.log_pos', 'SELECT,USAGE') THEN
    RAISE EXCEPTION 'outbox.open_range: the relay''s role may not read the sequence {S}.log_pos (grant USAGE on it)'
      USING ERRCODE = '42501';
  END IF;
  IF (SELECT q.seqcache FROM pg_sequence q WHERE q.seqrelid = '{S}.log_pos'::regclass) <> 1 THEN
    RAISE EXCEPTION 'outbox.open_range: the sequence {S}.log_pos must have CACHE 1 (ALTER SEQUENCE {S}.log_pos CACHE 1)'
      USING ERRCODE = '55000';
  END IF;
  pos_before := coalesce(pg_sequence_last_value('{S}.log_pos'), 0);
  SELECT array_agg(l.transactionid::text::bigint) FILTER (WHERE a.datid IS NULL OR a.datid = d.oid),
         array_agg(l.transactionid::text::bigint) FILTER (WHERE a.datid <> d.oid)
    INTO v_locks, v_elsewhere
  FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  CROSS JOIN (SELECT oid FROM pg_database WHERE datname = current_database()) d
  WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted;
  v_hi := pg_current_snapshot();
  pos_after := coalesce(pg_sequence_last_value('{S}.log_pos'), 0);
  hi := v_hi::text;
  running := ARRAY(
    SELECT r::text FROM (
      SELECT x AS r FROM pg_snapshot_xip(v_hi) x
      UNION
      SELECT w FROM (SELECT {S}.xid8_near(k, pg_snapshot_xmax(v_hi)) AS w
                     FROM unnest(v_locks) k) u
      WHERE w >= pg_snapshot_xmax(v_hi)
      EXCEPT
      SELECT {S}.xid8_near(k, pg_snapshot_xmax(v_hi)) FROM unnest(v_elsewhere) k) t);
END
$fn$;

-- A relay's page: the events of the held slots' ranges (visible in hi, not in
-- lo), in pos order, at most p_limit, each with whether an earlier exception of
-- its aggregate holds it (an event with an exception row of its own, skipped
-- before it was read, is left out). Per slot (p_slots with its token, which must
-- still hold): lo, hi, the pos after which the range is read (p_froms: its lo_pos
-- or, once a page of it is done, the last pos done) and hi_pos (NULL: no upper
-- bound). The stragglers (p_x_*): per slot, a transaction of its bounds and the
-- pos span to read of it, (from, to]; each read only once visible in hi and not
-- in lo. One index range scan on (pos, slot) from the lowest p_froms, the slots'
-- values taken by subscript (a join would lose the order and sort the range).
-- The exceptions are looked at once a page (measured: two index probes per
-- row were about a third of the read): each row is checked only when an
-- exception row lies in the page's pos span, or an open one may hold an aggregate.
CREATE FUNCTION {S}.read_range(p_slots smallint[], p_tokens bigint[], p_los text[],
                               p_his text[], p_froms bigint[], p_hi_pos bigint[],
                               p_x_slots smallint[], p_x_txids text[], p_x_froms bigint[],
                               p_x_tos bigint[], p_limit integer, p_failed_holds boolean,
                               p_ordered boolean)
  RETURNS TABLE (pos text, event_id text, aggregate_type text, aggregate_id text, event_type text,
                 payload bytea, headers text, dedup_key text, slot text, created_us text,
                 age_us text, txid text, held text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
AS $fn$
DECLARE
  v_lo pg_snapshot[];
  v_hi pg_snapshot[];
  v_from bigint[];
  v_low bigint;
  v_high bigint;
  v_excepted boolean;  -- an exception row in the span read: rows are checked against it
  v_holds boolean;     -- an open exception may hold a row's aggregate
  r record;
BEGIN
  FOR r IN
    SELECT u.slot, u.lo, u.hi, u.f, coalesce(u.hp, 9223372036854775807) AS hp
    FROM unnest(p_slots, p_tokens, p_los, p_his, p_froms, p_hi_pos) u(slot, token, lo, hi, f, hp)
    JOIN {S}.slots s ON s.slot = u.slot AND s.token = u.token
  LOOP
    v_lo[r.slot + 1] := r.lo::pg_snapshot;
    v_hi[r.slot + 1] := r.hi::pg_snapshot;
    v_from[r.slot + 1] := r.f;
    v_low := least(v_low, r.f);
    v_high := greatest(v_high, r.hp);
  END LOOP;
  IF v_low IS NULL THEN
    RETURN;
  END IF;
  v_excepted := EXISTS (
    SELECT 1 FROM {S}.exceptions z
    WHERE z.pos > least(v_low, (SELECT min(f) FROM unnest(p_x_froms) f)) AND z.pos <= v_high);
  v_holds := p_ordered AND EXISTS (
    SELECT 1 FROM {S}.exceptions y
    WHERE y.status IN ('RETRY', 'HELD') OR (y.status = 'FAILED' AND p_failed_holds));
  RETURN QUERY
  SELECT l.pos::text, l.event_id::text, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
         l.headers::text, l.dedup_key, l.slot::text,
         (extract(epoch FROM l.created_at) * 1000000)::bigint::text,
         (extract(epoch FROM now() - l.created_at) * 1000000)::bigint::text,
         l.txid::text,
         (v_holds AND EXISTS (
            SELECT 1 FROM {S}.exceptions y
            WHERE y.aggregate_type = l.aggregate_type AND y.aggregate_id = l.aggregate_id
              AND y.pos < l.pos AND y.status <> 'SENT' AND y.status <> 'SKIPPED'
              AND (y.status <> 'FAILED' OR p_failed_holds)))::text
  FROM (
    (SELECT l1.* FROM {S}.log l1
     WHERE l1.pos > v_low AND l1.pos <= v_high AND l1.pos > v_from[l1.slot + 1]
       AND pg_visible_in_snapshot(l1.txid, v_hi[l1.slot + 1])
       AND NOT pg_visible_in_snapshot(l1.txid, v_lo[l1.slot + 1])
       AND (NOT v_excepted OR NOT EXISTS (SELECT 1 FROM {S}.exceptions z WHERE z.pos = l1.pos))
     ORDER BY l1.pos LIMIT p_limit)
    UNION ALL
    (SELECT l2.* FROM unnest(p_x_slots, p_x_txids, p_x_froms, p_x_tos) x(slot, txid, f, t)
     CROSS JOIN LATERAL (
       SELECT * FROM {S}.log l0
       WHERE l0.slot = x.slot AND l0.txid = x.txid::xid8 AND l0.pos > x.f AND l0.pos <= x.t
         AND (NOT v_excepted OR NOT EXISTS (SELECT 1 FROM {S}.exceptions z WHERE z.pos = l0.pos))
       ORDER BY l0.pos LIMIT p_limit) l2
     WHERE pg_visible_in_snapshot(x.txid::xid8, v_hi[x.slot + 1])
       AND NOT pg_visible_in_snapshot(x.txid::xid8, v_lo[x.slot + 1])
     ORDER BY l2.pos LIMIT p_limit)) l
  ORDER BY l.pos LIMIT p_limit;
END
$fn$;

-- enqueue() and enqueue_batch() as in version 4, with the transaction's id assigned
-- before the first pos is drawn (see the top of this file).
CREATE OR REPLACE FUNCTION {S}.enqueue(
    aggregate_type text, aggregate_id text, event_type text, payload bytea,
    headers jsonb DEFAULT '{}'::jsonb, dedup_key text DEFAULT NULL)
  RETURNS TABLE (event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  v_set {S}.log_settings;
  v_pos bigint;
  v_id uuid;
BEGIN
  IF NOT coalesce({S}.enqueue_ok(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                                 enqueue.payload, enqueue.headers, enqueue.dedup_key), false) THEN
    PERFORM {S}.enqueue_refuse(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                               enqueue.payload, enqueue.headers, enqueue.dedup_key);
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('{S}'),
                                hashtext(enqueue.aggregate_type || E'\x1f' || enqueue.aggregate_id));
  PERFORM pg_current_xact_id();  -- the id before the pos (version 7)
  SELECT * INTO v_set FROM {S}.log_settings;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than a slot-count change must not use the old count.
    PERFORM 1 FROM {S}.log_slot_count FOR SHARE;
  END IF;
  v_pos := nextval('{S}.log_pos');
  v_id := {S}.event_id_for(v_pos);
  IF enqueue.dedup_key IS NOT NULL THEN
    INSERT INTO {S}.dedup AS d (dedup_key, event_id, pos, part)
    VALUES (enqueue.dedup_key, v_id, v_pos, v_set.cur)
    ON CONFLICT (dedup_key) DO NOTHING;
    IF NOT FOUND THEN
      event_id := (SELECT d.event_id FROM {S}.dedup d WHERE d.dedup_key = enqueue.dedup_key);
      enqueued := false;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  INSERT INTO {S}.log (pos, part, slot, event_id, aggregate_type, aggregate_id, event_type, payload,
                       headers, dedup_key)
  VALUES (v_pos, v_set.cur,
          {S}.slot_of(enqueue.aggregate_type, enqueue.aggregate_id, v_set.slots), v_id,
          enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type, enqueue.payload,
          enqueue.headers, enqueue.dedup_key);
  IF current_setting('outbox.notify', true) = 'on' THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
  event_id := v_id;
  enqueued := true;
  RETURN NEXT;
END
$fn$;

CREATE OR REPLACE FUNCTION {S}.enqueue_batch(
    aggregate_types text[], aggregate_ids text[], event_types text[], payloads bytea[],
    headers jsonb[] DEFAULT NULL, dedup_keys text[] DEFAULT NULL)
  RETURNS TABLE (ord integer, event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(enqueue_batch.aggregate_types), 0);
  v_headers jsonb[] := coalesce(enqueue_batch.headers, array_fill(NULL::jsonb, ARRAY[n]));
  v_keys text[] := CASE WHEN enqueue_batch.dedup_keys IS NULL THEN array_fill(NULL::text, ARRAY[n])
                        ELSE ARRAY(SELECT u.k FROM unnest(enqueue_batch.dedup_keys)
                                            WITH ORDINALITY AS u(k, i) ORDER BY u.i) END;
  v_set {S}.log_settings;
  r record;
BEGIN
  IF coalesce(cardinality(enqueue_batch.aggregate_ids), 0) <> n
     OR coalesce(cardinality(enqueue_batch.event_types), 0) <> n
     OR coalesce(cardinality(enqueue_batch.payloads), 0) <> n
     OR cardinality(v_headers) <> n OR cardinality(v_keys) <> n THEN
    RAISE EXCEPTION 'outbox.enqueue_batch: aggregate_types, aggregate_ids, event_types, payloads (and headers, dedup_keys when given) must have the same length'
      USING ERRCODE = '22023';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;
  FOR r IN
    SELECT e.i, e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb) AS h, e.d
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS e(t, a, et, p, h, d, i)
    WHERE NOT coalesce({S}.enqueue_ok(e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb), e.d), false)
    ORDER BY e.i
  LOOP
    BEGIN
      PERFORM {S}.enqueue_refuse(r.t, r.a, r.et, r.p, r.h, r.d);
    EXCEPTION WHEN invalid_parameter_value THEN
      RAISE EXCEPTION 'outbox.enqueue_batch: event % of %: %', r.i, n, SQLERRM
        USING ERRCODE = '22023';
    END;
  END LOOP;

  PERFORM pg_advisory_xact_lock(hashtext('{S}'), s.k)
  FROM (SELECT DISTINCT hashtext(a.t || E'\x1f' || a.i) AS k
        FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids) AS a(t, i)
        ORDER BY 1) s;
  PERFORM pg_current_xact_id();  -- the id before the pos (version 7)
  SELECT * INTO v_set FROM {S}.log_settings;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than a slot-count change must not use the old count.
    PERFORM 1 FROM {S}.log_slot_count FOR SHARE;
  END IF;

  -- Each event in the caller's order: its key (the first of a key in this call
  -- wins; a key that existed before returns that event's id), then its row.
  FOR r IN
    SELECT x.i::integer AS i, x.t, x.a, x.et, x.p, coalesce(x.h, '{}'::jsonb) AS h, x.d
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS x(t, a, et, p, h, d, i)
    ORDER BY x.i
  LOOP
    DECLARE
      v_pos bigint := nextval('{S}.log_pos');
      v_id uuid := {S}.event_id_for(v_pos);
    BEGIN
      IF r.d IS NOT NULL THEN
        INSERT INTO {S}.dedup AS d (dedup_key, event_id, pos, part)
        VALUES (r.d, v_id, v_pos, v_set.cur)
        ON CONFLICT (dedup_key) DO NOTHING;
        IF NOT FOUND THEN
          ord := r.i;
          event_id := (SELECT d.event_id FROM {S}.dedup d WHERE d.dedup_key = r.d);
          enqueued := false;
          RETURN NEXT;
          CONTINUE;
        END IF;
      END IF;
      INSERT INTO {S}.log (pos, part, slot, event_id, aggregate_type, aggregate_id, event_type,
                           payload, headers, dedup_key)
      VALUES (v_pos, v_set.cur, {S}.slot_of(r.t, r.a, v_set.slots), v_id,
              r.t, r.a, r.et, r.p, r.h, r.d);
      ord := r.i;
      event_id := v_id;
      enqueued := true;
      RETURN NEXT;
    END;
  END LOOP;
  IF current_setting('outbox.notify', true) = 'on' THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
END
$fn$;
