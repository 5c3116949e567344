/*
 * readSmallFiles: the small-file reads of a digest pass, up to 128 files of
 * any directories per call (src/engine/native-reads.ts is its only
 * caller and says why; docs/design/performance.md, "The native addon and its
 * fallback").
 *
 *   readSmallFiles(dirFds, names, buffer, limit, meta, split, afterRead?) -> count
 *
 * dirFds is an Int32Array with one directory descriptor per name (a run of
 * files may span several directories: batches stay long in trees of small
 * directories). For names[0], names[1], ... in order, each file is
 *   openat(its dirFd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
 *   fstat'd, read whole into `buffer` after the files before it, fstat'd
 *   again and closed,
 * exactly the calls and checks of the JavaScript path (file-reader.ts), with
 * openat on the directory's descriptor in place of /proc/<pid>/fd/<dir>/<name>.
 * Every file takes four doubles of `meta`: status, offset, size, mode.
 *
 *   status 0           read; its bytes are buffer[offset, offset + size)
 *   status > 0         an errno, from the call named by meta[+1] (STEP_*)
 *   status NOT_REGULAR not a regular file any more
 *   status TOO_LARGE   larger than `limit`: left to the general path
 *   status SHORT       fewer bytes than fstat said
 *   status CHANGED     inode, device, size, mtime or ctime differ between
 *                      the two fstats; meta[+1] says which (WHAT_*)
 *
 * It stops after the first file whose status is not 0, and before a file
 * that no longer fits in the buffer (not counted: the caller asks again
 * with the buffer free). `count` is the number of entries of `meta` written.
 * A name that is empty, ".", "..", or holds a '/' or a NUL is refused with
 * EINVAL, one longer than NAME_MAX with ENAMETOOLONG, before any call: no
 * name can leave the directory. If `afterRead` is a function it is called
 * with the file's index between its read and its second fstat (the test
 * seam of read-hook.ts); an exception it throws closes the file and
 * propagates.
 *
 * With `split`, no hook and at least PARALLEL_MIN names, a second thread
 * reads beside this one: each takes the next name in order and the buffer
 * space its file needs, so the two share the work whatever the sizes. When
 * a file stops the call (a failure, or no room), no name after it is taken;
 * the few already taken past it by the other thread are read and dropped,
 * and `count` and `meta` mean what they mean above, in order.
 */
#define _GNU_SOURCE
#include "addon.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOT_REGULAR -1
#define TOO_LARGE -2
#define SHORT -3
#define CHANGED -4

#define STEP_OPEN 1
#define STEP_FSTAT 2
#define STEP_READ 3
#define STEP_CLOSE 4

#define WHAT_INODE 1
#define WHAT_SIZE 2
#define WHAT_MTIME 3
#define WHAT_CTIME 4

#define FIELDS 4
#define MAX_NAMES 256
/*
 * A second thread costs its start, and on this kind of machine it may be
 * scheduled only some hundreds of microseconds later: on a short run that is
 * more than the calls it could take over (docs/design/performance.md, "The
 * native addon and its fallback").
 */
#define PARALLEL_MIN 64
#define NAME_BYTES (NAME_MAX + 2)

/*
 * The block reads (getrusage's ru_inblock) of this thread's calls, its
 * helpers' included: the reads of the files named and nothing else. The
 * process's count also holds what its other threads read, such as the
 * inode tables ext4 reads as a retain creates its staged copy beside these
 * reads; that is no sign of a cold source (file-reader.ts, COLD_BLOCK_READS).
 */
static _Thread_local uint64_t source_block_reads;

napi_value small_reads_block_reads(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  if (napi_create_double(env, (double)source_block_reads, &result) != napi_ok) return NULL;
  return result;
}

/* Block reads (512-byte units) the calling thread has caused since it started. */
static uint64_t thread_block_reads(void) {
  struct rusage usage;
  return getrusage(RUSAGE_THREAD, &usage) == 0 ? (uint64_t)usage.ru_inblock : 0;
}

