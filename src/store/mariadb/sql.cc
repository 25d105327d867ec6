#include "sql.h"

#include <algorithm>
#include <string_view>

namespace outbox::maria::sql {
namespace {

// The columns of an EventRecord (mariadb_store.cc's ReadRecord reads them in
// this order).
constexpr const char* kRecordColumns =
    "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, status, attempts, "
    "TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) / 1e6, coalesce(dedup_key, ''), "
    "coalesce(last_error, ''), coalesce(lease_owner, ''), created_at, coalesce(claimed_at, ''), "
    "coalesce(sent_at, ''), coalesce(failed_at, ''), coalesce(skipped_at, ''), "
    "coalesce(skipped_by, ''), coalesce(skip_reason, '') ";

// "UTC_TIMESTAMP(6) + INTERVAL <delay> MICROSECOND"; a negative delay is now.
std::string DueAfter(std::chrono::milliseconds delay) {
  return "UTC_TIMESTAMP(6) + INTERVAL " +
         std::to_string(std::max<std::int64_t>(0, delay.count()) * 1000) + " MICROSECOND";
}

}  // namespace

std::string CallEnqueue(const std::string& aggregate_type, const std::string& aggregate_id,
                        const std::string& event_type, const std::string& payload,
                        const std::string& headers, const std::string& dedup_key) {
  return "CALL outbox_enqueue(" + aggregate_type + ", " + aggregate_id + ", " + event_type + ", " +
         payload + ", " + headers + ", " + dedup_key + ")";
}

std::string AggregateBucket(const std::string& aggregate_type, const std::string& aggregate_id) {
  return "crc32(concat(" + aggregate_type + ", char(31), " + aggregate_id + ")) % 65536";
}

std::string LockAggregates(const std::string& buckets) {
  // In bucket order: two batches over colliding buckets lock in the same order.
  return "SELECT bucket FROM outbox_aggregate_locks WHERE bucket IN (" + buckets +
         ") ORDER BY bucket FOR UPDATE";
}

std::string NextLeaseToken() { return "SELECT NEXTVAL(outbox_lease_token_seq)"; }

std::string ClaimUnordered(int batch_size) {
  // One state at a time: each walks (status, seq) in order and stops early.
  std::string sql;
  for (const char* state : {"PENDING", "PROCESSING"}) {
    sql += std::string(sql.empty() ? "" : " UNION ALL ") +
           "(SELECT seq, length(payload) AS len FROM outbox FORCE INDEX (outbox_unsent) "
           "WHERE status = '" +
           state + "' AND available_at <= UTC_TIMESTAMP(6) ORDER BY seq LIMIT " +
           std::to_string(batch_size) + " FOR UPDATE SKIP LOCKED)";
  }
  return sql + " ORDER BY seq";
}

std::string ClaimHeads(int batch_size, bool failed_holds_aggregate) {
  // Heads, one state at a time (each an ordered walk of (status, seq) that
  // stops early), each candidate probed for an earlier unsent row of its
  // aggregate on (aggregate, status, seq), one probe per unsent state. The
  // indexes are forced: with stale statistics the planner walked the primary
  // key through every SENT row, or probed all in-flight rows per candidate.
  std::string earlier;
  for (const char* state : {"PENDING", "PROCESSING", "FAILED"}) {
    if (std::string_view(state) == "FAILED" && !failed_holds_aggregate) continue;
    earlier += std::string(
                   " AND NOT EXISTS (SELECT 1 FROM outbox e FORCE INDEX "
                   "(outbox_aggregate_state) WHERE e.aggregate_type = o.aggregate_type "
                   "AND e.aggregate_id = o.aggregate_id AND e.status = '") +
               state + "' AND e.seq < o.seq)";
  }
  std::string heads_sql;
  for (const char* state : {"PENDING", "PROCESSING"}) {
    if (!heads_sql.empty()) heads_sql += " UNION ALL ";
    heads_sql += std::string(
                     "(SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts, "
                     "length(o.payload) FROM outbox o FORCE INDEX (outbox_unsent) "
                     "WHERE o.status = '") +
                 state + "' AND o.available_at <= UTC_TIMESTAMP(6)" + earlier +
                 " ORDER BY o.seq LIMIT " + std::to_string(batch_size) + ")";
  }
  return heads_sql + " ORDER BY 1 LIMIT " + std::to_string(batch_size);
}

std::string ClaimRuns(const std::vector<RunHead>& heads, int max_attempts,
                      bool failed_holds_aggregate, std::size_t room) {
  // One index range of (aggregate, seq) per head, forced like the heads'.
  const std::string max = std::to_string(max_attempts);
  const std::string run_holds = failed_holds_aggregate ? "" : " AND status <> 'FAILED'";
  std::string runs;
  for (const RunHead& h : heads) {
    runs += std::string(runs.empty() ? "" : " UNION ALL ") +
            "(SELECT seq, aggregate_type, aggregate_id, status IN ('PENDING', 'PROCESSING') "
            "AND available_at <= UTC_TIMESTAMP(6) AND attempts < " +
            max +
            ", attempts, "
            "length(payload) FROM outbox FORCE INDEX (outbox_aggregate) WHERE aggregate_type = " +
            h.aggregate_type + " AND aggregate_id = " + h.aggregate_id + " AND seq > " +
            std::to_string(h.seq) + " AND status NOT IN ('SENT', 'SKIPPED')" + run_holds +
            " ORDER BY seq LIMIT " + std::to_string(room) + ")";
  }
  return runs;
}

std::string ClaimLock(const std::string& seqs) {
  return "SELECT seq FROM outbox WHERE seq IN (" + seqs +
         ") AND status IN ('PENDING', "
         "'PROCESSING') AND available_at <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED";
}

std::string ClaimUpdate(const std::string& seqs, const std::string& owner, const std::string& token,
                        std::chrono::milliseconds lease, int max_attempts) {
  const std::string max = std::to_string(max_attempts);
  // MariaDB assigns left to right with the new values: attempts goes last.
  return "UPDATE outbox SET "
         "status = IF(attempts >= " +
         max +
         ", 'FAILED', 'PROCESSING'), "
         "failed_at = IF(attempts >= " +
         max +
         ", UTC_TIMESTAMP(6), failed_at), "
         "last_error = IF(attempts >= " +
         max +
         ", concat('claimed ', attempts, ' times without "
         "finishing (max_attempts " +
         max +
         "); last error: ', coalesce(last_error, 'none')), "
         "last_error), "
         "lease_owner = " +
         owner + ", lease_token = " + token +
         ", "
         "available_at = UTC_TIMESTAMP(6) + INTERVAL " +
         std::to_string(lease.count() * 1000) +
         " MICROSECOND, claimed_at = UTC_TIMESTAMP(6), "
         "attempts = IF(attempts >= " +
         max +
         ", attempts, attempts + 1) "
         "WHERE seq IN (" +
         seqs + ")";
}

std::string ClaimRead(const std::string& seqs) {
  return "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
         "dedup_key, attempts, lease_token, status, "
         "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at), "
         "TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) "
         "FROM outbox WHERE seq IN (" +
         seqs + ") ORDER BY seq";
}

std::string FenceLock(const std::string& seqs, const std::string& tickets, bool sent_too) {
  // seq IN (...) for the primary-key lookups; the pairs for the fence.
  return "SELECT seq FROM outbox WHERE seq IN (" + seqs + ") AND (seq, lease_token) IN (" +
         tickets + ") AND status IN (" + (sent_too ? "'PROCESSING', 'SENT'" : "'PROCESSING'") +
         ") FOR UPDATE";
}

std::string MarkSentDelete(const std::string& seqs) {
  return "DELETE FROM outbox WHERE seq IN (" + seqs + ")";
}

std::string MarkSentUpdate(const std::string& seqs) {
  return "UPDATE outbox SET status = 'SENT', sent_at = coalesce(sent_at, UTC_TIMESTAMP(6)), "
         "last_error = NULL WHERE seq IN (" +
         seqs + ")";
}

std::string Reschedule(const std::vector<RescheduleRow>& rows, const std::string& seqs) {
  std::string attempts = "CASE seq", due = "CASE seq", error = "CASE seq";
  for (const RescheduleRow& r : rows) {
    const std::string when = " WHEN " + std::to_string(r.seq) + " THEN ";
    attempts += when + (r.attempt_counts ? "attempts" : "GREATEST(attempts - 1, 0)");
    due += when + DueAfter(r.delay);
    error += when + r.error;
  }
  return "UPDATE outbox SET status = 'PENDING', attempts = " + attempts +
         " END, available_at = " + due + " END, lease_owner = NULL, last_error = " + error +
         " END WHERE seq IN (" + seqs + ")";
}

std::string MarkFailed(const std::vector<FailRow>& rows, const std::string& seqs) {
  std::string error = "CASE seq";
  for (const FailRow& r : rows) error += " WHEN " + std::to_string(r.seq) + " THEN " + r.error;
  return "UPDATE outbox SET status = 'FAILED', failed_at = UTC_TIMESTAMP(6), "
         "last_error = " +
         error + " END WHERE seq IN (" + seqs + ")";
}

std::string PurgeSent(std::chrono::seconds retention, int batch) {
  return "DELETE FROM outbox WHERE status = 'SENT' AND sent_at < UTC_TIMESTAMP(6) - "
         "INTERVAL " +
         std::to_string(retention.count()) + " SECOND ORDER BY seq LIMIT " +
         std::to_string(std::max(batch, 1));
}

std::string Stats() {
  return R"SQL(
SELECT
  (SELECT count(*) FROM outbox WHERE status = 'PENDING'),
  (SELECT count(*) FROM outbox WHERE status = 'PROCESSING'),
  (SELECT count(*) FROM outbox WHERE status = 'FAILED'),
  (SELECT count(*) FROM outbox WHERE status = 'SKIPPED'),
  coalesce((SELECT TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) DIV 1000 FROM outbox
            WHERE status IN ('PENDING', 'PROCESSING') ORDER BY seq LIMIT 1), 0),
  (SELECT count(*) FROM (
     SELECT DISTINCT f.aggregate_type, f.aggregate_id FROM outbox f
     WHERE f.status = 'FAILED' AND EXISTS (
       SELECT 1 FROM outbox p
       WHERE p.aggregate_type = f.aggregate_type AND p.aggregate_id = f.aggregate_id
         AND p.seq > f.seq AND p.status IN ('PENDING', 'PROCESSING'))) h)
)SQL";
}

