/* The functions of dist/native/oats.node, one source file each (addon.c registers them). */
#ifndef OATS_ADDON_H
#define OATS_ADDON_H
/*
 * The Node-API version the addon is built against: every Node from 12.22 and 14.17 on has it, so one build serves
 * any Node the package supports. src/engine/native-reads.ts (NODE_API_VERSION) refuses the file on a Node with an
 * older one, and a test checks the two say the same. The headers are native/include/, a copy of node-api-headers.
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

/* One entry of getdents64(2), which glibc does not declare (directories.c, warm-directories.c). */
struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* read-small.c */
napi_value read_small_files(napi_env env, napi_callback_info info);
napi_value small_reads_block_reads(napi_env env, napi_callback_info info);
napi_value thread_block_reads_of_caller(napi_env env, napi_callback_info info);
/* 0 for a name that can only be an entry of the directory itself, else the errno to refuse it with. */
int name_error(const char *name, size_t length);

/* directories.c */
napi_value open_directory_at(napi_env env, napi_callback_info info);
napi_value list_directory(napi_env env, napi_callback_info info);
napi_value close_directory(napi_env env, napi_callback_info info);

/* prefetch.c */
napi_value start_prefetch(napi_env env, napi_callback_info info);
napi_value advance_prefetch(napi_env env, napi_callback_info info);

/* warm-directories.c */
napi_value warm_directories(napi_env env, napi_callback_info info);

/* read-ring.c */
napi_value create_ring(napi_env env, napi_callback_info info);
napi_value ring_memory(napi_env env, napi_callback_info info);
napi_value ring_read(napi_env env, napi_callback_info info);
napi_value ring_next(napi_env env, napi_callback_info info);
napi_value ring_stop(napi_env env, napi_callback_info info);

/* threads.c: the handles of both */
napi_value stop_threads(napi_env env, napi_callback_info info);
napi_value threads_running(napi_env env, napi_callback_info info);

#endif
