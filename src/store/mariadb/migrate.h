// The MariaDB migration runner (outbox and inbox). Internal.
#ifndef OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_
#define OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_

#include <string>
#include <vector>

#include "session.h"
#include "sql.h"

namespace outbox::maria {

// Applies the missing versions of `migrations`, recorded in `table`, under the
// named lock `lock` + the database's name (concurrent runs serialise).
// `applied_now` (optional) receives the versions this call applied, in order.
Status RunMigrations(MYSQL* conn, const std::string& table, const std::string& lock,
                     const std::vector<sql::Migration>& migrations,
                     std::vector<int>* applied_now = nullptr);

}  // namespace outbox::maria

#endif  // OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_
