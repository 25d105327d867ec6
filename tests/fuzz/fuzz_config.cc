// libFuzzer target: the relay's configuration loader on arbitrary TOML text,
// and the same bytes as flag overrides. Must never crash, hang or leak; bad
// input must come back as an InvalidArgument naming a key.
#include <cstddef>
#include <cstdint>
#include <string>

#include "relay_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::map<std::string, std::string> env = {{"OUTBOX_PG_URL", "postgresql://x@y/z"},
                                                  {"OUTBOX_KAFKA_BOOTSTRAP", "k:9092"}};
  auto c = outbox::daemon::LoadConfig(text, "fuzz.toml", env, {});
  if (c.ok()) (void)outbox::daemon::PrintConfig(*c);
  // The text as KEY=VALUE lines given with --set.
  std::vector<std::pair<std::string, std::string>> sets;
  std::size_t pos = 0;
  while (pos < text.size() && sets.size() < 64) {
    std::size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    auto eq = line.find('=');
    if (eq != std::string::npos) sets.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  (void)outbox::daemon::LoadConfig("", "none", env, sets);
  return 0;
}