napi_value thread_block_reads_of_caller(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  if (napi_create_double(env, (double)thread_block_reads(), &result) != napi_ok) return NULL;
  return result;
}

int name_error(const char *name, size_t length) {
  if (length > NAME_MAX) return ENAMETOOLONG;
  if (length == 0 || memchr(name, '/', length) != NULL || memchr(name, '\0', length) != NULL) return EINVAL;
  if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return EINVAL;
  return 0;
}

static int difference(const struct stat *a, const struct stat *b) {
  if (a->st_ino != b->st_ino || a->st_dev != b->st_dev) return WHAT_INODE;
  if (a->st_size != b->st_size) return WHAT_SIZE;
  if (a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec) return WHAT_MTIME;
  if (a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec) return WHAT_CTIME;
  return 0;
}

static size_t read_fully(int fd, char *into, size_t length, int *error) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = pread(fd, into + done, length - done, (off_t)done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      *error = errno;
      return done;
    }
    if (got == 0) break;
    done += (size_t)got;
  }
  return done;
}

static void put(double *entry, double status, double second, double size, double mode) {
  entry[0] = status;
  entry[1] = second;
  entry[2] = size;
  entry[3] = mode;
}

/* The hook of read-hook.ts, called on the JavaScript thread only. */
struct hook {
  napi_env env;
  napi_value function;
};

static int call_hook(const struct hook *hook, uint32_t index) {
  napi_value global, argument, ignored;
  return napi_get_global(hook->env, &global) == napi_ok && napi_create_uint32(hook->env, index, &argument) == napi_ok &&
         napi_call_function(hook->env, global, hook->function, 1, &argument, &ignored) == napi_ok;
}

/* One call's names, read by this thread alone or by two; the atomics are what the two share. */
struct batch {
  const int32_t *dir_fds; /* one per name */
  char (*names)[NAME_BYTES];
  const size_t *lengths;
  uint32_t count;
  char *buffer;
  size_t length;
  int64_t limit;
  double *meta;
  const struct hook *hook;
  _Atomic uint32_t next;  /* the next name to take */
  _Atomic uint32_t stop;  /* the first name that stopped the call (count while none has) */
  _Atomic size_t used;    /* buffer bytes taken */
  _Atomic int reading;    /* the helper is taking names (from its first take until it has added its block reads) */
  _Atomic uint64_t block_reads; /* the helper's block reads (getrusage's ru_inblock, 512-byte units) */
  _Atomic int refs;       /* the batch is freed by the last of the two threads to let go of it */
  int thrown;             /* the hook threw (JavaScript thread only) */
};

/* Marks a file that did not fit: the call stops before it, not after. */
#define NO_ROOM -100

static void stop_at(struct batch *batch, uint32_t index) {
  uint32_t current = atomic_load(&batch->stop);
  while (index < current && !atomic_compare_exchange_weak(&batch->stop, &current, index)) {
  }
}

/* Room for `size` bytes: their offset, or SIZE_MAX when the buffer has not that much left. */
static size_t take_room(struct batch *batch, size_t size) {
  size_t used = atomic_load(&batch->used);
  do {
    if (size > batch->length - used) return SIZE_MAX;
  } while (!atomic_compare_exchange_weak(&batch->used, &used, used + size));
  return used;
}

