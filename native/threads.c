/*
 * The handle side of threads.h: stopThreads(handle, wait) and
 * threadsRunning(handle) serve every job. Threads are detached: nothing
 * waits for them but a stop that asks to, and garbage collection of the
 * handle stops them too (they end after their current file or directory).
 */
#include "addon.h"
#include "threads.h"
#include <pthread.h>
#include <time.h>

#define THREAD_STACK (128 << 10)
/* How long a waiting stop waits at most: the threads' calls do not block (O_NONBLOCK, readahead), but a cold disk answers in milliseconds. */
#define STOP_WAIT_NS 2000000000L
#define STOP_POLL_NS 100000L

static void release(struct job *job) {
  if (atomic_fetch_sub(&job->refs, 1) == 1) job->destroy(job);
}

void end_thread(struct job *job) {
  if (atomic_fetch_sub(&job->live, 1) == 1 && job->finish != NULL) job->finish(job);
  release(job);
}

static void finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  struct job *job = data;
  atomic_store(&job->stop, 1);
  release(job);
}

napi_value start_job(napi_env env, struct job *job, enum job_kind kind, void (*finish)(struct job *), void (*destroy)(struct job *), unsigned threads,
                     void *(*run)(void *)) {
  job->kind = kind;
  job->finish = finish;
  atomic_init(&job->stop, 0);
  atomic_init(&job->live, 0);
  atomic_init(&job->refs, 1);
  job->destroy = destroy;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, THREAD_STACK);
  for (unsigned k = 0; k < threads; k++) {
    atomic_fetch_add(&job->refs, 1);
    atomic_fetch_add(&job->live, 1);
    pthread_t thread;
    if (pthread_create(&thread, &attributes, run, job) != 0) {
      // Fewer threads than asked: those started still do the work.
      atomic_fetch_sub(&job->live, 1);
      atomic_fetch_sub(&job->refs, 1);
      break;
    }
  }
  pthread_attr_destroy(&attributes);
  // Not one thread started: nothing else will finish the job.
  if (atomic_load(&job->live) == 0 && finish != NULL) finish(job);
  napi_value handle;
  if (napi_create_external(env, job, finalize, NULL, &handle) != napi_ok) {
    finalize(env, job, NULL);
    return NULL;
  }
  return handle;
}

struct job *job_of(napi_env env, napi_value value, enum job_kind kind, const char *caller) {
  void *data = NULL;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_external || napi_get_value_external(env, value, &data) != napi_ok || data == NULL ||
      (kind != 0 && ((struct job *)data)->kind != kind)) {
    napi_throw_type_error(env, NULL, caller);
    return NULL;
  }
  return data;
}

/* stopThreads(handle, wait): with `wait`, returns once every thread has ended (or after STOP_WAIT_NS). */
napi_value stop_threads(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) {
    napi_throw_type_error(env, NULL, "stopThreads: a handle");
    return NULL;
  }
  struct job *job = job_of(env, argv[0], 0, "stopThreads: a handle");
  if (job == NULL) return NULL;
  bool wait = false;
  if (argc >= 2 && napi_get_value_bool(env, argv[1], &wait) != napi_ok) {
    napi_throw_type_error(env, NULL, "stopThreads: wait");
    return NULL;
  }
  atomic_store(&job->stop, 1);
  const struct timespec poll = {0, STOP_POLL_NS};
  for (long waited = 0; wait && atomic_load(&job->live) > 0 && waited < STOP_WAIT_NS; waited += STOP_POLL_NS) nanosleep(&poll, NULL);
  return NULL;
}

napi_value threads_running(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) {
    napi_throw_type_error(env, NULL, "threadsRunning: a handle");
    return NULL;
  }
  struct job *job = job_of(env, argv[0], 0, "threadsRunning: a handle");
  napi_value result;
  if (job == NULL || napi_create_int32(env, atomic_load(&job->live), &result) != napi_ok) return NULL;
  return result;
}
