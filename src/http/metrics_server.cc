#include <httplib.h>

#include <thread>

#include "outbox/http.h"

namespace outbox {
namespace {

class HttplibServer final : public MetricsServer {
 public:
  HttplibServer(MetricsServer::Options o, const MetricsRegistry& r)
      : options_(std::move(o)), registry_(r) {}

  ~HttplibServer() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Bind() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry_.RenderPrometheus(), "text/plain; version=0.0.4");
    });
    server_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      const bool ready = !options_.ready || options_.ready();
      res.status = ready ? 200 : 503;
      res.set_content(ready                       ? std::string("ready\n")
                      : options_.not_ready_reason ? options_.not_ready_reason()
                                                  : options_.not_ready_text,
                      "text/plain");
    });
    port_ = options_.port;
    const bool bound = port_ == 0 ? (port_ = server_.bind_to_any_port(options_.host)) > 0
                                  : server_.bind_to_port(options_.host, port_);
    if (!bound) {
      return Status::Unavailable("cannot listen for HTTP on " + options_.host + ":" +
                                 std::to_string(options_.port));
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return Status::Ok();
  }

  int port() const override { return port_; }

 private:
  MetricsServer::Options options_;
  const MetricsRegistry& registry_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const Options& options,
                                                            const MetricsRegistry& registry) {
  auto s = std::make_unique<HttplibServer>(options, registry);
  OUTBOX_RETURN_IF_ERROR(s->Bind());
  return std::unique_ptr<MetricsServer>(std::move(s));
}

}  // namespace outbox
