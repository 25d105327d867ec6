// The MariaDB store's runtime SQL, in one place (the schema is in
// migrations/). Internal.
#ifndef OUTBOX_SRC_STORE_MARIADB_SQL_H_
#define OUTBOX_SRC_STORE_MARIADB_SQL_H_

namespace outbox::maria::sql {}  // namespace outbox::maria::sql

#endif  // OUTBOX_SRC_STORE_MARIADB_SQL_H_
