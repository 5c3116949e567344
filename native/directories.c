/*
 * A walk's directory calls (src/retention/digest/walk.ts and
 * src/engine/directory-cursor.ts say when they are used):
 *
 *   openDirectoryAt(parentFd, name, stat) -> fd, or -errno
 *     openat(parentFd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
 *     and fstat; stat (a Float64Array of 4) gets dev, ino, mode, and on a
 *     failure the step that failed (1 open, 2 fstat). `name` is refused
 *     (EINVAL, ENAMETOOLONG) as in read-small.c before any call: it can
 *     only name an entry of the directory itself.
 *   closeDirectory(fd) -> 0, or -errno
 *     for a descriptor openDirectoryAt gave: Node must not close what it did
 *     not open (in a worker thread it warns, and it would close it again
 *     when the worker ends).
 *   listDirectory(fd) -> { names, types, inodes }, or -errno
 *     every entry of the open directory but . and .., from its start: the
 *     names' bytes in one Buffer, each followed by a NUL, their d_types
 *     (a Uint8Array) and their d_inos (a Float64Array; -1 for one past
 *     2^53, which a double cannot hold exactly); an entry the filesystem
 *     types DT_UNKNOWN is typed by fstatat(fd, name, AT_SYMLINK_NOFOLLOW).
 *
 * The same calls the JavaScript walk makes through
 * /proc/<pid>/fd/<dir>/<name> paths, readdir and fstat, without the procfs
 * lookup of each path, a Stats object with four dates per directory, or a
 * Dirent per entry. Names are decoded as UTF-8 the way Node decodes them
 * (an invalid sequence becomes U+FFFD, which the walk then checks).
 */
#define _GNU_SOURCE
#include "addon.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LISTING_BYTES (64 << 10)
#define STEP_OPEN 1
#define STEP_FSTAT 2

static napi_value number(napi_env env, double value) {
  napi_value result;
  return napi_create_double(env, value, &result) == napi_ok ? result : NULL;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

napi_value open_directory_at(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t parent;
  char name[NAME_MAX + 2];
  size_t length;
  bool is_typedarray = false;
  napi_typedarray_type type;
  size_t stat_length;
  void *stat_data;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 || napi_get_value_int32(env, argv[0], &parent) != napi_ok || parent < 0)
    return throw_type(env, "openDirectoryAt: parentFd");
  if (napi_get_value_string_utf8(env, argv[1], name, sizeof name, &length) != napi_ok) return throw_type(env, "openDirectoryAt: name");
  if (napi_is_typedarray(env, argv[2], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[2], &type, &stat_length, &stat_data, NULL, NULL) != napi_ok || type != napi_float64_array || stat_length < 4)
    return throw_type(env, "openDirectoryAt: stat");
  double *stat_out = stat_data;
  int refused = name_error(name, length);
  if (refused != 0) {
    stat_out[3] = STEP_OPEN;
    return number(env, -refused);
  }
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    stat_out[3] = STEP_OPEN;
    return number(env, -errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int error = errno;
    close(fd);
    stat_out[3] = STEP_FSTAT;
    return number(env, -error);
  }
  stat_out[0] = (double)st.st_dev;
  stat_out[1] = (double)st.st_ino;
  stat_out[2] = (double)st.st_mode;
  stat_out[3] = 0;
  return number(env, fd);
}

static unsigned char type_of(int fd, const char *name) {
  struct stat st;
  if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return DT_UNKNOWN;
  switch (st.st_mode & S_IFMT) {
    case S_IFREG: return DT_REG;
    case S_IFDIR: return DT_DIR;
    case S_IFLNK: return DT_LNK;
    case S_IFIFO: return DT_FIFO;
    case S_IFSOCK: return DT_SOCK;
    case S_IFCHR: return DT_CHR;
    case S_IFBLK: return DT_BLK;
    default: return DT_UNKNOWN;
  }
}

napi_value list_directory(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0)
    return throw_type(env, "listDirectory: fd");
  if (lseek(fd, 0, SEEK_SET) < 0) return number(env, -errno);
  // The names go out as the bytes of one Buffer, each followed by a NUL (no name holds one), and are decoded one by one in JavaScript
  // (Buffer.toString: a string of its own per name; slices of one joined string kept every directory's string alive, and grew V8's young generation).
  char *buffer = malloc(LISTING_BYTES);
  size_t names_capacity = 16 << 10, names_length = 0, types_capacity = 256, count = 0;
  char *names = malloc(names_capacity);
  unsigned char *types = malloc(types_capacity);
  double *inodes = malloc(types_capacity * sizeof(double));
  int error = buffer == NULL || names == NULL || types == NULL || inodes == NULL ? ENOMEM : 0;
  while (error == 0) {
    long got = syscall(SYS_getdents64, fd, buffer, LISTING_BYTES);
    if (got < 0) error = errno;
    if (got <= 0) break;
    for (long at = 0; at < got && error == 0;) {
      struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
      at += entry->d_reclen;
      const char *name = entry->d_name;
      if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
      size_t length = strlen(name);
      if (names_length + length + 1 > names_capacity || count == types_capacity) {
        size_t grown_names = names_capacity * 2 > names_length + length + 1 ? names_capacity * 2 : names_length + length + 1;
        char *more_names = realloc(names, grown_names);
        if (more_names != NULL) names = more_names, names_capacity = grown_names;
        unsigned char *more_types = count == types_capacity ? realloc(types, types_capacity * 2) : types;
        if (more_types != NULL) types = more_types;
        double *more_inodes = count == types_capacity ? realloc(inodes, types_capacity * 2 * sizeof(double)) : inodes;
        if (more_inodes != NULL) inodes = more_inodes;
        if (more_types != NULL && more_inodes != NULL && count == types_capacity) types_capacity *= 2;
        if (more_names == NULL || more_types == NULL || more_inodes == NULL) {
          error = ENOMEM;
          break;
        }
      }
      memcpy(names + names_length, name, length + 1);
      names_length += length + 1;
      inodes[count] = entry->d_ino < ((uint64_t)1 << 53) ? (double)entry->d_ino : -1;
      types[count++] = entry->d_type == DT_UNKNOWN ? type_of(fd, name) : entry->d_type;
    }
  }
  free(buffer);
  napi_value joined, array_buffer, typed, inode_buffer, inode_array, result;
  void *data, *inode_data;
  if (error == 0 && (napi_create_buffer_copy(env, names_length, names, NULL, &joined) != napi_ok || napi_create_arraybuffer(env, count, &data, &array_buffer) != napi_ok ||
                     napi_create_typedarray(env, napi_uint8_array, count, array_buffer, 0, &typed) != napi_ok ||
                     napi_create_arraybuffer(env, count * sizeof(double), &inode_data, &inode_buffer) != napi_ok ||
                     napi_create_typedarray(env, napi_float64_array, count, inode_buffer, 0, &inode_array) != napi_ok || napi_create_object(env, &result) != napi_ok ||
                     napi_set_named_property(env, result, "names", joined) != napi_ok || napi_set_named_property(env, result, "types", typed) != napi_ok ||
                     napi_set_named_property(env, result, "inodes", inode_array) != napi_ok))
    error = ENOMEM;
  if (error == 0 && count > 0) {
    memcpy(data, types, count);
    memcpy(inode_data, inodes, count * sizeof(double));
  }
  free(names);
  free(types);
  free(inodes);
  return error == 0 ? result : number(env, -error);
}

napi_value close_directory(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0)
    return throw_type(env, "closeDirectory: fd");
  return number(env, close(fd) == 0 ? 0 : -errno);
}
