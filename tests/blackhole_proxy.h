// A TCP proxy in front of a server that can stop forwarding without closing
// anything (tests/blackhole_proxy.py): the half-open path of a load balancer
// or a NAT table that lost its entry. Darken() black-holes it, Heal() ends that.
#ifndef OUTBOX_TESTS_BLACKHOLE_PROXY_H_
#define OUTBOX_TESTS_BLACKHOLE_PROXY_H_

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {

class BlackholeProxy {
 public:
  BlackholeProxy(const std::string& host, int port) {
    dir_ = std::filesystem::temp_directory_path() / ("outbox-bh-" + RandomSuffix());
    std::filesystem::create_directories(dir_);
    proc_ = std::make_unique<Subprocess>(
        std::vector<std::string>{"/usr/bin/python3", OUTBOX_BLACKHOLE_PROXY, host, std::to_string(port),
                                 (dir_ / "port").string()},
        std::map<std::string, std::string>{}, (dir_ / "log").string());
    WaitFor([&] { return std::filesystem::exists(dir_ / "port"); }, Scaled(std::chrono::seconds(10)));
    std::ifstream(dir_ / "port") >> port_;
    EXPECT_GT(port_, 0) << "blackhole_proxy.py did not start: " << proc_->Log();
  }
  ~BlackholeProxy() {
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  int port() const { return port_; }
  void Darken() { Send(SIGUSR1); }
  void Heal() { Send(SIGUSR2); }

 private:
  void Send(int sig) {
    proc_->Signal(sig);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the handler runs
  }
  std::filesystem::path dir_;
  std::unique_ptr<Subprocess> proc_;
  int port_ = 0;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_BLACKHOLE_PROXY_H_
