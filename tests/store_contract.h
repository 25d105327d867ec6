// The store contract suite: every Store implementation (PostgreSQL now; SQLite
// and MySQL later) must pass these tests. An implementation provides a harness
// that gives each test a fresh, migrated outbox and a way to enqueue committed
// events and inspect rows; then it instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
//                            ::testing::Values(&MakePostgresHarness));
#ifndef OUTBOX_TESTS_STORE_CONTRACT_H_
#define OUTBOX_TESTS_STORE_CONTRACT_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outbox/postgres.h"
#include "outbox/store.h"

namespace outbox::testing {

struct RowView {
  std::string status;
  int attempts = 0;
  std::optional<std::string> last_error;
  std::optional<std::string> lease_owner;
};

class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  // A fresh empty outbox. Returns false if unavailable: after reporting why, or
  // with *skip set when skipping is explicitly allowed (OUTBOX_ALLOW_SKIP=1).
  virtual bool SetUp(bool* skip) = 0;
  // A new session on the same outbox (like another relay process).
  virtual std::unique_ptr<Store> NewStore() = 0;
  // Enqueues and commits, each event in its own transaction unless `one_txn`.
  virtual Result<std::vector<EnqueueResult>> Enqueue(std::span<const Event> events,
                                                     bool one_txn = true) = 0;
  virtual std::optional<RowView> Row(std::int64_t seq) = 0;
  // Whether the store writes each event's claim on its row (the row stores:
  // a claimed row is PROCESSING, leased alone, purged alone, its send time
  // kept), or, as the PostgreSQL log does, nothing per event on the happy
  // path: a relay leases whole slots, a claimed event still reads PENDING,
  // purge empties whole partitions, and only failures keep times. The tests
  // that differ say how.
  virtual bool PerRowState() const { return true; }
  virtual std::int64_t CountRows() = 0;
};

using HarnessFactory = std::unique_ptr<StoreHarness> (*)();

class StoreContractTest : public ::testing::TestWithParam<HarnessFactory> {
 protected:
  void SetUp() override;
  std::unique_ptr<Store> NewStore() { return harness_->NewStore(); }

  std::unique_ptr<StoreHarness> harness_;
  std::unique_ptr<Store> store_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_STORE_CONTRACT_H_
