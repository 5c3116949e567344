/*
 * readSmallFiles: the small-file reads of a digest pass, several files of one
 * directory per call (src/retention/digest/native-reads.ts is its only caller
 * and says why; docs/design/performance.md, "Small files read natively").
 *
 *   readSmallFiles(dirFd, names, buffer, limit, meta, split, afterRead?) -> count
 *
 * For names[0], names[1], ... in order, each file is
 *   openat(dirFd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
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
 * With `split`, no hook, at least PARALLEL_MIN names and a buffer of at
 * least twice `limit`, the second half of the names is read by a second thread into the
 * second half of the buffer while this thread reads the first: on two cores
 * the calls of two files overlap. Its results count only when the first
 * half was read to its end without a stop; otherwise they are dropped (the
 * files were only opened, read and closed) and the caller asks again from
 * where the first half stopped. Either way `count` and `meta` mean what
 * they mean above, in order.
 */
#define _GNU_SOURCE
#include "addon.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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
#define PARALLEL_MIN 16
#define NAME_BYTES (NAME_MAX + 2)

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

/* Names [from, to) read into buffer[base, base + length); meta entries and offsets are the whole call's. */
struct range {
  int dir_fd;
  char (*names)[NAME_BYTES];
  const size_t *lengths;
  uint32_t from, to;
  char *buffer;
  size_t base, length;
  int64_t limit;
  double *meta;
  const struct hook *hook;
  /* Out: entries written, from `from`; whether the last one stopped the range (a failure or a large file); a hook threw. */
  uint32_t count;
  int stopped;
  int thrown;
};

static int call_hook(const struct hook *hook, uint32_t index) {
  napi_value global, argument, ignored;
  return napi_get_global(hook->env, &global) == napi_ok && napi_create_uint32(hook->env, index, &argument) == napi_ok &&
         napi_call_function(hook->env, global, hook->function, 1, &argument, &ignored) == napi_ok;
}

static void read_range(struct range *range) {
  size_t used = 0;
  range->count = 0;
  range->stopped = 0;
  range->thrown = 0;
  for (uint32_t index = range->from; index < range->to; index++) {
    double *entry = range->meta + (size_t)index * FIELDS;
    const char *name = range->names[index];
    range->stopped = 1;
    range->count++;
    int refused = name_error(name, range->lengths[index]);
    if (refused != 0) {
      put(entry, refused, STEP_OPEN, 0, 0);
      return;
    }
    int fd = openat(range->dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      put(entry, errno, STEP_OPEN, 0, 0);
      return;
    }
    struct stat before, after;
    if (fstat(fd, &before) != 0) {
      put(entry, errno, STEP_FSTAT, 0, 0);
      close(fd);
      return;
    }
    if (!S_ISREG(before.st_mode)) {
      put(entry, NOT_REGULAR, 0, 0, 0);
      close(fd);
      return;
    }
    if (before.st_size > range->limit) {
      put(entry, TOO_LARGE, 0, (double)before.st_size, 0);
      close(fd);
      return;
    }
    size_t size = (size_t)before.st_size;
    if (size > range->length - used) {
      close(fd);  // not counted: asked again with the buffer free
      range->count--;
      return;
    }
    size_t offset = range->base + used;
    int error = 0;
    size_t got = read_fully(fd, range->buffer + offset, size, &error);
    if (error != 0) {
      put(entry, error, STEP_READ, 0, 0);
      close(fd);
      return;
    }
    if (range->hook != NULL && !call_hook(range->hook, index)) {
      close(fd);
      range->thrown = 1;
      return;
    }
    if (fstat(fd, &after) != 0) {
      put(entry, errno, STEP_FSTAT, 0, 0);
      close(fd);
      return;
    }
    if (close(fd) != 0) {
      put(entry, errno, STEP_CLOSE, 0, 0);
      return;
    }
    if (got != size) {
      put(entry, SHORT, 0, 0, 0);
      return;
    }
    int what = difference(&before, &after);
    if (what != 0) {
      put(entry, CHANGED, what, 0, 0);
      return;
    }
    put(entry, 0, (double)offset, (double)size, (double)(before.st_mode & 07777));
    used += size;
    range->stopped = 0;
  }
}

static void *read_range_thread(void *range) {
  read_range(range);
  return NULL;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

napi_value read_small_files(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 6) return throw_type(env, "readSmallFiles: six arguments");

  int32_t dir_fd;
  if (napi_get_value_int32(env, argv[0], &dir_fd) != napi_ok || dir_fd < 0) return throw_type(env, "readSmallFiles: dirFd");
  bool is_array = false;
  uint32_t count;
  if (napi_is_array(env, argv[1], &is_array) != napi_ok || !is_array || napi_get_array_length(env, argv[1], &count) != napi_ok)
    return throw_type(env, "readSmallFiles: names");
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
  struct range first = {dir_fd, names, lengths, 0, count, buffer, 0, buffer_length, limit, meta_data, after_read ? &hook : NULL, 0, 0, 0};
  uint32_t done;
  pthread_t helper;
  int parallel = split && after_read == NULL && count >= PARALLEL_MIN && limit >= 0 && buffer_length / 2 >= (size_t)limit;
  if (parallel) {
    struct range second = first;
    first.to = second.from = count / 2;
    first.length = buffer_length / 2;
    second.base = first.length;
    second.length = buffer_length - first.length;
    parallel = pthread_create(&helper, NULL, read_range_thread, &second) == 0;
    if (parallel) {
      read_range(&first);
      pthread_join(helper, NULL);
      done = first.count + (first.count == first.to && !first.stopped ? second.count : 0);
    } else {
      first.to = count;
      first.length = buffer_length;
    }
  }
  if (!parallel) {
    read_range(&first);
    done = first.count;
  }
  free(names);
  if (first.thrown) return NULL;  // the hook's exception propagates
  napi_value result;
  if (napi_create_uint32(env, done, &result) != napi_ok) return NULL;
  return result;
}
