// The ordered claim's choice, as a pure function (unit-tested): which rows of
// the candidate heads and their aggregates' unsent rows one claim takes.
// Internal to the MariaDB store, which reads the inputs with plain (consistent)
// reads and then locks exactly the chosen rows.
#ifndef OUTBOX_SRC_STORE_MARIADB_CLAIM_PLAN_H_
#define OUTBOX_SRC_STORE_MARIADB_CLAIM_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace outbox::maria {

// An unsent row of one of the heads' aggregates (or a head itself).
struct UnsentRow {
  std::int64_t seq = 0;
  std::string aggregate_type, aggregate_id;
  bool claimable = false;  // PENDING/PROCESSING, due, attempts < max_attempts
  int attempts = 0;
  std::int64_t bytes = 0;  // payload length
};

struct ClaimPick {
  std::vector<std::int64_t> heads;  // in seq order
  // Per head (same index): the rows of its run behind it, in seq order.
  std::vector<std::vector<std::int64_t>> runs;
  std::size_t size() const;
};

// `heads`: due rows with no earlier unsent row of their aggregate, in seq
// order. `aggregate_rows`: every unsent row (per the hold policy) of those
// heads' aggregates, any order. Walks the heads in seq order: each head is
// taken (one row always comes, then never over `batch_bytes`); behind a head
// whose attempts are below `max_attempts`, the contiguous prefix of claimable
// rows of its aggregate, as far as batch_size and batch_bytes allow.
ClaimPick PlanOrderedClaim(const std::vector<UnsentRow>& heads,
                           const std::vector<UnsentRow>& aggregate_rows, int batch_size,
                           std::int64_t batch_bytes, int max_attempts);

}  // namespace outbox::maria

#endif  // OUTBOX_SRC_STORE_MARIADB_CLAIM_PLAN_H_
