-- The accounts service's table (its outbox comes from `outboxctl migrate`).
-- It signs users up in plain SQL: the user row and outbox.enqueue(...) in one
-- transaction (scripts/demo-credits generates them).
CREATE SCHEMA IF NOT EXISTS accounts;
CREATE TABLE IF NOT EXISTS accounts.users (
  id bigserial PRIMARY KEY,
  email text NOT NULL
);
