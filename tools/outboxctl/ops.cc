#include "ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "outbox/event.h"
#include "outbox/open.h"
#include "outbox/parse.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

// "12" as the number 12; "" (unknown) as null.
json IntegerOrNull(const std::string& s) {
  auto v = ParseInteger("value", s, INT64_MIN, INT64_MAX);
  return v.ok() ? json(*v) : json(nullptr);
}

// The payload for reading: its text when it is UTF-8 (the first
// kPayloadPreviewBytes bytes, the length said when there is more), else a note.
std::string PayloadText(const EventRecord& e) {
  std::string text = e.payload_preview;
  const bool cut = static_cast<std::int64_t>(text.size()) < e.payload_bytes;
  // The preview may end inside a multi-byte character.
  for (int drop = 0; cut && drop < 3 && !text.empty() && !IsValidText(text); ++drop) text.pop_back();
  if (!IsValidText(text)) {
    return "(not UTF-8 text: " + std::to_string(e.payload_bytes) + " bytes)";
  }
  if (cut) text += "… (the first " + std::to_string(text.size()) + " of " + std::to_string(e.payload_bytes) + " bytes)";
  return text;
}

}  // namespace

Result<std::unique_ptr<Store>> OpenOutboxStore(const std::string& db, const std::string& schema,
                                               StoreLayout layout) {
  return OpenStore({.url = db, .schema = schema, .layout = layout});
}

Result<std::unique_ptr<InboxView>> OpenOperatorInbox(const std::string& db,
                                                     const std::string& schema,
                                                     const std::string& consumer) {
  return OpenInboxView({.url = db, .schema = schema, .consumer = consumer});
}

json ToRow(const EventRecord& e, bool trace) {
  json r = {{"seq", e.seq},
            {"event_id", e.event_id},
            {"aggregate_type", e.aggregate_type},
            {"aggregate_id", e.aggregate_id},
            {"event_type", e.event_type},
            {"status", e.status},
            {"attempts", e.attempts},
            {"dedup_key", e.dedup_key},
            {"last_error", e.last_error}};
  if (!trace) {
    r["age_s"] = std::round(e.age_seconds * 10) / 10;
    return r;
  }
  for (const auto& [k, v] : std::vector<std::pair<const char*, const std::string*>>{
           {"lease_owner", &e.lease_owner}, {"created_at", &e.created_at},
           {"claimed_at", &e.claimed_at},   {"sent_at", &e.sent_at},
           {"failed_at", &e.failed_at},     {"skipped_at", &e.skipped_at},
           {"skipped_by", &e.skipped_by},   {"skip_reason", &e.skip_reason}}) {
    r[k] = *v;
  }
  if (e.payload_bytes >= 0) {
    r["payload_bytes"] = e.payload_bytes;
    json headers = json::parse(e.headers, nullptr, /*allow_exceptions=*/false);
    r["headers"] = headers.is_discarded() ? json(e.headers) : headers;
    r["payload"] = PayloadText(e);
  }
  return r;
}

json ToRow(const StampRecord& s) {
  return {{"consumer", s.consumer},
          {"dedup_key", s.dedup_key},
          {"applied_at", s.applied_at},
          {"topic", s.topic},
          {"partition", IntegerOrNull(s.partition)},
          {"offset", IntegerOrNull(s.offset)},
          {"duplicates", s.duplicates}};
}

Result<json> StatusReport(OutboxView& store, const std::string& schema) {
  auto s = store.Stats();
  if (!s.ok()) return s.status();
  auto sent = store.CountSent();
  if (!sent.ok()) return sent.status();
  return json{{"ok", true},
              {"schema", schema},
              {"pending", s->pending},
              {"processing", s->processing},
              {"sent", *sent},
              {"failed", s->failed},
              {"skipped", s->skipped},
              {"held_aggregates", s->held_aggregates},
              {"oldest_unsent_age_seconds", static_cast<double>(s->oldest_unsent_age.count()) / 1000.0}};
}

Result<json> ListReport(OutboxView& store, const ListFilter& filter) {
  auto records = store.List(filter);
  if (!records.ok()) return records.status();
  json rows = json::array();
  for (const auto& e : *records) rows.push_back(ToRow(e, /*trace=*/false));
  return json{{"ok", true}, {"rows", std::move(rows)}};
}

