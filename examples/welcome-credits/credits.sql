-- The welcome-credits service's whole consumer: one PL/pgSQL function, run by
-- outbox-consumer's `sql` handler in the transaction that stamps the event
-- (consumer.toml). $1 payload (bytea), $2 headers (jsonb), $3 event id, $4 key
-- (the user id). Grants 100 credits to each new user, once: a copy of the
-- event never reaches this function (the stamp absorbs it).
CREATE SCHEMA IF NOT EXISTS credits;
CREATE TABLE IF NOT EXISTS credits.ledger (
  id bigserial PRIMARY KEY,
  user_id text NOT NULL,            -- deliberately not unique: a double grant would show
  amount integer NOT NULL,
  reason text NOT NULL,
  event_id text NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS credits.balances (
  user_id text PRIMARY KEY,
  balance integer NOT NULL
);

CREATE OR REPLACE FUNCTION credits.on_user_signed_up(payload bytea, headers jsonb, event_id text, user_key text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  ev jsonb := convert_from(payload, 'UTF8')::jsonb;  -- not JSON: 22P02, a permanent error (dead-lettered)
  uid text := ev ->> 'user_id';
BEGIN
  IF uid IS NULL OR uid <> user_key THEN
    -- A malformed event: permanent, to the dead-letter topic with this message.
    RAISE EXCEPTION 'UserSignedUp %: user_id % does not match the key %', event_id, uid, user_key;
  END IF;
  INSERT INTO credits.ledger (user_id, amount, reason, event_id) VALUES (uid, 100, 'welcome', event_id);
  INSERT INTO credits.balances (user_id, balance) VALUES (uid, 100)
    ON CONFLICT (user_id) DO UPDATE SET balance = credits.balances.balance + 100;
END $$;
