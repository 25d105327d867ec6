// The MariaDB store's runtime SQL, in one place (the schema is in
// migrations/). Internal.
//
// The statements go to the server as text, so values are spliced in. Nothing
// here quotes or escapes (escaping needs the connection): every argument that
// stands for a text or bytes value is already an SQL literal made by the
// caller — maria::Quote, QuoteOrNull or HexLiteral, or NULL where a comment
// says so. Lists come formatted: `seqs` is "1,2,3" (SeqList); `tickets` is
// "(seq,token),..."; `keys` and the like are quoted literals joined by ", ".
// Numbers and durations are formatted here. The session's own statements
// (START TRANSACTION, COMMIT, ROLLBACK, SAVEPOINT, SET) stay with their callers.
#ifndef OUTBOX_SRC_STORE_MARIADB_SQL_H_
#define OUTBOX_SRC_STORE_MARIADB_SQL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace outbox::maria::sql {

// Enqueue (enqueue.cc). The event's fields as literals; `dedup_key` may be NULL.
std::string CallEnqueue(const std::string& aggregate_type, const std::string& aggregate_id,
                        const std::string& event_type, const std::string& payload,
                        const std::string& headers, const std::string& dedup_key);
// An aggregate's lock bucket, as outbox_enqueue computes it (quoted type and id).
std::string AggregateBucket(const std::string& aggregate_type, const std::string& aggregate_id);
// `buckets`: AggregateBucket expressions joined by ", ".
std::string LockAggregates(const std::string& buckets);

// The claim. A new lease token.
std::string NextLeaseToken();
// Unordered claim: the due rows' seq and payload length, locked (SKIP LOCKED).
std::string ClaimUnordered(int batch_size);
// Ordered claim: the due heads (seq, aggregate type and id, attempts, length).
std::string ClaimHeads(int batch_size, bool failed_holds_aggregate);
// A head whose aggregate's next unsent rows are read; its type and id quoted.
struct RunHead {
  std::string aggregate_type, aggregate_id;
  std::int64_t seq = 0;
};
// The rows behind `heads` (non-empty), at most `room` per head: seq, aggregate
// type and id, claimable (1/0), attempts, length.
std::string ClaimRuns(const std::vector<RunHead>& heads, int max_attempts,
                      bool failed_holds_aggregate, std::size_t room);
// Locks the chosen `seqs` that are still due (SKIP LOCKED).
std::string ClaimLock(const std::string& seqs);
// `owner` quoted; `token` from NextLeaseToken.
std::string ClaimUpdate(const std::string& seqs, const std::string& owner, const std::string& token,
                        std::chrono::milliseconds lease, int max_attempts);
// The claimed rows, as ClaimedEvent needs them.
std::string ClaimRead(const std::string& seqs);

// Fenced transitions. Locks the rows of `seqs` still held by `tickets` and
// PROCESSING (`sent_too`: or SENT).
std::string FenceLock(const std::string& seqs, const std::string& tickets, bool sent_too);
std::string MarkSentDelete(const std::string& seqs);
std::string MarkSentUpdate(const std::string& seqs);
// One rescheduled row; `error` quoted.
struct RescheduleRow {
  std::int64_t seq = 0;
  bool attempt_counts = true;
  std::chrono::milliseconds delay{0};  // negative: due now
  std::string error;
};
// `rows`: every rescheduled row; `seqs`: those of them that the fence let through.
std::string Reschedule(const std::vector<RescheduleRow>& rows, const std::string& seqs);
// One failed row; `error` quoted.
struct FailRow {
  std::int64_t seq = 0;
  std::string error;
};
// `rows`: every failed row; `seqs`: those of them that the fence let through.
std::string MarkFailed(const std::vector<FailRow>& rows, const std::string& seqs);

// Housekeeping and metrics. `batch` below 1 counts as 1.
std::string PurgeSent(std::chrono::seconds retention, int batch);
std::string Stats();
std::string RecentActivity(std::chrono::seconds window);
std::string CountSent();

// Operators. Filters are quoted literals, "" = any.
std::string ReplaySelect(const std::string& event_id, const std::string& aggregate_id,
                         const std::string& event_type);
std::string ReplayUpdate(const std::string& seqs);
// The aggregate's (quoted) PENDING rows after `first_seq`, except `seqs`.
std::string ReplayRelease(const std::string& aggregate_type, const std::string& aggregate_id,
                          std::int64_t first_seq, const std::string& seqs);
std::string SkipSelect(const std::string& event_id);
// `seq` as SkipSelect returned it; `by` and `reason` quoted.
std::string SkipUpdate(const std::string& seq, const std::string& by, const std::string& reason);
// The aggregate's (quoted) PENDING rows after `seq` (as SkipSelect returned it).
std::string SkipRelease(const std::string& aggregate_type, const std::string& aggregate_id,
                        const std::string& seq);
std::string OldestUnsent();
// EventRecord columns. `older_than` 0 = any age; `limit` below 0 counts as 0.
std::string List(const std::string& state, const std::string& aggregate_id,
                 const std::string& event_type, std::chrono::seconds older_than, int limit);
// EventRecord columns, then headers, payload size and its first bytes.
std::string Find(const std::string& key);

// Inbox (mariadb_inbox.cc). `consumer` is always quoted.
// The stamp: 1 row affected when new; on a duplicate 2 with `count_duplicates`
// (counted), else 0.
std::string InboxInsertStamp(const std::string& consumer, const std::string& key,
                             const std::string& topic, int partition, std::int64_t offset,
                             bool count_duplicates);
std::string InboxPurgeStamps(const std::string& consumer, std::chrono::seconds horizon, int batch);
// Per consumer: stamps, older than `horizon`, oldest age in s, duplicates.
std::string InboxSummaryStamps(std::chrono::seconds horizon);
// Per consumer: parked messages, oldest age in s.
std::string InboxSummaryParked();
std::string InboxFindStamps(const std::string& keys);
std::string InboxParkedKeys(const std::string& consumer, const std::string& order_keys);
// One parked message. Text quoted (`last_error` may be NULL), bytes as X'hex'
// literals (`payload` may be NULL).
struct ParkedRow {
  std::string consumer, order_key, dedup_key, topic;
  int partition = 0;
  std::int64_t offset = 0;
  std::string key, payload, headers;
  std::int64_t ts_ms = 0;
  int attempts = 0;
  std::string last_error;
  std::chrono::milliseconds delay{0};  // negative: due now
};
std::string InboxPark(const ParkedRow& row);
// `limit` below 0 counts as 0.
std::string InboxDue(const std::string& consumer, int limit);
// `ids`: "1,2,3".
std::string InboxUnpark(const std::string& consumer, const std::string& ids);
// `error` quoted; a negative `delay` is due now.
std::string InboxReschedule(const std::string& consumer, std::int64_t id, int attempts,
                            const std::string& error, std::chrono::milliseconds delay);

// `outboxctl migrate --check`. `db` / `table` quoted by the caller. The
// database's tables and sequences (name, type), the migration runner's
// versions tables left out; its routines (name, type); whether a table exists.
std::string CatalogTables(const std::string& db);
std::string CatalogRoutines(const std::string& db);
std::string HasTable(const std::string& db, const std::string& table);
// The database's default character set and collation (one row of two).
std::string DatabaseCharset(const std::string& db);
// SHOW CREATE <kind> `db`.`name` (names from the catalog, backquoted here).
std::string ShowCreate(const std::string& kind, const std::string& db, const std::string& name);

}  // namespace outbox::maria::sql

#endif  // OUTBOX_SRC_STORE_MARIADB_SQL_H_
