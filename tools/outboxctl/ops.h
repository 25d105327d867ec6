// outboxctl's operations as JSON documents: what `outboxctl --json` prints and
// what `outboxctl serve` answers, from one place. Every database access goes
// through the store interfaces (OutboxView, InboxView): no SQL here.
//
// Thread-safety: the functions keep no state; a Store is used by one thread at
// a time (the caller's). Each returns {"ok": true, ...} or the store's error.
#ifndef OUTBOX_TOOLS_OUTBOXCTL_OPS_H_
#define OUTBOX_TOOLS_OUTBOXCTL_OPS_H_

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "outbox/inbox.h"
#include "outbox/status.h"
#include "outbox/store.h"

namespace outbox::ctl {

// The outbox store the URL names (outbox::OpenStore): mysql:// is
// MariaDB/MySQL (its tables in the URL's database; the schema does not apply),
// anything else PostgreSQL.
// `layout` forces one (`migrate --layout`); by default the schema decides.
Result<std::unique_ptr<Store>> OpenOutboxStore(const std::string& db, const std::string& schema,
                                               StoreLayout layout = StoreLayout::kDetect);
// A consumer's inbox for operator commands (outbox::OpenInboxView).
Result<std::unique_ptr<InboxView>> OpenOperatorInbox(const std::string& db,
                                                     const std::string& schema,
                                                     const std::string& consumer);

// One record as a JSON object with typed values (trace: with the times and
// audit columns; otherwise with its age).
nlohmann::json ToRow(const EventRecord& e, bool trace);
nlohmann::json ToRow(const StampRecord& s);

// Rows per state, held aggregates, oldest unsent age.
Result<nlohmann::json> StatusReport(OutboxView& store, const std::string& schema);
// {"rows": [...]} in enqueue order (Store::List).
Result<nlohmann::json> ListReport(OutboxView& store, const ListFilter& filter);
// {"key", "outbox": [...]} and, with an inbox, "inbox": [stamps].
Result<nlohmann::json> TraceReport(OutboxView& store, InboxView* inbox, const std::string& key);
// {"window_seconds", "minutes": [{"minute", "sent", "failed"}], "relays": [...],
// "slots": [{"slot", "active", "wal_status", "retained_wal_bytes", "lag_seconds"}]}:
// the last `window` (outboxctl serve's chart and relay list) and, with a
// ledger, the replication slots of the change streams seen in it.
Result<nlohmann::json> ActivityJson(OutboxView& store, StreamLedger* ledger,
                                    std::chrono::seconds window);
// {"consumers": [{"consumer", "stamps", "oldest_stamp_age_seconds", "duplicates",
// "parked", "oldest_parked_age_seconds"}]}: every consumer of the inbox schema.
Result<nlohmann::json> InboxStatusJson(InboxView& inbox);
// {"matched", "replayed", "released", "oldest_age_seconds", "dry_run"}.
Result<nlohmann::json> ReplayReport(OutboxView& store, const ReplaySelection& selection);
// {"event_id", "was", "skipped", "released", "dry_run"}; "was" is "" when there
// is no such event, and the state when it could not be skipped.
Result<nlohmann::json> SkipReport(OutboxView& store, const SkipRequest& request);

}  // namespace outbox::ctl

#endif  // OUTBOX_TOOLS_OUTBOXCTL_OPS_H_
