// Defaults of the Store interface's optional (change data capture) part.
#include "outbox/store.h"

namespace outbox {
namespace {

Status NoStream() {
  return Status::FailedPrecondition(
      "this store has no change stream; use relay.source = poll");
}

}  // namespace

Result<ActivityReport> Store::RecentActivity(std::chrono::seconds) {
  return Status::FailedPrecondition("this store does not report its recent activity");
}

Result<std::vector<StreamRowState>> Store::StreamStates(std::span<const std::int64_t>, bool,
                                                       std::span<const std::int64_t>) {
  return NoStream();
}
Status Store::SaveStreamProgress(const StreamProgress&) { return NoStream(); }
Status Store::OpenStreamProgress(const std::string&, const std::string&) { return NoStream(); }
Status Store::DropStreamProgress(const std::string&) { return NoStream(); }
Result<SlotStatus> Store::StreamSlotStatus(const std::string&) { return NoStream(); }

}  // namespace outbox