/* Reads names[index]; 0 when it was read, else the call stops at it. */
static int read_one(struct batch *batch, uint32_t index) {
  double *entry = batch->meta + (size_t)index * FIELDS;
  const char *name = batch->names[index];
  int refused = name_error(name, batch->lengths[index]);
  if (refused != 0) {
    put(entry, refused, STEP_OPEN, 0, 0);
    return 1;
  }
  int fd = openat(batch->dir_fds[index], name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    put(entry, errno, STEP_OPEN, 0, 0);
    return 1;
  }
  struct stat before, after;
  if (fstat(fd, &before) != 0) {
    put(entry, errno, STEP_FSTAT, 0, 0);
    close(fd);
    return 1;
  }
  if (!S_ISREG(before.st_mode)) {
    put(entry, NOT_REGULAR, 0, 0, 0);
    close(fd);
    return 1;
  }
  if (before.st_size > batch->limit) {
    put(entry, TOO_LARGE, 0, (double)before.st_size, 0);
    close(fd);
    return 1;
  }
  size_t size = (size_t)before.st_size;
  size_t offset = take_room(batch, size);
  if (offset == SIZE_MAX) {
    put(entry, NO_ROOM, 0, 0, 0);  // not counted: asked again with the buffer free
    close(fd);
    return 1;
  }
  int error = 0;
  size_t got = read_fully(fd, batch->buffer + offset, size, &error);
  if (error != 0) {
    put(entry, error, STEP_READ, 0, 0);
    close(fd);
    return 1;
  }
  if (batch->hook != NULL && !call_hook(batch->hook, index)) {
    close(fd);
    batch->thrown = 1;
    return 1;
  }
  if (fstat(fd, &after) != 0) {
    put(entry, errno, STEP_FSTAT, 0, 0);
    close(fd);
    return 1;
  }
  if (close(fd) != 0) {
    put(entry, errno, STEP_CLOSE, 0, 0);
    return 1;
  }
  if (got != size) {
    put(entry, SHORT, 0, 0, 0);
    return 1;
  }
  int what = difference(&before, &after);
  if (what != 0) {
    put(entry, CHANGED, what, 0, 0);
    return 1;
  }
  put(entry, 0, (double)offset, (double)size, (double)(before.st_mode & 07777));
  return 0;
}

/* Take names in order until none is left or one has stopped the call. */
static void read_names(struct batch *batch) {
  for (;;) {
    uint32_t index = atomic_fetch_add(&batch->next, 1);
    if (index >= batch->count || index >= atomic_load(&batch->stop)) return;
    if (read_one(batch, index) != 0) {
      stop_at(batch, index);
      return;
    }
  }
}

static void let_go(struct batch *batch) {
  if (atomic_fetch_sub(&batch->refs, 1) == 1) free(batch);
}

/*
 * The helper. It may start late, after this thread has taken every name (a
 * new thread can take a few hundred microseconds to be scheduled here) and
 * the call has returned: then the first index it takes is past the last
 * one, and it touches nothing but the batch itself, which it frees if it is
 * last. It announces itself in `reading` before its first take and leaves
 * only after adding its block reads (all of them the reads of its names: it
 * is a new thread), and the call waits for it before it returns.
 */
static void *helper_thread(void *argument) {
  struct batch *batch = argument;
  atomic_fetch_add(&batch->reading, 1);
  read_names(batch);
  atomic_fetch_add(&batch->block_reads, thread_block_reads());
  atomic_fetch_sub(&batch->reading, 1);
  let_go(batch);
  return NULL;
}

/* Start the helper, detached; 0 if it could not be. */
static int start_helper(struct batch *batch) {
  pthread_attr_t attributes;
  pthread_t thread;
  if (pthread_attr_init(&attributes) != 0) return 0;
  int started = pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED) == 0 && pthread_create(&thread, &attributes, helper_thread, batch) == 0;
  pthread_attr_destroy(&attributes);
  return started;
}