std::string RecentActivity(std::chrono::seconds window) {
  // Times are UTC DATETIMEs: seconds since the epoch counted from
  // '1970-01-01' directly, whatever the session's time zone.
  const std::string since =
      "UTC_TIMESTAMP(6) - INTERVAL " + std::to_string(window.count()) + " SECOND";
  return "SELECT 'm', m, sum(s), sum(f), NULL FROM ("
         "  SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', sent_at) DIV 60 * 60 AS m, 1 AS s, 0 AS f"
         "  FROM outbox WHERE status = 'SENT' AND sent_at >= " +
         since +
         "  UNION ALL SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', failed_at) DIV 60 * 60, 0, 1"
         "  FROM outbox WHERE status = 'FAILED' AND failed_at >= " +
         since +
         ") x GROUP BY m "
         "UNION ALL SELECT 'r', lease_owner, CAST(max(claimed_at) AS CHAR), count(*), 'claims' "
         "FROM outbox WHERE claimed_at >= " +
         since +
         " AND lease_owner IS NOT NULL "
         "GROUP BY lease_owner ORDER BY 1, 2";
}

std::string CountSent() { return "SELECT count(*) FROM outbox WHERE status = 'SENT'"; }

std::string ReplaySelect(const std::string& event_id, const std::string& aggregate_id,
                         const std::string& event_type) {
  std::string where = "status = 'FAILED'";
  if (!event_id.empty()) where += " AND event_id = " + event_id;
  if (!aggregate_id.empty()) where += " AND aggregate_id = " + aggregate_id;
  if (!event_type.empty()) where += " AND event_type = " + event_type;
  return "SELECT seq, aggregate_type, aggregate_id, TIMESTAMPDIFF(SECOND, created_at, "
         "UTC_TIMESTAMP(6)) FROM outbox WHERE " +
         where + " ORDER BY seq FOR UPDATE";
}

