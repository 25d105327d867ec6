// The one place that maps a URL's scheme to a store (include/outbox/open.h).
#include "outbox/open.h"

#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/postgres.h"
#include "outbox/postgres_inbox.h"

namespace outbox {
namespace {

MariaDbStoreOptions Maria(const StoreOptions& o) {
  return {.url = o.url,
          .sent_mode = o.sent_mode,
          .statement_timeout = o.statement_timeout,
          .connect_timeout = o.connect_timeout};
}

PostgresStoreOptions Postgres(const StoreOptions& o) {
  return {.conninfo = o.url,
          .schema = o.schema,
          .sent_mode = o.sent_mode,
          .statement_timeout = o.statement_timeout,
          .connect_timeout = o.connect_timeout,
          .layout = o.layout,
          .log_position_every = o.log_position_every};
}

}  // namespace

std::string RedactDatabaseUrl(const std::string& url) {
  return IsMariaDbUrl(url) ? RedactMariaDbUrl(url) : RedactConninfo(url);
}

Result<std::unique_ptr<Store>> OpenStore(const StoreOptions& options) {
  if (IsMariaDbUrl(options.url)) {
    if (options.layout == StoreLayout::kLog) {
      return Status::InvalidArgument("--layout log: MariaDB keeps the row store (the log needs PostgreSQL's snapshots)");
    }
    return OpenMariaDbStore(Maria(options));
  }
  return OpenPostgresStore(Postgres(options));
}

Result<SchemaCheck> CheckSchema(const StoreOptions& options, bool versions_only) {
  if (IsMariaDbUrl(options.url)) {
    return CheckMariaDbSchema({.url = options.url, .connect_timeout = options.connect_timeout},
                              versions_only);
  }
  return CheckPostgresSchema(Postgres(options), versions_only);
}

Result<std::unique_ptr<InboxView>> OpenInboxView(const InboxViewOptions& options) {
  if (IsMariaDbUrl(options.url)) {
    MariaDbInboxOptions m;
    m.url = options.url;
    m.consumer = options.consumer;
    m.connect_timeout = options.connect_timeout;
    return OpenMariaDbInboxView(m);
  }
  PostgresInboxOptions p;
  p.conninfo = options.url;
  p.schema = options.schema;
  p.consumer = options.consumer;
  p.connect_timeout = options.connect_timeout;
  return OpenPostgresInboxView(p);
}

}  // namespace outbox
