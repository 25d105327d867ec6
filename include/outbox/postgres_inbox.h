// The PostgreSQL side of the inbox: an InboxStore whose stamps live in the
// consumer's own PostgreSQL database, next to the tables its handler writes.
//
// Per batch: one statement inserts the stamps of all messages (ON CONFLICT DO
// NOTHING ... RETURNING tells which are new), the handler runs for each new
// one on the same open transaction, one COMMIT. If a handler fails, the batch is
// redone with a savepoint per message, so a failure undoes only its own stamp
// and writes. If the COMMIT itself fails (a deferred constraint, a
// serialization failure), the batch is redone with one transaction per message,
// so the message whose commit fails gets its own outcome (kPermanent, or
// kTransient for a serialization failure or deadlock) and the others apply.
//
// This header does not include libpq: the connection is the opaque `pg_conn`
// that libpq's PGconn is a typedef of.
//
// Thread-safety: the store owns one database session; not safe for concurrent
// use. Handlers run on the thread that calls Apply().
#ifndef OUTBOX_POSTGRES_INBOX_H_
#define OUTBOX_POSTGRES_INBOX_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>
#include <string>

#include "outbox/inbox.h"
#include "outbox/status.h"

struct pg_conn;  // libpq's PGconn

namespace outbox {

// Runs inside the open transaction on `txn` (a libpq connection in a
// transaction block, maybe inside a savepoint). It must not COMMIT or ROLLBACK.
// A thrown exception is treated as kTransient. It may run more than once for
// one delivery when its batch is redone (only its committed run counts).
using Handler = std::function<HandlerResult(const InboundMessage& msg, pg_conn* txn)>;

// Optional, for throughput: applies the effects of all new messages of a batch
// at once (e.g. one multi-row INSERT) on `txn`. Used on the fast path; if it
// fails, the batch is redone message by message with the per-message Handler.
// It must do exactly what the Handler would do for each.
using BatchHandler =
    std::function<HandlerResult(std::span<const InboundMessage* const> msgs, pg_conn* txn)>;

// For a handler that only writes (the common case: insert a row, bump a
// counter): instead of running its statements, it queues them on the sink. The
// inbox sends the statements of every new message of a batch in one pipeline
// (libpq pipeline mode: one round trip) inside the batch's transaction. If one
// fails, the batch is redone message by message, each message's statements in
// its own savepoint. A failed statement is kPermanent when PostgreSQL says the
// data is wrong (SQLSTATE class 22 or 23), else kTransient.
//
// Thread-safety: a sink is valid only during the handler call that received it.
class StatementSink {
 public:
  // `sql` with $1..$n placeholders; parameters as text, std::nullopt for NULL.
  virtual void Add(std::string sql, std::vector<std::optional<std::string>> params = {}) = 0;
  // The same with the parameters' PostgreSQL types (one OID per parameter:
  // 17 bytea, 25 text, 3802 jsonb...), for a statement that does not fix them
  // itself (a parameter it never uses, an overloaded function). Empty: inferred.
  virtual void Add(std::string sql, std::vector<std::optional<std::string>> params,
                   std::vector<unsigned> type_oids) = 0;

 protected:
  ~StatementSink() = default;
};

using SinkHandler = std::function<HandlerResult(const InboundMessage& msg, StatementSink& sink)>;

struct PostgresInboxOptions {
  std::string conninfo;
  std::string schema = "inbox";  // validated like the outbox schema (ValidateSchemaName)
  std::string consumer;          // consumer name, part of the stamp key; required
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
  // Count each absorbed copy on its stamp (`duplicates`, `last_duplicate_at`;
  // shown by `outboxctl trace`). One UPDATE per batch that holds duplicates;
  // off saves that write when whole topics are replayed (docs/benchmarks.md).
  bool count_duplicates = true;
  // How a SinkHandler's failed statement is classified, from its SQLSTATE.
  // nullptr: HandlerResult::FromSqlState's rule (class 22 and 23 permanent);
  // SqlHandlerErrorClass is the rule for a handler that is one statement.
  // Connection loss and statement timeouts fail the whole batch either way
  // (Apply's error: consumed again).
  std::function<ErrorClass(std::string_view sqlstate)> classify_sqlstate = nullptr;
  // The Handler's effect is outside the database (an HTTP POST: it runs no SQL
  // on the session; SQL a failing handler did run would commit with the
  // batch). A failed message is then its own outcome within the batch's
  // transaction: its stamp is taken back, and the messages before it are not
  // run again (unless the COMMIT fails or the connection is lost: the batch is
  // then redone as without this option). A later copy of a failed message's
  // key in the same batch counts as a duplicate (the failed one is retried).
  // Off (the default), a failure rolls the batch back and redoes it with a
  // savepoint per message, running the earlier messages' handlers once more,
  // which is what keeps a SQL effect and its stamp together. Ignored for a
  // SinkHandler or BatchHandler; if the session is not in a clean transaction
  // after the handler, the default path is taken.
  bool effects_outside_transaction = false;
};

// Connects at once (a failed connection is Unavailable; later calls reconnect).
// `handler` is required; `batch_handler` optional. Both are kept (copied) by the
// store; what they capture must outlive it.
Result<std::unique_ptr<InboxStore>> OpenPostgresInbox(const PostgresInboxOptions& options,
                                                      Handler handler,
                                                      BatchHandler batch_handler = nullptr);

// For operators (outboxctl): migrate, summarise, find and purge stamps (no handler).
Result<std::unique_ptr<InboxView>> OpenPostgresInboxView(const PostgresInboxOptions& options);

// The same with a handler that queues its statements (see StatementSink).
Result<std::unique_ptr<InboxStore>> OpenPostgresInbox(const PostgresInboxOptions& options,
                                                      SinkHandler handler);

}  // namespace outbox

#endif  // OUTBOX_POSTGRES_INBOX_H_
