// The Store's parts (include/outbox/store.h).
#include "outbox/store.h"

namespace outbox {
namespace {

// A store's ledger that owns the store.
class OwnedLedger final : public StreamLedger {
 public:
  explicit OwnedLedger(std::unique_ptr<Store> store)
      : store_(std::move(store)), ledger_(*store_->Ledger()) {}

  Result<std::vector<StreamRowState>> StreamStates(std::span<const std::int64_t> seqs,
                                                   bool failed_holds_aggregate,
                                                   std::span<const std::int64_t> acked) override {
    return ledger_.StreamStates(seqs, failed_holds_aggregate, acked);
  }
  Status SaveStreamProgress(const StreamProgress& progress) override {
    return ledger_.SaveStreamProgress(progress);
  }
  Status OpenStreamProgress(const std::string& slot, const std::string& reader) override {
    return ledger_.OpenStreamProgress(slot, reader);
  }
  Status DropStreamProgress(const std::string& slot) override {
    return ledger_.DropStreamProgress(slot);
  }
  Result<SlotStatus> StreamSlotStatus(const std::string& slot) override {
    return ledger_.StreamSlotStatus(slot);
  }

 private:
  std::unique_ptr<Store> store_;
  StreamLedger& ledger_;  // store_'s
};

}  // namespace

Result<std::unique_ptr<StreamLedger>> AsLedger(std::unique_ptr<Store> store) {
  if (store->Ledger() == nullptr) {
    return Status::FailedPrecondition("this store has no change stream; use relay.source = poll");
  }
  return std::unique_ptr<StreamLedger>(std::make_unique<OwnedLedger>(std::move(store)));
}

}  // namespace outbox
