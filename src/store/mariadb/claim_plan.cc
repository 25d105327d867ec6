#include "claim_plan.h"

#include <algorithm>
#include <map>
#include <utility>

namespace outbox::maria {

std::size_t ClaimPick::size() const {
  std::size_t n = heads.size();
  for (const auto& r : runs) n += r.size();
  return n;
}

ClaimPick PlanOrderedClaim(const std::vector<UnsentRow>& heads,
                           const std::vector<UnsentRow>& aggregate_rows, int batch_size,
                           std::int64_t batch_bytes, int max_attempts) {
  using Key = std::pair<std::string, std::string>;
  std::map<Key, std::vector<const UnsentRow*>> by_aggregate;
  for (const UnsentRow& r : aggregate_rows) {
    by_aggregate[{r.aggregate_type, r.aggregate_id}].push_back(&r);
  }
  for (auto& [k, rows] : by_aggregate) {
    std::sort(rows.begin(), rows.end(),
              [](const UnsentRow* a, const UnsentRow* b) { return a->seq < b->seq; });
  }
  ClaimPick pick;
  const auto limit = static_cast<std::size_t>(std::max(batch_size, 1));
  std::size_t taken = 0;
  std::int64_t bytes = 0;
  for (const UnsentRow& h : heads) {
    if (taken >= limit) break;
    if (taken > 0 && bytes + h.bytes > batch_bytes) break;
    pick.heads.push_back(h.seq);
    pick.runs.emplace_back();
    ++taken;
    bytes += h.bytes;
    if (h.attempts >= max_attempts) continue;  // it turns FAILED: no run behind it
    auto it = by_aggregate.find({h.aggregate_type, h.aggregate_id});
    if (it == by_aggregate.end()) continue;
    for (const UnsentRow* r : it->second) {
      if (r->seq <= h.seq) continue;
      if (!r->claimable || taken >= limit || bytes + r->bytes > batch_bytes) break;
      pick.runs.back().push_back(r->seq);
      ++taken;
      bytes += r->bytes;
    }
  }
  return pick;
}

}  // namespace outbox::maria
