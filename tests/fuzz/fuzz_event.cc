// libFuzzer target: the contract check at the source (ValidateEvent, IsValidText)
// and topic templates, on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "outbox/event.h"
#include "outbox/kafka.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  // Split the input into fields at '\x1f'.
  std::vector<std::string> f;
  std::size_t pos = 0;
  while (f.size() < 8) {
    std::size_t end = s.find('\x1f', pos);
    f.push_back(s.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  f.resize(8);
  outbox::Event e;
  e.aggregate_type = f[0];
  e.aggregate_id = f[1];
  e.event_type = f[2];
  e.payload = f[3];
  e.headers = {{f[4], f[5]}};
  if (!f[6].empty()) e.dedup_key = f[6];
  (void)outbox::IsValidText(s);
  if (outbox::ValidateEvent(e).ok() && outbox::ValidateTopicTemplate(f[7]).ok()) {
    (void)outbox::RenderTopic(f[7], e);
  }
  return 0;
}
