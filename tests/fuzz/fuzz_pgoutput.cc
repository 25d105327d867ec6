// Fuzzes the replication stream decoder: any bytes from the server are either
// decoded or refused with an error, never read past their end.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pgoutput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace outbox::pg::pgoutput;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto f = DecodeFrame(in); f.ok()) {
    if (const auto* x = std::get_if<XLogData>(&*f)) (void)DecodeMessage(x->data);
  }
  auto m = DecodeMessage(in);
  if (!m.ok()) return 0;
  if (const auto* r = std::get_if<Relation>(&*m)) (void)LayoutOf(*r);
  if (const auto* i = std::get_if<Insert>(&*m)) {
    OutboxLayout l{0, 1, 2, 3, 4, 5, 6, 7, 8};
    (void)EventOf(*i, l);
  }
  return 0;
}
