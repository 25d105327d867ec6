#include "outbox/cloudevents.h"

#include <strings.h>

#include <algorithm>

#include "outbox/time.h"

namespace outbox {
namespace {

class CloudEventsTransport final : public Transport {
 public:
  CloudEventsTransport(std::unique_ptr<Transport> inner, std::string prefix, std::string source)
      : inner_(std::move(inner)), prefix_(std::move(prefix)), source_(std::move(source)) {}

  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    std::vector<ClaimedEvent> copies(events.begin(), events.end());
    for (ClaimedEvent& e : copies) {
      std::vector<Header> attrs = CloudEventsAttributes(e, prefix_, source_);
      std::erase_if(e.event.headers, [&](const Header& h) {
        return std::any_of(attrs.begin(), attrs.end(), [&](const Header& a) {
          return strcasecmp(a.name.c_str(), h.name.c_str()) == 0;
        });
      });
      e.event.headers.insert(e.event.headers.end(), std::make_move_iterator(attrs.begin()),
                             std::make_move_iterator(attrs.end()));
    }
    return inner_->Publish(copies);
  }
  std::chrono::milliseconds MaxPublishTime() const override { return inner_->MaxPublishTime(); }
  std::string DescribeMaxPublishTime() const override { return inner_->DescribeMaxPublishTime(); }
  bool Healthy() const override { return inner_->Healthy(); }
  std::string UnhealthyReason() const override { return inner_->UnhealthyReason(); }
  std::string PeerName() const override { return inner_->PeerName(); }

 private:
  const std::unique_ptr<Transport> inner_;
  const std::string prefix_, source_;
};

}  // namespace

std::vector<Header> CloudEventsAttributes(const ClaimedEvent& e, const std::string& prefix,
                                          const std::string& source) {
  return {{prefix + "id", e.event_id},
          {prefix + "source", source},
          {prefix + "type", e.event.event_type},
          {prefix + "specversion", "1.0"},
          {prefix + "time", FormatRfc3339(e.created_at, 6)},
          {prefix + "subject", e.event.aggregate_id}};
}

std::unique_ptr<Transport> WithCloudEvents(std::unique_ptr<Transport> inner, std::string prefix,
                                           std::string source) {
  return std::make_unique<CloudEventsTransport>(std::move(inner), std::move(prefix), std::move(source));
}

}  // namespace outbox