Result<json> TraceReport(OutboxView& store, InboxView* inbox, const std::string& key) {
  auto records = store.Find(key);
  if (!records.ok()) return records.status();
  json rows = json::array();
  for (const auto& e : *records) rows.push_back(ToRow(e, /*trace=*/true));
  json out = {{"ok", true}, {"key", key}, {"outbox", rows}};
  if (inbox != nullptr) {
    json stamps = json::array();
    if (!records->empty()) {
      std::vector<std::string> keys;
      for (const auto& e : *records) {
        keys.push_back(e.event_id);
        if (!e.dedup_key.empty()) keys.push_back(e.dedup_key);
      }
      auto found = inbox->FindStamps(keys);
      if (!found.ok()) return found.status();
      for (const auto& st : *found) stamps.push_back(ToRow(st));
    }
    out["inbox"] = std::move(stamps);
  }
  return out;
}

Result<json> ActivityJson(OutboxView& store, StreamLedger* ledger, std::chrono::seconds window) {
  auto r = store.RecentActivity(window);
  if (!r.ok()) return r.status();
  std::sort(r->minutes.begin(), r->minutes.end(),
            [](const ActivityMinute& a, const ActivityMinute& b) { return a.minute < b.minute; });
  json minutes = json::array();
  for (const auto& m : r->minutes) {
    minutes.push_back({{"minute", m.minute}, {"sent", m.sent}, {"failed", m.failed}});
  }
  json relays = json::array();
  json slots = json::array();
  for (const auto& x : r->relays) {
    relays.push_back({{"relay", x.relay}, {"role", x.role}, {"last_seen", x.last_seen}, {"rows", x.rows}});
    // A change stream's slot: the WAL it keeps (what operators fear most).
    constexpr std::string_view kStream = "stream ";
    if (ledger == nullptr || x.role.rfind(kStream, 0) != 0) continue;
    const std::string slot = x.role.substr(kStream.size());
    auto st = ledger->StreamSlotStatus(slot);
    if (!st.ok() || !st->exists) continue;
    slots.push_back({{"slot", slot},
                     {"active", st->active},
                     {"wal_status", st->wal_status},
                     {"retained_wal_bytes", st->retained_wal_bytes},
                     {"lag_seconds", st->lag ? json(static_cast<double>(st->lag->count()) / 1000.0)
                                             : json(nullptr)}});
  }
  return json{{"ok", true},
              {"window_seconds", window.count()},
              {"minutes", std::move(minutes)},
              {"relays", std::move(relays)},
              {"slots", std::move(slots)}};
}

Result<json> InboxStatusJson(InboxView& inbox) {
  auto summary = inbox.Summary(std::chrono::seconds(0));
  if (!summary.ok()) return summary.status();
  json rows = json::array();
  for (const auto& s : *summary) {
    rows.push_back({{"consumer", s.consumer},
                    {"stamps", s.stamps},
                    {"oldest_stamp_age_seconds", s.oldest_stamp_age.count()},
                    {"duplicates", s.duplicates},
                    {"parked", s.parked},
                    {"oldest_parked_age_seconds", s.oldest_parked_age.count()}});
  }
  return json{{"ok", true}, {"consumers", std::move(rows)}};
}

Result<json> ReplayReport(OutboxView& store, const ReplaySelection& selection) {
  auto r = store.ReplayFailed(selection);
  if (!r.ok()) return r.status();
  return json{{"ok", true},
              {"matched", r->matched},
              {"replayed", r->replayed},
              {"released", r->released},
              {"oldest_age_seconds", r->oldest_age.count()},
              {"dry_run", selection.dry_run}};
}

Result<json> SkipReport(OutboxView& store, const SkipRequest& request) {
  auto r = store.Skip(request);
  if (!r.ok()) return r.status();
  return json{{"ok", true},
              {"event_id", request.event_id},
              {"was", r->was},
              {"skipped", r->skipped},
              {"released", r->released},
              {"dry_run", request.dry_run}};
}

}  // namespace outbox::ctl
