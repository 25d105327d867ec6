// Saga guards (seed 004): small helpers for consumers that drive state machines,
// meant to run inside the inbox's transaction (the handler's `txn`).
//
// All three are single conditional UPDATEs: the database decides atomically
// whether the step applies, so a duplicate, a stale or an early event changes
// nothing. Table and column names are validated identifiers; values are
// parameters.
#ifndef OUTBOX_SAGA_H_
#define OUTBOX_SAGA_H_

#include <cstdint>
#include <span>
#include <string>

#include "outbox/status.h"

struct pg_conn;

namespace outbox::saga {

struct StateColumn {
  std::string table;         // may be schema-qualified: "orders" or "shop.orders"
  std::string id_column;     // primary key column
  std::string state_column;  // text column holding the state
};

// UPDATE table SET state = to WHERE id = $id AND state IN (from...).
// Returns true when it applied (the row was in an allowed predecessor state).
Result<bool> Transition(pg_conn* txn, const StateColumn& c, const std::string& id,
                        std::span<const std::string> from, const std::string& to);

// Version/step guard: UPDATE table SET version = $v WHERE id = $id AND version < $v.
// True when the event is newer than what the row has seen; false = stale, ignore it.
Result<bool> AdvanceVersion(pg_conn* txn, const std::string& table, const std::string& id_column,
                            const std::string& version_column, const std::string& id,
                            std::int64_t version);

// A compensation that applies only where its precondition holds: the row must
// be in one of `applied_states` (the forward step happened). A compensation that
// arrives before its forward event finds no such row and reverses nothing;
// returns false. (Same statement as Transition; named for what it guards.)
Result<bool> Compensate(pg_conn* txn, const StateColumn& c, const std::string& id,
                        std::span<const std::string> applied_states,
                        const std::string& compensated_state);

}  // namespace outbox::saga

#endif  // OUTBOX_SAGA_H_
