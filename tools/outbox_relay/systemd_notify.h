// outbox-relay under systemd (Type=notify, packaging/systemd/outbox-relay.service):
// READY=1 once the relay runs, STATUS= following /readyz, WATCHDOG=1 while every
// engine thread keeps going round its loop (Relay::Alive), STOPPING=1 on a stop
// signal. Outside systemd (no NOTIFY_SOCKET) it does nothing.
//
// Thread-safety: Ready() and Stopping() may be called from any thread; one
// background thread (started by the constructor when systemd listens) sends the
// periodic messages. Ownership: borrows the relay and the logger, which must
// outlive it; the destructor joins its thread.
#ifndef OUTBOX_TOOLS_OUTBOX_RELAY_SYSTEMD_NOTIFY_H_
#define OUTBOX_TOOLS_OUTBOX_RELAY_SYSTEMD_NOTIFY_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "outbox/log.h"
#include "outbox/relay.h"

namespace outbox::daemon {

class SystemdNotifier {
 public:
  SystemdNotifier(const Relay& relay, Logger& logger);
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  void Ready();     // READY=1: startup is done (the relay's threads are starting)
  void Stopping();  // STOPPING=1: a stop signal arrived

 private:
  void Loop();

  const Relay& relay_;
  Logger& logger_;
  bool enabled_ = false;
  std::chrono::microseconds watchdog_{0};  // 0: no watchdog asked for
  std::atomic<bool> ready_sent_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace outbox::daemon

#endif  // OUTBOX_TOOLS_OUTBOX_RELAY_SYSTEMD_NOTIFY_H_