std::string ReplayUpdate(const std::string& seqs) {
  return "UPDATE outbox SET status = 'PENDING', attempts = 0, available_at = UTC_TIMESTAMP(6), "
         "lease_owner = NULL, failed_at = NULL, last_error = concat('replayed by outboxctl; "
         "before: ', coalesce(last_error, '')) WHERE seq IN (" +
         seqs + ")";
}

std::string ReplayRelease(const std::string& aggregate_type, const std::string& aggregate_id,
                          std::int64_t first_seq, const std::string& seqs) {
  return "UPDATE outbox SET attempts = 0 WHERE aggregate_type = " + aggregate_type +
         " AND aggregate_id = " + aggregate_id + " AND seq > " + std::to_string(first_seq) +
         " AND status = 'PENDING' AND seq NOT IN (" + seqs + ")";
}

std::string SkipSelect(const std::string& event_id) {
  return "SELECT seq, status, aggregate_type, aggregate_id FROM outbox "
         "WHERE event_id = " +
         event_id + " FOR UPDATE";
}

std::string SkipUpdate(const std::string& seq, const std::string& by, const std::string& reason) {
  return "UPDATE outbox SET status = 'SKIPPED', skipped_at = UTC_TIMESTAMP(6), "
         "skipped_by = " +
         by + ", skip_reason = " + reason + ", lease_owner = NULL WHERE seq = " + seq;
}

