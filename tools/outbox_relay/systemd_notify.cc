#include "systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace outbox::daemon {

SystemdNotifier::SystemdNotifier(const Relay& relay, Logger& logger) : relay_(relay), logger_(logger) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  if (!enabled_) return;
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) watchdog_ = std::chrono::microseconds(usec);
  logger_.Info("systemd: notifying", {{"watchdog_ms", std::to_string(watchdog_.count() / 1000)}});
  thread_ = std::thread([this] { Loop(); });
}

SystemdNotifier::~SystemdNotifier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SystemdNotifier::Ready() {
  if (!enabled_) return;
  sd_notify(0, "READY=1\nSTATUS=running; waiting for the database and the broker (see /readyz)");
  ready_sent_ = true;
}

void SystemdNotifier::Stopping() {
  if (!enabled_) return;
  sd_notify(0, "STOPPING=1\nSTATUS=stopping: finishing in-flight batches");
}

void SystemdNotifier::Loop() {
  // Twice per watchdog period (systemd's advice), at least every second for STATUS.
  const auto tick = watchdog_.count() > 0
                        ? std::min<std::chrono::microseconds>(watchdog_ / 2, std::chrono::seconds(1))
                        : std::chrono::microseconds(std::chrono::seconds(1));
  int last_ready = -1;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, tick, [this] { return done_; })) {
    if (watchdog_.count() > 0) {
      if (relay_.Alive(std::chrono::duration_cast<std::chrono::milliseconds>(watchdog_))) {
        sd_notify(0, "WATCHDOG=1");
      } else {
        // No ping: systemd kills and restarts the relay once the period passes.
        logger_.Error("systemd watchdog: an engine thread has not gone round its loop within "
                      "WatchdogSec; not pinging");
      }
    }
    const int ready = relay_.Ready() ? 1 : 0;
    if (ready_sent_ && ready != last_ready) {
      sd_notify(0, ready ? "STATUS=ready: database and broker reachable"
                         : "STATUS=not ready: database or broker unreachable (retrying; see /readyz)");
      last_ready = ready;
    }
  }
}

}  // namespace outbox::daemon
