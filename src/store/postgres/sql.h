// All SQL of the PostgreSQL store, in one place. Every function takes the
// schema name, which the caller has validated with ValidateSchemaName (it is the
// only thing ever spliced into SQL text; values always go as parameters).
#ifndef OUTBOX_SRC_STORE_POSTGRES_SQL_H_
#define OUTBOX_SRC_STORE_POSTGRES_SQL_H_

#include <string>
#include <string_view>
#include <vector>

namespace outbox::pg::sql {

// True when `name` is a safe unquoted identifier: [a-z_][a-z0-9_]*, at most
// `max_bytes` long.
bool IsIdentifier(std::string_view name, std::size_t max_bytes = 63);
// PostgreSQL's reserved key words, which an unquoted identifier cannot be.
bool IsReservedWord(std::string_view name);

// Text from brokers, handlers and exceptions made storable in a text column:
// invalid UTF-8 and NUL bytes become '?', at most `max_bytes`.
std::string StorableText(const std::string& s, std::size_t max_bytes);

// Replaces every "{S}" in `text` with the (validated) schema name.
std::string WithSchema(std::string text, const std::string& schema);

// $1 schema: 'log', 'rows' or '' (which versions table the schema has).
std::string HeldLayout();

// The migration runner's statements (migrate.cc). `table` is the set's
// versions table, `lock_name` names its advisory lock.
std::string MigrateLock(const std::string& schema, const std::string& lock_name);
std::string EnsureMigrationsTable(const std::string& schema, const std::string& table);
std::string AppliedVersions(const std::string& schema, const std::string& table);
std::string RecordMigration(const std::string& schema, const std::string& table);

// `outboxctl migrate --check`. $1 schema: (object, definition) rows.
std::string CatalogObjects();
// $1 schema, $2 table name: one boolean.
std::string HasTable();

// $1 event payload fields ... see enqueue.cc
std::string Enqueue(const std::string& schema);
// Arrays of the events' fields; see sql.cc.
std::string EnqueueBatch(const std::string& schema);

// $1 batch, $2 owner, $3 lease ms, $4 max attempts, $5 FAILED holds its aggregate,
// $6 batch bytes, $7 CDC sweep margin ms (NULL: no bound), $8 stream stale after ms
std::string ClaimOrdered(const std::string& schema);
std::string ClaimUnordered(const std::string& schema);
// $1 bigint[] seqs, $2 bigint[] tokens
std::string MarkSentUpdate(const std::string& schema);
std::string MarkSentDelete(const std::string& schema);
// $1 jsonb [{seq, token, delay_ms, error}], $2 bigint[] the same seqs
std::string Reschedule(const std::string& schema);
// $1 jsonb [{seq, token, error}], $2 bigint[] the same seqs
std::string MarkFailed(const std::string& schema);
// $1 retention seconds, $2 batch
std::string PurgeSent(const std::string& schema);
std::string Stats(const std::string& schema);
// Change data capture (relay.source = cdc). $1 bigint[] seqs, $2 FAILED holds
std::string StreamStates(const std::string& schema);
// $1 slot, $2 reader, $3 LSN text, $4 covered-until µs
std::string SaveStreamProgress(const std::string& schema);
std::string RecentActivity(const std::string& schema);  // $1 window in seconds
std::string OpenStreamProgress(const std::string& schema);  // $1 slot, $2 reader
std::string DropStreamProgress(const std::string& schema);  // $1 slot
std::string SlotStatus(const std::string& schema);          // $1 slot
std::string CountSent(const std::string& schema);

// Operators. $1 event id ('' = any), $2 aggregate id, $3 event type, $4 dry run
std::string ReplayFailed(const std::string& schema);
// $1 event id, $2 who, $3 reason, $4 dry run
std::string Skip(const std::string& schema);
std::string OldestUnsent(const std::string& schema);
// $1 state, $2 aggregate id, $3 event type ('' = any), $4 older than s (0 = any), $5 limit
std::string List(const std::string& schema);
// $1 event id or dedup key
std::string Find(const std::string& schema);

// Inbox. $1 consumer, $2 text[] keys, $3 text[] topics, $4 int[] partitions,
// $5 bigint[] offsets; returns the keys that were new.
std::string InboxInsertStamps(const std::string& schema);
// $1 consumer, $2 text[] keys: takes back this batch's stamps of messages
// whose effect failed outside the transaction (PostgresInboxOptions).
std::string InboxDeleteStamps(const std::string& schema);
// $1 consumer, $2 key, $3 topic, $4 partition, $5 offset
std::string InboxInsertStamp(const std::string& schema);
// $1 consumer, $2 text[] keys (one entry per absorbed copy)
std::string InboxCountDuplicates(const std::string& schema);
// $1 consumer, $2 horizon seconds, $3 batch
std::string InboxPurgeStamps(const std::string& schema);
// $1 horizon seconds: per consumer stamps, older than it, oldest age; parked
std::string InboxSummary(const std::string& schema);
// $1 text[] dedup keys
std::string InboxFindStamps(const std::string& schema);
// Ordered mode's parked queue. $1 consumer, then see sql.cc.
std::string InboxParkedKeys(const std::string& schema);
std::string InboxPark(const std::string& schema);
std::string InboxDue(const std::string& schema);
std::string InboxUnpark(const std::string& schema);
std::string InboxReschedule(const std::string& schema);

}  // namespace outbox::pg::sql

#endif  // OUTBOX_SRC_STORE_POSTGRES_SQL_H_
