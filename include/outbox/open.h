// One factory from a database URL to a store, whichever database it names:
// postgresql:// (or a libpq key=value conninfo) opens the PostgreSQL store,
// mysql:// the MariaDB/MySQL one. Tools and services that take a URL from
// their configuration open stores here instead of switching on the scheme.
//
// Thread-safety: the functions are safe to call from any thread; what they
// return is not (one database session each; see store.h, inbox.h).
// Ownership: the caller owns what they return.
#ifndef OUTBOX_OPEN_H_
#define OUTBOX_OPEN_H_

#include <chrono>
#include <memory>
#include <string>

#include "outbox/inbox.h"
#include "outbox/status.h"
#include "outbox/store.h"

namespace outbox {

struct StoreOptions {
  // postgresql://user@host:port/db (or key=value), or
  // mysql://user[:password]@host[:port]/database.
  std::string url;
  // PostgreSQL: the outbox's schema, validated as [a-z_][a-z0-9_]{0,62}.
  // MariaDB: ignored (the tables live in the URL's database).
  std::string schema = "outbox";
  SentMode sent_mode = SentMode::kUpdate;
  // PostgreSQL: kDetect opens what the schema holds; kLog / kRows force one
  // (`outboxctl migrate --layout`). MariaDB refuses kLog.
  StoreLayout layout = StoreLayout::kDetect;
  // Bounds each statement of the store's session, so a stuck server surfaces
  // as a retryable error instead of a hung caller.
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
  // PostgreSQL log layout: how often at most a relay's page ends write their
  // positions (PostgresStoreOptions::log_position_every; 0: every page end).
  std::chrono::milliseconds log_position_every{10};
};

// The URL with its password redacted, in either store's form (for logs and
// --print-config); a URL that does not parse is not shown at all.
std::string RedactDatabaseUrl(const std::string& url);

// Opens the URL's store (connects at once; a failed connection is Unavailable).
Result<std::unique_ptr<Store>> OpenStore(const StoreOptions& options);

// `outboxctl migrate --check`: the schema against what its migrations install
// (CheckPostgresSchema / CheckMariaDbSchema). Changes nothing. `versions_only`:
// applied, pending and unknown versions alone, read from the versions tables
// (what `outbox-relay` checks at start: exit 3 on a newer release's schema).
Result<SchemaCheck> CheckSchema(const StoreOptions& options, bool versions_only = false);

struct InboxViewOptions {
  std::string url;               // as StoreOptions::url
  std::string schema = "inbox";  // PostgreSQL: the inbox's schema; MariaDB: ignored
  std::string consumer;          // the consumer whose stamps PurgeStamps deletes; required
  std::chrono::seconds connect_timeout{5};
};

// The URL's inbox for operators (no handler: nothing is applied).
Result<std::unique_ptr<InboxView>> OpenInboxView(const InboxViewOptions& options);

}  // namespace outbox

#endif  // OUTBOX_OPEN_H_