/* Every name before the first stop was read (they were all taken before it); the stop itself counts unless it found no room. */
static uint32_t names_done(struct batch *batch) {
  uint32_t stop = atomic_load(&batch->stop);
  if (stop >= batch->count) return batch->count;
  return batch->meta[(size_t)stop * FIELDS] == NO_ROOM ? stop : stop + 1;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

napi_value read_small_files(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 6) return throw_type(env, "readSmallFiles: six arguments");

  bool fds_typed = false;
  napi_typedarray_type fds_type;
  size_t dir_fds_length;
  void *fds_data;
  if (napi_is_typedarray(env, argv[0], &fds_typed) != napi_ok || !fds_typed ||
      napi_get_typedarray_info(env, argv[0], &fds_type, &dir_fds_length, &fds_data, NULL, NULL) != napi_ok || fds_type != napi_int32_array)
    return throw_type(env, "readSmallFiles: dirFds");
  const int32_t *dir_fds = fds_data;
  bool is_array = false;
  uint32_t count;
  if (napi_is_array(env, argv[1], &is_array) != napi_ok || !is_array || napi_get_array_length(env, argv[1], &count) != napi_ok)
    return throw_type(env, "readSmallFiles: names");
  if (dir_fds_length < count) return throw_type(env, "readSmallFiles: dirFds shorter than names");
  for (uint32_t index = 0; index < count; index++)
    if (dir_fds[index] < 0) return throw_type(env, "readSmallFiles: dirFds");
  bool is_buffer = false;
  void *buffer;
  size_t buffer_length;
  if (napi_is_buffer(env, argv[2], &is_buffer) != napi_ok || !is_buffer || napi_get_buffer_info(env, argv[2], &buffer, &buffer_length) != napi_ok)
    return throw_type(env, "readSmallFiles: buffer");
  int64_t limit;
  if (napi_get_value_int64(env, argv[3], &limit) != napi_ok || limit < 0) return throw_type(env, "readSmallFiles: limit");
  bool is_typedarray = false;
  napi_typedarray_type meta_type;
  size_t meta_length;
  void *meta_data;
  if (napi_is_typedarray(env, argv[4], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[4], &meta_type, &meta_length, &meta_data, NULL, NULL) != napi_ok || meta_type != napi_float64_array)
    return throw_type(env, "readSmallFiles: meta");
  bool split;
  if (napi_get_value_bool(env, argv[5], &split) != napi_ok) return throw_type(env, "readSmallFiles: split");
  napi_value after_read = NULL;
  if (argc >= 7) {
    napi_valuetype type;
    if (napi_typeof(env, argv[6], &type) != napi_ok) return throw_type(env, "readSmallFiles: afterRead");
    if (type == napi_function) after_read = argv[6];
    else if (type != napi_undefined && type != napi_null) return throw_type(env, "readSmallFiles: afterRead");
  }
  if (count > meta_length / FIELDS) count = (uint32_t)(meta_length / FIELDS);
  if (count > MAX_NAMES) count = MAX_NAMES;

  char (*names)[NAME_BYTES] = malloc((size_t)count * NAME_BYTES);
  size_t lengths[MAX_NAMES];
  if (names == NULL && count > 0) {
    napi_throw_error(env, NULL, "readSmallFiles: out of memory");
    return NULL;
  }
  for (uint32_t index = 0; index < count; index++) {
    napi_value value;
    // One byte more than NAME_MAX can hold tells a name that is too long from one that fits.
    if (napi_get_element(env, argv[1], index, &value) != napi_ok ||
        napi_get_value_string_utf8(env, value, names[index], NAME_BYTES, &lengths[index]) != napi_ok) {
      free(names);
      return throw_type(env, "readSmallFiles: a name is not a string");
    }
  }

  struct hook hook = {env, after_read};
  struct batch *batch = calloc(1, sizeof *batch);
  if (batch == NULL) {
    free(names);
    napi_throw_error(env, NULL, "readSmallFiles: out of memory");
    return NULL;
  }
  *batch = (struct batch){dir_fds, names, lengths, count, buffer, buffer_length, limit, meta_data, after_read ? &hook : NULL, 0, count, 0, 0, 0, 1, 0};
  if (split && after_read == NULL && count >= PARALLEL_MIN) {
    atomic_store(&batch->refs, 2);
    if (!start_helper(batch)) atomic_store(&batch->refs, 1);
  }
  uint64_t before = thread_block_reads();
  read_names(batch);
  // Every name is taken (or the call has stopped); wait only for a helper still reading.
  while (atomic_load(&batch->reading) != 0) sched_yield();
  source_block_reads += thread_block_reads() - before + atomic_load(&batch->block_reads);
  uint32_t done = names_done(batch);
  int thrown = batch->thrown;
  let_go(batch);
  free(names);
  if (thrown) return NULL;  // the hook's exception propagates
  napi_value result;
  if (napi_create_uint32(env, done, &result) != napi_ok) return NULL;
  return result;
}
