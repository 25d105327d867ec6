// Operators' rows (outboxctl list / trace) read from a result: the columns of
// sql::List and sql::Find, which both PostgreSQL stores select. Internal to
// src/store/postgres.
#ifndef OUTBOX_SRC_STORE_POSTGRES_RECORDS_H_
#define OUTBOX_SRC_STORE_POSTGRES_RECORDS_H_

#include <vector>

#include "outbox/status.h"
#include "outbox/store.h"
#include "session.h"

namespace outbox::pg {

// Rows of sql::List / sql::Find (Find's three extra columns: headers, payload
// size, its first bytes).
Result<std::vector<EventRecord>> EventRecords(Result<ResultPtr> res);

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_RECORDS_H_
