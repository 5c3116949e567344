/*
 * Threads that list a tree's directories ahead of the walk over a cold page
 * cache (src/engine/prefetch.ts, warmDirectories, says when).
 *
 *   warmDirectories(rootFd, threads, maxDepth) -> handle
 *   stopThreads(handle, wait), threadsRunning(handle)   (threads.c)
 *
 * The walk (walk.ts) lists one directory at a time and waits for the disk
 * at each; these threads open and list every directory below rootFd at
 * once, so the walk finds their blocks and inodes in the cache. Nothing
 * they see reaches the listing: they only warm the cache, and the walk
 * still opens, lists and checks everything itself.
 *
 * Each directory is opened with openat2() beneath a private copy of rootFd
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV, O_NOFOLLOW | O_DIRECTORY | O_NONBLOCK): a directory
 * swapped for a symlink meanwhile is not followed, and nothing outside the
 * tree is read. They go no deeper than maxDepth (the walk refuses a deeper
 * tree) and skip a path longer than PATH_MAX. Without openat2 (a kernel
 * before 5.6, or a sandbox that refuses it) they end at once.
 */
#define _GNU_SOURCE
#include "addon.h"
#include "threads.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_THREADS 64
#define LISTING_BYTES (32 << 10)

struct warm {
  struct job job;
  int root;
  unsigned max_depth;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  /* Directories still to list, as paths below the root ("." is the root), and how many threads are listing one. */
  char **pending;
  size_t count, capacity;
  unsigned busy;
};

/* The last thread has ended: its copy of the root goes at once, not when the handle is collected. */
static void finish(struct job *job) {
  struct warm *w = (struct warm *)job;
  if (w->root >= 0) close(w->root);
  w->root = -1;
}

static void destroy(struct job *job) {
  struct warm *w = (struct warm *)job;
  for (size_t index = 0; index < w->count; index++) free(w->pending[index]);
  free(w->pending);
  finish(job);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->changed);
  free(w);
}

static unsigned depth_of(const char *path) {
  if (strcmp(path, ".") == 0) return 0;
  unsigned depth = 1;
  for (const char *at = path; *at; at++) depth += *at == '/';
  return depth;
}

/* Called with the lock held; a directory that does not fit is left to the walk. */
static void push(struct warm *w, char *path) {
  if (w->count == w->capacity) {
    size_t capacity = w->capacity ? w->capacity * 2 : 64;
    char **grown = realloc(w->pending, capacity * sizeof *grown);
    if (grown == NULL) {
      free(path);
      return;
    }
    w->pending = grown;
    w->capacity = capacity;
  }
  w->pending[w->count++] = path;
}

/* Open and list `path`; its subdirectories are queued. */
static void list(struct warm *w, const char *path, char *buffer) {
  struct open_how how = {0};
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  int fd = (int)syscall(SYS_openat2, w->root, path, &how, sizeof how);
  if (fd < 0) {
    if (errno == ENOSYS || errno == EPERM) atomic_store(&w->job.stop, 1);
    return;
  }
  unsigned depth = depth_of(path);
  size_t prefix = strcmp(path, ".") == 0 ? 0 : strlen(path);
  for (;;) {
    long got = syscall(SYS_getdents64, fd, buffer, LISTING_BYTES);
    if (got <= 0 || atomic_load(&w->job.stop)) break;
    for (long at = 0; at < got;) {
      struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
      at += entry->d_reclen;
      const char *name = entry->d_name;
      if (entry->d_type != DT_DIR || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || depth + 1 > w->max_depth) continue;
      size_t length = strlen(name);
      if (prefix + 1 + length >= PATH_MAX) continue;
      char *child = malloc(prefix + 1 + length + 1);
      if (child == NULL) continue;
      if (prefix > 0) {
        memcpy(child, path, prefix);
        child[prefix] = '/';
        memcpy(child + prefix + 1, name, length + 1);
      } else {
        memcpy(child, name, length + 1);
      }
      pthread_mutex_lock(&w->lock);
      push(w, child);
      pthread_cond_signal(&w->changed);
      pthread_mutex_unlock(&w->lock);
    }
  }
  close(fd);
}

static void *run(void *argument) {
  struct warm *w = argument;
  char *buffer = malloc(LISTING_BYTES);
  pthread_mutex_lock(&w->lock);
  while (buffer != NULL) {
    // Wait while the queue is empty but another thread may still add to it.
    while (!atomic_load(&w->job.stop) && w->count == 0 && w->busy > 0) pthread_cond_wait(&w->changed, &w->lock);
    if (atomic_load(&w->job.stop) || w->count == 0) break;
    char *path = w->pending[--w->count];
    w->busy++;
    pthread_mutex_unlock(&w->lock);
    list(w, path, buffer);
    free(path);
    pthread_mutex_lock(&w->lock);
    w->busy--;
    if (w->busy == 0 && w->count == 0) pthread_cond_broadcast(&w->changed);
  }
  // Whoever leaves wakes the others: the work is done, or stopped.
  pthread_cond_broadcast(&w->changed);
  pthread_mutex_unlock(&w->lock);
  free(buffer);
  end_thread(&w->job);
  return NULL;
}

napi_value warm_directories(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t root;
  uint32_t threads, max_depth;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 || napi_get_value_int32(env, argv[0], &root) != napi_ok || root < 0 ||
      napi_get_value_uint32(env, argv[1], &threads) != napi_ok || threads == 0 || threads > MAX_THREADS ||
      napi_get_value_uint32(env, argv[2], &max_depth) != napi_ok) {
    napi_throw_type_error(env, NULL, "warmDirectories: rootFd, threads (1-64), maxDepth");
    return NULL;
  }
  struct warm *w = calloc(1, sizeof *w);
  char *top = strdup(".");
  if (w == NULL || top == NULL) {
    free(w);
    free(top);
    napi_throw_error(env, NULL, "warmDirectories: out of memory");
    return NULL;
  }
  // A copy of its own: the walk closes rootFd when it is done, whatever the threads are doing.
  w->root = fcntl(root, F_DUPFD_CLOEXEC, 0);
  w->max_depth = max_depth;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->changed, NULL);
  if (w->root < 0) {
    free(top);
    destroy(&w->job);
    napi_throw_error(env, NULL, "warmDirectories: cannot duplicate rootFd");
    return NULL;
  }
  push(w, top);
  return start_job(env, &w->job, JOB_WARM_DIRECTORIES, finish, destroy, threads, run);
}
