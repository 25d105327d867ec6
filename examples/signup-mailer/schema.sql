-- The example's own tables (the outbox and the inbox come from
-- `outbox-relay --migrate` and `outboxctl inbox migrate`).
CREATE SCHEMA IF NOT EXISTS signup;
CREATE TABLE IF NOT EXISTS signup.users (
  id bigserial PRIMARY KEY,
  email text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE SCHEMA IF NOT EXISTS mailer;
CREATE TABLE IF NOT EXISTS mailer.emails (
  id bigserial PRIMARY KEY,
  event_id text NOT NULL,
  user_id text NOT NULL,
  address text NOT NULL,
  sent_at timestamptz NOT NULL DEFAULT now()
);