std::string SkipRelease(const std::string& aggregate_type, const std::string& aggregate_id,
                        const std::string& seq) {
  return "UPDATE outbox SET attempts = 0 WHERE aggregate_type = " + aggregate_type +
         " AND aggregate_id = " + aggregate_id + " AND seq > " + seq + " AND status = 'PENDING'";
}

std::string OldestUnsent() {
  return "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) FROM outbox "
         "WHERE seq = (SELECT min(seq) FROM outbox "
         "WHERE status IN ('PENDING', 'PROCESSING', 'FAILED'))";
}

std::string List(const std::string& state, const std::string& aggregate_id,
                 const std::string& event_type, std::chrono::seconds older_than, int limit) {
  std::string where = "WHERE 1 = 1";
  if (!state.empty()) where += " AND status = upper(" + state + ")";
  if (!aggregate_id.empty()) where += " AND aggregate_id = " + aggregate_id;
  if (!event_type.empty()) where += " AND event_type = " + event_type;
  if (older_than.count() > 0) {
    where += " AND created_at < UTC_TIMESTAMP(6) - INTERVAL " + std::to_string(older_than.count()) +
             " SECOND";
  }
  return std::string(kRecordColumns) + "FROM outbox " + where + " ORDER BY seq LIMIT " +
         std::to_string(std::max(limit, 0));
}

std::string Find(const std::string& key) {
  return std::string(kRecordColumns) +
         ", headers, OCTET_LENGTH(payload), SUBSTRING(payload, 1, 4096) "
         "FROM outbox WHERE event_id = " +
         key + " OR dedup_key = " + key + " ORDER BY seq";
}

std::string InboxInsertStamp(const std::string& consumer, const std::string& key,
                             const std::string& topic, int partition, std::int64_t offset,
                             bool count_duplicates) {
  return "INSERT INTO inbox_stamps (consumer, dedup_key, topic, `partition`, `offset`, "
         "applied_at) "
         "VALUES (" +
         consumer + ", " + key + ", " + topic + ", " + std::to_string(partition) + ", " +
         std::to_string(offset) + ", UTC_TIMESTAMP(6)) " +
         (count_duplicates ? "ON DUPLICATE KEY UPDATE duplicates = duplicates + 1, "
                             "last_duplicate_at = UTC_TIMESTAMP(6)"
                           : "ON DUPLICATE KEY UPDATE consumer = consumer");
}

std::string InboxPurgeStamps(const std::string& consumer, std::chrono::seconds horizon, int batch) {
  return "DELETE FROM inbox_stamps WHERE consumer = " + consumer +
         " AND applied_at < UTC_TIMESTAMP(6) - INTERVAL " + std::to_string(horizon.count()) +
         " SECOND ORDER BY applied_at LIMIT " + std::to_string(std::max(batch, 1));
}

std::string InboxSummaryStamps(std::chrono::seconds horizon) {
  return "SELECT consumer, count(*), sum(applied_at < UTC_TIMESTAMP(6) - INTERVAL " +
         std::to_string(horizon.count()) +
         " SECOND), coalesce(TIMESTAMPDIFF(SECOND, min(applied_at), UTC_TIMESTAMP(6)), 0), "
         "coalesce(sum(duplicates), 0) FROM inbox_stamps GROUP BY consumer";
}

