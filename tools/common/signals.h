// How the daemons (outbox-relay, outbox-consumer) take SIGTERM and SIGINT: both
// blocked in every thread, first thing in main(), and taken by one thread with
// sigwait, so no handler runs inside librdkafka or libpq and a signal that
// arrives while the configuration loads (or a database is down) is a graceful
// stop, never a kill. SIGPIPE is ignored (a peer that closed a socket is an
// error on the call, not the end of the process).
//
// Thread-safety: call from main() before any thread starts. Header-only.
#ifndef OUTBOX_TOOLS_COMMON_SIGNALS_H_
#define OUTBOX_TOOLS_COMMON_SIGNALS_H_

#include <pthread.h>
#include <signal.h>

namespace outbox::tools {

// Blocks SIGTERM and SIGINT in the calling thread (and so in every thread it
// starts later), ignores SIGPIPE, and returns the set for sigwait.
inline sigset_t BlockStopSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

}  // namespace outbox::tools

#endif  // OUTBOX_TOOLS_COMMON_SIGNALS_H_
