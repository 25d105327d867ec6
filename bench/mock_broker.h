// Starts a private outbox-mock-kafka for a benchmark and waits for its bootstrap
// string (tests/subprocess.h runs it; the process dies with the benchmark).
#ifndef OUTBOX_BENCH_MOCK_BROKER_H_
#define OUTBOX_BENCH_MOCK_BROKER_H_

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "subprocess.h"

namespace outbox::bench {

struct MockBroker {
  std::unique_ptr<outbox::testing::Subprocess> process;
  std::string bootstrap;
};

// Exits the benchmark if the broker does not come up within 10 s.
inline MockBroker StartMockBroker(const std::string& bin, int brokers, const std::string& topic,
                                  const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / name;
  fs::create_directories(dir);
  fs::remove(dir / "bootstrap");
  MockBroker m;
  m.process = std::make_unique<outbox::testing::Subprocess>(
      std::vector<std::string>{bin, "--brokers", std::to_string(brokers), "--topic", topic,
                               "--bootstrap-file", (dir / "bootstrap").string()},
      std::map<std::string, std::string>{}, (dir / "log").string());
  for (int i = 0; i < 500 && !fs::exists(dir / "bootstrap"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream(dir / "bootstrap") >> m.bootstrap;
  if (m.bootstrap.empty()) {
    std::fprintf(stderr, "mock broker did not start: %s\n", m.process->Log().c_str());
    std::exit(1);
  }
  return m;
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_MOCK_BROKER_H_
