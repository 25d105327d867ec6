/* Linked into executables of the tsan preset only.
 *
 * librdkafka uses C11 threads (thrd_create, mtx_lock, cnd_wait, ...). glibc
 * implements them by calling its internal pthread functions directly, so
 * ThreadSanitizer (GCC 12 and clang 14 on Debian 12) never sees those threads
 * start — it crashes in its allocator on the first malloc of such a thread —
 * nor their locks. These definitions interpose the C11 calls and route them
 * through the public pthread functions that TSan intercepts. glibc's C11 types
 * share the layout of the pthread types, which is what its own implementation
 * relies on. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <threads.h>

struct outbox_tsan_start {
  thrd_start_t fn;
  void* arg;
};

static void* outbox_tsan_trampoline(void* p) {
  struct outbox_tsan_start s = *(struct outbox_tsan_start*)p;
  free(p);
  return (void*)(long)s.fn(s.arg);
}

static int outbox_tsan_result(int rc) {
  return rc == 0 ? thrd_success : rc == ENOMEM ? thrd_nomem : rc == ETIMEDOUT ? thrd_timedout
                                                                             : rc == EBUSY ? thrd_busy
                                                                                           : thrd_error;
}

int thrd_create(thrd_t* thr, thrd_start_t fn, void* arg) {
  struct outbox_tsan_start* s = malloc(sizeof *s);
  if (!s) return thrd_nomem;
  s->fn = fn;
  s->arg = arg;
  int rc = pthread_create((pthread_t*)thr, NULL, outbox_tsan_trampoline, s);
  if (rc != 0) free(s);
  return outbox_tsan_result(rc);
}

int thrd_join(thrd_t thr, int* res) {
  void* r = NULL;
  int rc = pthread_join((pthread_t)thr, &r);
  if (rc == 0 && res) *res = (int)(long)r;
  return outbox_tsan_result(rc);
}

int thrd_detach(thrd_t thr) { return outbox_tsan_result(pthread_detach((pthread_t)thr)); }

int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (type & mtx_recursive) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  int rc = pthread_mutex_init((pthread_mutex_t*)m, &a);
  pthread_mutexattr_destroy(&a);
  return outbox_tsan_result(rc);
}
int mtx_lock(mtx_t* m) { return outbox_tsan_result(pthread_mutex_lock((pthread_mutex_t*)m)); }
int mtx_trylock(mtx_t* m) { return outbox_tsan_result(pthread_mutex_trylock((pthread_mutex_t*)m)); }
int mtx_timedlock(mtx_t* m, const struct timespec* ts) {
  return outbox_tsan_result(pthread_mutex_timedlock((pthread_mutex_t*)m, ts));
}
int mtx_unlock(mtx_t* m) { return outbox_tsan_result(pthread_mutex_unlock((pthread_mutex_t*)m)); }
void mtx_destroy(mtx_t* m) { pthread_mutex_destroy((pthread_mutex_t*)m); }

int cnd_init(cnd_t* c) { return outbox_tsan_result(pthread_cond_init((pthread_cond_t*)c, NULL)); }
int cnd_signal(cnd_t* c) { return outbox_tsan_result(pthread_cond_signal((pthread_cond_t*)c)); }
int cnd_broadcast(cnd_t* c) { return outbox_tsan_result(pthread_cond_broadcast((pthread_cond_t*)c)); }
int cnd_wait(cnd_t* c, mtx_t* m) {
  return outbox_tsan_result(pthread_cond_wait((pthread_cond_t*)c, (pthread_mutex_t*)m));
}
int cnd_timedwait(cnd_t* c, mtx_t* m, const struct timespec* ts) {
  return outbox_tsan_result(pthread_cond_timedwait((pthread_cond_t*)c, (pthread_mutex_t*)m, ts));
}
void cnd_destroy(cnd_t* c) { pthread_cond_destroy((pthread_cond_t*)c); }
