-- the CDC publication publishes the outbox table again after the table was dropped and created again
--
-- Version 5 creates the publication outbox_{S} only when it does not exist.
-- Dropping the outbox (DROP SCHEMA ... CASCADE, then migrating afresh) drops
-- the table from the publication but not the publication, so migrating again
-- left it publishing nothing: a relay.source = cdc relay streamed no event and
-- every event waited for the sweeper. Now migrating adds the table back; the
-- relay refuses to stream a publication without it, naming the fix.
DO $do$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'outbox_{S}')
     AND NOT EXISTS (SELECT 1 FROM pg_publication_tables
                     WHERE pubname = 'outbox_{S}' AND schemaname = '{S}' AND tablename = 'outbox') THEN
    ALTER PUBLICATION outbox_{S} ADD TABLE {S}.outbox;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'outbox: no privilege to add {S}.outbox to publication outbox_{S}; relay.source = cdc needs it: ALTER PUBLICATION outbox_{S} ADD TABLE {S}.outbox';
END
$do$;
