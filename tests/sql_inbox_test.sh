#!/usr/bin/env bash
# The inbox in SQL, used as a service in another language would: `outboxctl
# inbox migrate`, then try_apply from psql (PostgreSQL) and inbox_try_apply from
# the mariadb client, each first in the transaction that writes the effect.
# Checks: a new key is applied once and its redelivery is a counted duplicate;
# a rolled-back transaction leaves no stamp; two sessions racing on one key
# apply it once; an empty key (and on MariaDB one over 512 characters) is
# refused naming the field; `outboxctl inbox status` sees the stamps.
#   tests/sql_inbox_test.sh OUTBOXCTL   (needs OUTBOX_PG_URL and OUTBOX_MYSQL_URL)
set -euo pipefail
ctl="${1:?outboxctl binary}"
: "${OUTBOX_PG_URL:?OUTBOX_PG_URL not set}" "${OUTBOX_MYSQL_URL:?OUTBOX_MYSQL_URL not set}"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect WHAT GOT WANT
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# ---- PostgreSQL ----
schema="sqlinbox_$$_$RANDOM"
pg() { psql "$OUTBOX_PG_URL" -v ON_ERROR_STOP=1 -qAt "$@"; }
trap 'pg -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true' EXIT
"$ctl" inbox migrate --inbox-db "$OUTBOX_PG_URL" --inbox-schema "$schema" | grep -q "up to date" ||
  fail "outboxctl inbox migrate"
pg -c "CREATE TABLE $schema.effects (k text)"

apply() {  # apply KEY [ROLLBACK]: try_apply and, when new, the effect; prints t or f
  pg <<SQL
BEGIN;
SELECT $schema.try_apply('mailer', '$1', 'outbox.event.user', 0, 7) AS new \gset
\if :new
INSERT INTO $schema.effects VALUES ('$1');
\endif
SELECT :'new';
${2:-COMMIT};
SQL
}
expect "first delivery" "$(apply k1)" t
expect "redelivery" "$(apply k1)" f
expect "effects of k1" "$(pg -c "SELECT count(*) FROM $schema.effects WHERE k = 'k1'")" 1
expect "duplicates counted" \
  "$(pg -c "SELECT duplicates FROM $schema.inbox_stamps WHERE consumer = 'mailer' AND dedup_key = 'k1'")" 1
expect "rolled back" "$(apply k2 ROLLBACK)" t
expect "after the rollback" "$(apply k2)" t
expect "effects of k2" "$(pg -c "SELECT count(*) FROM $schema.effects WHERE k = 'k2'")" 1

# Two sessions on one key: the second waits for the first's stamp, then sees a
# duplicate (whichever ran first).
race() {
  pg <<SQL
BEGIN;
SELECT $schema.try_apply('mailer', 'k3') AS new \gset
\if :new
INSERT INTO $schema.effects VALUES ('k3');
\endif
SELECT pg_sleep(0.5);
SELECT :'new';
COMMIT;
SQL
}
race > /tmp/sql_inbox_a.$$ & a=$!
race > /tmp/sql_inbox_b.$$ & b=$!
wait $a $b
got="$(tail -n 1 /tmp/sql_inbox_a.$$)$(tail -n 1 /tmp/sql_inbox_b.$$)"
rm -f /tmp/sql_inbox_a.$$ /tmp/sql_inbox_b.$$
[ "$got" = tf ] || [ "$got" = ft ] || fail "race: got '$got', want one t and one f"
expect "effects of k3" "$(pg -c "SELECT count(*) FROM $schema.effects WHERE k = 'k3'")" 1

err="$(pg -c "SELECT $schema.try_apply('mailer', '')" 2>&1 || true)"
case "$err" in *"dedup_key is required"*) ;; *) fail "empty key: $err" ;; esac
"$ctl" inbox status --inbox-db "$OUTBOX_PG_URL" --inbox-schema "$schema" --json |
  python3 -c 'import json,sys; c=[x for x in json.load(sys.stdin)["consumers"] if x["consumer"]=="mailer"][0]; assert c["stamps"]==3 and c["duplicates"]==2, c' ||
  fail "outboxctl inbox status does not show mailer's 3 stamps and 2 duplicates"

# ---- MariaDB ----
rest="${OUTBOX_MYSQL_URL#mysql://}"
user="${rest%%@*}"; rest="${rest#*@}"
host="${rest%%:*}"; rest="${rest#*:}"
port="${rest%%/*}"; base="${rest#*/}"
db="sqlinbox_$$_$RANDOM"
my() { mariadb -h "$host" -P "$port" -u "$user" -N -B "$@"; }
trap 'pg -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true; my -e "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
my -e "CREATE DATABASE $db"
"$ctl" inbox migrate --inbox-db "mysql://$user@$host:$port/$db" | grep -q "up to date" ||
  fail "outboxctl inbox migrate (MariaDB)"
my "$db" -e "CREATE TABLE effects (k VARCHAR(64))"
my_apply() {  # my_apply KEY [ROLLBACK]
  my "$db" <<SQL
START TRANSACTION;
CALL inbox_try_apply('mailer', '$1', 'outbox.event.user', 0, 7);
${2:-COMMIT};
SQL
}
expect "MariaDB first delivery" "$(my_apply k1)" 1
expect "MariaDB redelivery" "$(my_apply k1)" 0
expect "MariaDB duplicates counted" \
  "$(my "$db" -e "SELECT duplicates FROM inbox_stamps WHERE consumer = 'mailer' AND dedup_key = 'k1'")" 1
expect "MariaDB rolled back" "$(my_apply k2 ROLLBACK)" 1
expect "MariaDB after the rollback" "$(my_apply k2)" 1
my_race() {
  my "$db" <<SQL
START TRANSACTION;
CALL inbox_try_apply('mailer', 'k3', NULL, NULL, NULL);
SELECT SLEEP(0.5);
COMMIT;
SQL
}
my_race > /tmp/sql_inbox_a.$$ & a=$!
my_race > /tmp/sql_inbox_b.$$ & b=$!
wait $a $b
got="$(head -n 1 /tmp/sql_inbox_a.$$)$(head -n 1 /tmp/sql_inbox_b.$$)"
rm -f /tmp/sql_inbox_a.$$ /tmp/sql_inbox_b.$$
[ "$got" = 10 ] || [ "$got" = 01 ] || fail "MariaDB race: got '$got', want one 1 and one 0"
err="$(my "$db" -e "CALL inbox_try_apply('mailer', '', NULL, NULL, NULL)" 2>&1 || true)"
case "$err" in *"dedup_key is required"*) ;; *) fail "MariaDB empty key: $err" ;; esac
long="$(printf 'k%.0s' $(seq 1 513))"
err="$(my "$db" -e "CALL inbox_try_apply('mailer', '$long', NULL, NULL, NULL)" 2>&1 || true)"
case "$err" in *"limited to 128, 512 and 255"*) ;; *) fail "MariaDB 513-character key: $err" ;; esac
expect "MariaDB: nothing stamped for the refused key" \
  "$(my "$db" -e "SELECT count(*) FROM inbox_stamps WHERE char_length(dedup_key) > 500")" 0
echo "sql inbox ok"