std::string InboxSummaryParked() {
  return "SELECT consumer, count(*), coalesce(TIMESTAMPDIFF(SECOND, min(parked_at), "
         "UTC_TIMESTAMP(6)), 0) FROM inbox_parked GROUP BY consumer";
}

std::string InboxFindStamps(const std::string& keys) {
  return "SELECT consumer, dedup_key, applied_at, coalesce(topic, ''), "
         "coalesce(`partition`, ''), coalesce(`offset`, ''), duplicates "
         "FROM inbox_stamps WHERE dedup_key IN (" +
         keys + ") ORDER BY consumer, applied_at";
}

std::string InboxParkedKeys(const std::string& consumer, const std::string& order_keys) {
  return "SELECT DISTINCT order_key FROM inbox_parked WHERE consumer = " + consumer +
         " AND order_key IN (" + order_keys + ")";
}

std::string InboxPark(const ParkedRow& row) {
  return "INSERT INTO inbox_parked (consumer, order_key, dedup_key, topic, `partition`, "
         "`offset`, msg_key, payload, headers, ts_ms, attempts, last_error, due_at, "
         "parked_at) VALUES (" +
         row.consumer + ", " + row.order_key + ", " + row.dedup_key + ", " + row.topic + ", " +
         std::to_string(row.partition) + ", " + std::to_string(row.offset) + ", " + row.key + ", " +
         row.payload + ", " + row.headers + ", " + std::to_string(row.ts_ms) + ", " +
         std::to_string(row.attempts) + ", " + row.last_error + ", " + DueAfter(row.delay) +
         ", UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE id = id";
}

std::string InboxDue(const std::string& consumer, int limit) {
  // The messages of every order key whose first parked message is due.
  return "SELECT p.id, p.order_key, p.dedup_key, p.topic, p.`partition`, p.`offset`, "
         "p.msg_key, p.payload, p.headers, p.ts_ms, p.attempts, coalesce(p.last_error, '') "
         "FROM inbox_parked p "
         "JOIN (SELECT h.order_key FROM inbox_parked h WHERE h.consumer = " +
         consumer +
         " AND h.due_at <= UTC_TIMESTAMP(6) AND h.id = (SELECT min(x.id) FROM inbox_parked x "
         "WHERE x.consumer = h.consumer AND x.order_key = h.order_key)) k "
         "ON k.order_key = p.order_key WHERE p.consumer = " +
         consumer + " ORDER BY p.order_key, p.id LIMIT " + std::to_string(std::max(limit, 0));
}

std::string InboxUnpark(const std::string& consumer, const std::string& ids) {
  return "DELETE FROM inbox_parked WHERE consumer = " + consumer + " AND id IN (" + ids + ")";
}

std::string InboxReschedule(const std::string& consumer, std::int64_t id, int attempts,
                            const std::string& error, std::chrono::milliseconds delay) {
  return "UPDATE inbox_parked SET attempts = " + std::to_string(attempts) +
         ", last_error = " + error + ", due_at = " + DueAfter(delay) +
         " WHERE consumer = " + consumer + " AND id = " + std::to_string(id);
}

std::string CatalogTables(const std::string& db) {
  return "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = " + db +
         " AND table_name NOT IN ('outbox_migrations', 'inbox_migrations') ORDER BY table_name";
}

std::string CatalogRoutines(const std::string& db) {
  return "SELECT routine_name, routine_type FROM information_schema.routines WHERE "
         "routine_schema = " + db + " ORDER BY routine_name";
}

std::string HasTable(const std::string& db, const std::string& table) {
  return "SELECT count(*) FROM information_schema.tables WHERE table_schema = " + db +
         " AND table_name = " + table;
}

std::string DatabaseCharset(const std::string& db) {
  return "SELECT default_character_set_name, default_collation_name FROM "
         "information_schema.schemata WHERE schema_name = " + db;
}

std::string ShowCreate(const std::string& kind, const std::string& db, const std::string& name) {
  auto tick = [](const std::string& id) {
    std::string out = "`";
    for (char ch : id) out += ch == '`' ? std::string("``") : std::string(1, ch);
    return out + "`";
  };
  return "SHOW CREATE " + kind + " " + tick(db) + "." + tick(name);
}

}  // namespace outbox::maria::sql
