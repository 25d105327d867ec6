// A program of a service that uses outbox from outside its source tree: built by
// tests/install/run.sh against an installed outbox (find_package, pkg-config)
// and against its source tree (add_subdirectory). It touches the core, a store
// of each kind and the version header, so every library must link.
#include <cstdio>

#include "outbox/event.h"
#include "outbox/mariadb.h"
#include "outbox/postgres.h"
#include "outbox/version.h"

int main() {
  outbox::Event e;
  e.aggregate_type = "order";
  e.aggregate_id = "42";
  e.event_type = "OrderCreated";
  e.payload = "{}";
  const bool ok = outbox::ValidateEvent(e).ok() && outbox::ValidateSchemaName("outbox").ok() &&
                  outbox::IsMariaDbUrl("mysql://root@127.0.0.1:3306/shop") &&
                  !outbox::ValidateEvent(outbox::Event{}).ok();
  std::printf("outbox %s %s\n", OUTBOX_VERSION_STRING, ok ? "ok" : "BROKEN");
  return ok ? 0 : 1;
}
