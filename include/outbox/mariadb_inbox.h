// The MariaDB side of the inbox: an InboxStore whose stamps live in the
// consumer's own MariaDB/MySQL database (the URL's), next to the tables its
// handler writes.
//
// Per batch, one transaction: for each message a savepoint, its stamp (INSERT
// ... ON DUPLICATE KEY UPDATE, which counts a duplicate on the existing
// stamp), and for a new stamp the handler on the same open transaction; a
// failing handler rolls back to its savepoint, undoing only its own stamp and
// writes; one COMMIT. If the COMMIT itself fails, the batch is redone with one
// transaction per message so that the message whose commit fails gets its own
// outcome and the others apply.
//
// This header does not include libmariadb: the connection is the opaque
// `st_mysql` that MYSQL is a typedef of.
//
// Thread-safety: the store owns one session; not safe for concurrent use.
// Handlers run on the thread that calls Apply().
#ifndef OUTBOX_MARIADB_INBOX_H_
#define OUTBOX_MARIADB_INBOX_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "outbox/inbox.h"
#include "outbox/status.h"

struct st_mysql;  // libmariadb's MYSQL

namespace outbox {

// Runs inside the open transaction on `txn` (inside a savepoint). It must not
// COMMIT or ROLLBACK. A thrown exception is treated as kTransient. It may run
// more than once for one delivery when its batch is redone (only its committed
// run counts).
using MariaDbHandler = std::function<HandlerResult(const InboundMessage& msg, st_mysql* txn)>;

struct MariaDbInboxOptions {
  std::string url;       // mysql://user[:password]@host[:port]/database
  std::string consumer;  // consumer name, part of the stamp key; required, <= 128 characters
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
  // Count each absorbed copy on its stamp (duplicates, last_duplicate_at).
  bool count_duplicates = true;
};

// Connects at once (a failed connection is Unavailable; later calls reconnect).
// `handler` is kept (copied); what it captures must outlive the store.
Result<std::unique_ptr<InboxStore>> OpenMariaDbInbox(const MariaDbInboxOptions& options,
                                                     MariaDbHandler handler);

// For operators: migrate, summarise, find and purge stamps (no handler).
Result<std::unique_ptr<InboxView>> OpenMariaDbInboxView(const MariaDbInboxOptions& options);

}  // namespace outbox

#endif  // OUTBOX_MARIADB_INBOX_H_
