// MetricsServer: the HTTP endpoints every outbox process serves — the relay,
// and any consumer process (examples/lms-quest/learning-activity):
//   GET /metrics  the registry in Prometheus text format
//   GET /healthz  200 while the process runs
//   GET /readyz   200 when `ready()` says so, else 503 with `not_ready_text`
//
// Thread-safety: serves from threads of its own; `ready` is called on them.
// Ownership: borrows the registry, which must outlive the server; `ready` is
// kept (what it captures must outlive the server). Destruction stops serving and
// joins the threads.
#ifndef OUTBOX_HTTP_H_
#define OUTBOX_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "outbox/metrics.h"
#include "outbox/status.h"

namespace outbox {

class MetricsServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 picks a free port (see port())
    std::function<bool()> ready;  // unset: always ready
    std::string not_ready_text = "not ready\n";
    // When set, /readyz's body while not ready (called on a server thread).
    std::function<std::string()> not_ready_reason;
  };

  // Binds at once: a port in use or a bad host is Unavailable naming host:port.
  static Result<std::unique_ptr<MetricsServer>> Start(const Options& options,
                                                      const MetricsRegistry& registry);
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      const MetricsRegistry& registry) {
    Options o;
    o.host = host;
    o.port = port;
    return Start(o, registry);
  }

  virtual ~MetricsServer() = default;
  virtual int port() const = 0;  // the bound port
};

}  // namespace outbox

#endif  // OUTBOX_HTTP_H_
