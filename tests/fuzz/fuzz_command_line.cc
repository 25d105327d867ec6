// libFuzzer target: outbox-relay's command line, NUL-separated arguments.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "relay_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  args.push_back(cur);
  auto cl = outbox::daemon::ParseCommandLine(args);
  if (cl.ok()) {
    const std::map<std::string, std::string> env = {{"OUTBOX_PG_URL", "postgresql://x@y/z"},
                                                    {"OUTBOX_KAFKA_BOOTSTRAP", "k:9092"}};
    (void)outbox::daemon::LoadConfig("", "none", env, cl->overrides);
  }
  return 0;
}
