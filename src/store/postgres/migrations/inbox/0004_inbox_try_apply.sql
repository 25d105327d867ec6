-- try_apply(): the inbox for a consumer that keeps its own client
--
-- Version 4: a service in any language that reads Kafka (or receives HTTP
-- delivery) itself gets the inbox's exactly-once effects with one call, made
-- first inside the transaction that applies the effects:
--   BEGIN;
--   SELECT {S}.try_apply('mailer', '<event id>', 'outbox.event.user', 3, 1042);
--   -- true: new, apply the effects here; false: a duplicate, apply nothing
--   COMMIT;
-- The stamp is the same row the C++ inbox writes (inbox_stamps), so
-- `outboxctl trace --inbox-db` and `outboxctl inbox purge` see it. The stamp
-- commits or rolls back with the effects; a second transaction with the same
-- key waits for the first, then gets false if it committed (true if it rolled
-- back). A duplicate is counted (duplicates, last_duplicate_at), as the C++
-- inbox counts them.
CREATE FUNCTION {S}.try_apply(consumer text, dedup_key text, topic text DEFAULT NULL,
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
  WHERE s.consumer = try_apply.consumer AND s.dedup_key = try_apply.dedup_key;
  RETURN false;
END
$fn$;
