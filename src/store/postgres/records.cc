#include "records.h"

#include <cstdlib>

namespace outbox::pg {
namespace {

// bytea's text form ("\\x6869") as its bytes.
std::string FromHexBytea(const std::string& t) {
  std::string out;
  if (t.size() < 2 || t[0] != '\\' || t[1] != 'x') return out;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  out.reserve((t.size() - 2) / 2);
  for (std::size_t i = 2; i + 1 < t.size(); i += 2) {
    out.push_back(static_cast<char>(nibble(t[i]) * 16 + nibble(t[i + 1])));
  }
  return out;
}

}  // namespace

Result<std::vector<EventRecord>> EventRecords(Result<pg::ResultPtr> res) {
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  std::vector<EventRecord> out;
  for (int i = 0; i < PQntuples(r); ++i) {
    EventRecord e;
    e.seq = GetInt64(r, i, 0);
    e.event_id = GetText(r, i, 1);
    e.aggregate_type = GetText(r, i, 2);
    e.aggregate_id = GetText(r, i, 3);
    e.event_type = GetText(r, i, 4);
    e.status = GetText(r, i, 5);
    e.attempts = static_cast<int>(GetInt64(r, i, 6));
    e.age_seconds = std::strtod(PQgetvalue(r, i, 7), nullptr);
    e.dedup_key = GetText(r, i, 8);
    e.last_error = GetText(r, i, 9);
    e.lease_owner = GetText(r, i, 10);
    e.created_at = GetText(r, i, 11);
    e.claimed_at = GetText(r, i, 12);
    e.sent_at = GetText(r, i, 13);
    e.failed_at = GetText(r, i, 14);
    e.skipped_at = GetText(r, i, 15);
    e.skipped_by = GetText(r, i, 16);
    e.skip_reason = GetText(r, i, 17);
    if (PQnfields(r) >
        20) {  // Find: headers, payload size, its first bytes (bytea as hex text)
      e.headers = GetText(r, i, 18);
      e.payload_bytes = GetInt64(r, i, 19);
      e.payload_preview = FromHexBytea(GetText(r, i, 20));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace outbox::pg
