/*
 * Read-ahead threads for a digest over a cold page cache
 * (src/engine/prefetch.ts is the only caller and says why).
 *
 *   startPrefetch(paths, ends, from, threads, window, limit) -> handle
 *   advancePrefetch(handle, index)    the reader has reached leaf `index`
 *   stopThreads(handle, wait), threadsRunning(handle)   (threads.c)
 *
 * Leaf i's path is the bytes paths[ends[i - 1], ends[i]) (ends[-1] = 0); an
 * empty one is not a file and is skipped. `paths` and `ends` are copied:
 * the caller may drop them at once. The threads share one cursor and take
 * the leaves from `from` on in order, never more than `window` leaves past
 * the reader's index; for each they make
 *   open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC),
 *   readahead(fd, 0, limit), close(fd).
 * readahead() asks the kernel to fill the page cache and returns without
 * waiting for the disk, so a few threads keep many requests in flight.
 * No byte reaches this process: what a digest rests on is still read and
 * checked by the reader. An open that fails is skipped (a FIFO put in a
 * file's place opens at once: O_NONBLOCK; readahead refuses it).
 */
#define _GNU_SOURCE
#include "addon.h"
#include "threads.h"
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define WAIT_NS 500000 /* ahead of the window: look again after half a millisecond */

struct prefetch {
  struct job job;
  char *paths;
  int32_t *ends;
  uint32_t count;
  uint32_t window;
  size_t limit;
  _Atomic uint32_t next;
  _Atomic int64_t reader;
};

static void destroy(struct job *job) {
  struct prefetch *p = (struct prefetch *)job;
  free(p->paths);
  free(p->ends);
  free(p);
}

static void read_ahead(struct prefetch *p, uint32_t index, char *path) {
  size_t start = index == 0 ? 0 : (size_t)p->ends[index - 1];
  size_t end = (size_t)p->ends[index];
  if (end <= start || end - start >= PATH_MAX) return;
  memcpy(path, p->paths + start, end - start);
  path[end - start] = '\0';
  if (memchr(path, '\0', end - start) != NULL) return;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;
  (void)readahead(fd, 0, p->limit);
  close(fd);
}

static void *run(void *argument) {
  struct prefetch *p = argument;
  char path[PATH_MAX];
  const struct timespec wait = {0, WAIT_NS};
  while (!atomic_load(&p->job.stop)) {
    uint32_t index = atomic_fetch_add(&p->next, 1);
    if (index >= p->count) break;
    while (!atomic_load(&p->job.stop) && (int64_t)index > atomic_load(&p->reader) + (int64_t)p->window) nanosleep(&wait, NULL);
    if (atomic_load(&p->job.stop)) break;
    read_ahead(p, index, path);
  }
  end_thread(&p->job);
  return NULL;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

napi_value start_prefetch(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 6) return throw_type(env, "startPrefetch: six arguments");
  bool is_buffer = false;
  void *paths;
  size_t paths_length;
  if (napi_is_buffer(env, argv[0], &is_buffer) != napi_ok || !is_buffer || napi_get_buffer_info(env, argv[0], &paths, &paths_length) != napi_ok)
    return throw_type(env, "startPrefetch: paths");
  bool is_typedarray = false;
  napi_typedarray_type ends_type;
  size_t count;
  void *ends;
  if (napi_is_typedarray(env, argv[1], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[1], &ends_type, &count, &ends, NULL, NULL) != napi_ok || ends_type != napi_int32_array || count > UINT32_MAX)
    return throw_type(env, "startPrefetch: ends");
  uint32_t from, threads, window;
  int64_t limit;
  if (napi_get_value_uint32(env, argv[2], &from) != napi_ok) return throw_type(env, "startPrefetch: from");
  if (napi_get_value_uint32(env, argv[3], &threads) != napi_ok || threads == 0 || threads > MAX_THREADS) return throw_type(env, "startPrefetch: threads");
  if (napi_get_value_uint32(env, argv[4], &window) != napi_ok) return throw_type(env, "startPrefetch: window");
  if (napi_get_value_int64(env, argv[5], &limit) != napi_ok || limit < 0) return throw_type(env, "startPrefetch: limit");
  // The threads trust the ends: each within paths and none before the one preceding it.
  const int32_t *end = ends;
  for (size_t index = 0; index < count; index++)
    if (end[index] < (index == 0 ? 0 : end[index - 1]) || (size_t)end[index] > paths_length) return throw_type(env, "startPrefetch: ends out of order or past paths");

  struct prefetch *p = calloc(1, sizeof *p);
  if (p != NULL) {
    p->paths = malloc(paths_length > 0 ? paths_length : 1);
    p->ends = malloc(count > 0 ? count * sizeof(int32_t) : 1);
  }
  if (p == NULL || p->paths == NULL || p->ends == NULL) {
    if (p != NULL) destroy(&p->job);
    napi_throw_error(env, NULL, "startPrefetch: out of memory");
    return NULL;
  }
  memcpy(p->paths, paths, paths_length);
  memcpy(p->ends, ends, count * sizeof(int32_t));
  p->count = (uint32_t)count;
  p->window = window;
  p->limit = (size_t)limit;
  atomic_init(&p->next, from);
  atomic_init(&p->reader, from);
  return start_job(env, &p->job, JOB_PREFETCH, NULL, destroy, threads, run);
}

napi_value advance_prefetch(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) return throw_type(env, "advancePrefetch: two arguments");
  struct prefetch *p = (struct prefetch *)job_of(env, argv[0], JOB_PREFETCH, "advancePrefetch: a handle");
  int64_t index;
  if (p == NULL) return NULL;
  if (napi_get_value_int64(env, argv[1], &index) != napi_ok) return throw_type(env, "advancePrefetch: index");
  atomic_store(&p->reader, index);
  return NULL;
}
