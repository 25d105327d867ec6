-- inbox keys of any length
--
-- Version 5: a btree entry holds at most about 2,700 bytes, so a dedup key (an
-- event id, a business key) or an order key (a message key) longer than that
-- failed its batch with SQLSTATE 54000 ("index row requires ... bytes") or
-- "btree maximum 2704". Keys are still stored whole; the stamps' primary key
-- is now (consumer, key_hash), key_hash being {S}.inbox_key(dedup_key): the
-- key's bytes when it has at most 512, else a zero byte and the key's SHA-256.
-- Text never holds a zero byte, so the two forms cannot meet; two long keys
-- meet only when SHA-256 collides. Lookups compare key_hash and then the whole
-- key. A primary key (not an expression index) keeps the table's replica
-- identity, so a publication FOR ALL TABLES still takes its updates and deletes.
CREATE FUNCTION {S}.inbox_key(k text) RETURNS bytea
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
  SELECT CASE WHEN octet_length(k) <= 512 THEN convert_to(k, 'UTF8')
              ELSE '\x00'::bytea || sha256(convert_to(k, 'UTF8')) END
$fn$;

ALTER TABLE {S}.inbox_stamps
  ADD COLUMN key_hash bytea GENERATED ALWAYS AS ({S}.inbox_key(dedup_key)) STORED;
ALTER TABLE {S}.inbox_stamps DROP CONSTRAINT inbox_stamps_pkey;
ALTER TABLE {S}.inbox_stamps ADD PRIMARY KEY (consumer, key_hash);

ALTER TABLE {S}.inbox_parked DROP CONSTRAINT inbox_parked_consumer_dedup_key_key;
CREATE UNIQUE INDEX inbox_parked_dedup_idx ON {S}.inbox_parked (consumer, {S}.inbox_key(dedup_key));
DROP INDEX {S}.inbox_parked_key_idx;
CREATE INDEX inbox_parked_key_idx ON {S}.inbox_parked (consumer, {S}.inbox_key(order_key), id);

-- try_apply() as in version 4, with keys of any length: a key longer than a
-- btree entry no longer fails, and the duplicate count finds its stamp through
-- the new index.
CREATE OR REPLACE FUNCTION {S}.try_apply(consumer text, dedup_key text, topic text DEFAULT NULL,
                                         partition integer DEFAULT NULL, "offset" bigint DEFAULT NULL)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
BEGIN
  IF try_apply.consumer IS NULL OR try_apply.consumer = '' THEN
    RAISE EXCEPTION 'inbox.try_apply: consumer is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF try_apply.dedup_key IS NULL OR try_apply.dedup_key = '' THEN
    RAISE EXCEPTION 'inbox.try_apply: dedup_key is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO {S}.inbox_stamps AS s (consumer, dedup_key, topic, partition, "offset")
  VALUES (try_apply.consumer, try_apply.dedup_key, try_apply.topic, try_apply.partition,
          try_apply."offset")
  ON CONFLICT DO NOTHING;
  IF FOUND THEN
    RETURN true;
  END IF;
  UPDATE {S}.inbox_stamps s SET duplicates = s.duplicates + 1, last_duplicate_at = now()
  WHERE s.consumer = try_apply.consumer
    AND s.key_hash = {S}.inbox_key(try_apply.dedup_key)
    AND s.dedup_key = try_apply.dedup_key;
  RETURN false;
END
$fn$;

-- A message produced with no key (NULL) is parked with a NULL key, so its
-- handler sees NULL, not '', when it is retried from the parked queue.
ALTER TABLE {S}.inbox_parked ALTER COLUMN msg_key DROP NOT NULL;
