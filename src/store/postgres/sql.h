// All SQL of the PostgreSQL store, in one place. Every function takes the
// schema name, which the caller has validated with ValidateSchemaName (it is the
// only thing ever spliced into SQL text; values always go as parameters).
#ifndef OUTBOX_SRC_STORE_POSTGRES_SQL_H_
#define OUTBOX_SRC_STORE_POSTGRES_SQL_H_

#include <string>
#include <vector>

namespace outbox::pg::sql {

struct Migration {
  int version;
  const char* description;
  std::string script;
};

// Ordered, append-only list. Never edit a released migration; add a new one.
std::vector<Migration> Migrations(const std::string& schema);

std::string MigrateLock(const std::string& schema);
std::string EnsureMigrationsTable(const std::string& schema);
std::string AppliedVersions(const std::string& schema);
std::string RecordMigration(const std::string& schema);

// $1 event payload fields ... see enqueue.cc
std::string Enqueue(const std::string& schema);

// $1 batch, $2 owner, $3 lease ms, $4 max attempts, $5 FAILED holds its aggregate
std::string LockAggregates(const std::string& schema);
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
std::string CountSent(const std::string& schema);

}  // namespace outbox::pg::sql

#endif  // OUTBOX_SRC_STORE_POSTGRES_SQL_H_
