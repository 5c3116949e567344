/*
 * SHA-256 streams owned here, and the rest of a large file hashed straight
 * out of the page cache through a read-only mapping: no copy into a buffer
 * first (src/retention/digest/mapped-reads.ts is the caller and says when;
 * docs/design/performance.md, "Large files hashed from a mapping").
 *
 *   createHash() -> hash | null               a SHA-256 stream; null when Node's OpenSSL is not reachable
 *   hashUpdate(hash, bytes)                   feed a Buffer or Uint8Array
 *   hashDigest(hash) -> Buffer                the 32-byte digest; the stream is done
 *   mapFile(fd, length, populate) -> mapping | number
 *   hashMapped(hashes, mapping, position, length) -> number
 *   unmapFile(mapping)
 *
 * mapFile maps the first `length` bytes of the open file `fd` read-only and,
 * with `populate`, faults them in (MADV_POPULATE_READ): the mapping, or
 * -errno, mmap's own (the file cannot be mapped), -ENOSYS (our SIGBUS
 * handler is not, or no longer, the process's) or -EFAULT (the file is
 * shorter than `length`). hashMapped feeds bytes [position, position +
 * length) of a mapping to every stream of `hashes` (an array, in order) and
 * returns 0, or -EFAULT when the file shrank under the mapping (SIGBUS);
 * the streams then hold an unknown part of the range, and the caller
 * refuses and drops them. A range outside the mapping, or a mapping already
 * unmapped, is a RangeError. unmapFile unmaps now; the collector does
 * otherwise.
 *
 * Why a mapping: hashing from memory the page cache holds is what a read
 * costs anyway, and read(2) adds a copy of every byte into a buffer before
 * the hash reads it again. Over 8 x 128 MiB, beside a worker lane, here:
 * 657-677 ms read into a buffer, 637-662 ms from a mapping hashed 8 KiB at
 * a time while the 8 KiB 16 KiB further on is prefetched, and 705-743 ms
 * without the prefetch (slower than the copy; bench/probes/mapped-hash.c).
 *
 * SIGBUS: a file another process truncates while it is mapped faults on
 * the pages past its new end. One process-wide handler, installed on the
 * first hashMapped, jumps back to the hashMapped of the faulting thread when
 * the address lies in that call's mapping; any other SIGBUS goes to the
 * handler that was there before, or ends the process as it would have.
 *
 * The streams are Node's own OpenSSL (EVP_*, which the node executable
 * exports), looked up at run time: a node without them gets null from
 * createHash and the library hashes in JavaScript.
 */
#define _GNU_SOURCE
#include "addon.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#define MAX_HASHES 8
/* Hashed per update, and how far ahead the next STEP bytes are prefetched: 8 and 16 KiB measured best (8/8, 16/16 close; 32 KiB ahead or more, or none, slower). */
#define STEP (8 << 10)
#define AHEAD (16 << 10)
#define CACHE_LINE 64
#define DIGEST_BYTES 32

typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef struct evp_md_st EVP_MD;

static struct {
  EVP_MD_CTX *(*ctx_new)(void);
  void (*ctx_free)(EVP_MD_CTX *);
  const EVP_MD *(*sha256)(void);
  int (*init)(EVP_MD_CTX *, const EVP_MD *, void *);
  int (*update)(EVP_MD_CTX *, const void *, size_t);
  int (*final)(EVP_MD_CTX *, unsigned char *, unsigned int *);
} evp;
static bool evp_found;
static pthread_once_t evp_once = PTHREAD_ONCE_INIT;

static void find_evp(void) {
  /* Through a void * so that no object pointer is converted to a function pointer. */
  *(void **)&evp.ctx_new = dlsym(RTLD_DEFAULT, "EVP_MD_CTX_new");
  *(void **)&evp.ctx_free = dlsym(RTLD_DEFAULT, "EVP_MD_CTX_free");
  *(void **)&evp.sha256 = dlsym(RTLD_DEFAULT, "EVP_sha256");
  *(void **)&evp.init = dlsym(RTLD_DEFAULT, "EVP_DigestInit_ex");
  *(void **)&evp.update = dlsym(RTLD_DEFAULT, "EVP_DigestUpdate");
  *(void **)&evp.final = dlsym(RTLD_DEFAULT, "EVP_DigestFinal_ex");
  evp_found = evp.ctx_new && evp.ctx_free && evp.sha256 && evp.init && evp.update && evp.final;
}

/* Each handle's first field: an external handed back as the other kind is refused, never read as it. */
enum { HASH_KIND = 0x68617368, MAPPING_KIND = 0x6d617070 };

struct hash {
  uint32_t kind;
  EVP_MD_CTX *ctx;
  bool done;
};

/* The handle of `kind` that `value` holds; else a TypeError saying `message`, and NULL. */
static void *external_of(napi_env env, napi_value value, uint32_t kind, const char *message) {
  void *data = NULL;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_external || napi_get_value_external(env, value, &data) != napi_ok || data == NULL || *(uint32_t *)data != kind) {
    napi_throw_type_error(env, NULL, message);
    return NULL;
  }
  return data;
}

static void free_hash(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  struct hash *hash = data;
  evp.ctx_free(hash->ctx);
  free(hash);
}

napi_value create_hash(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  pthread_once(&evp_once, find_evp);
  struct hash *hash = evp_found ? calloc(1, sizeof *hash) : NULL;
  if (hash != NULL) hash->kind = HASH_KIND;
  if (hash != NULL && ((hash->ctx = evp.ctx_new()) == NULL || evp.init(hash->ctx, evp.sha256(), NULL) != 1)) {
    if (hash->ctx != NULL) evp.ctx_free(hash->ctx);
    free(hash);
    hash = NULL;
  }
  if (hash == NULL) return napi_get_null(env, &result) == napi_ok ? result : NULL;
  if (napi_create_external(env, hash, free_hash, NULL, &result) != napi_ok) {
    free_hash(env, hash, NULL);
    return NULL;
  }
  return result;
}

static struct hash *hash_of(napi_env env, napi_value value) {
  struct hash *hash = external_of(env, value, HASH_KIND, "not a hash");
  if (hash == NULL) return NULL;
  if (hash->done) {
    napi_throw_error(env, NULL, "the hash is done");
    return NULL;
  }
  return hash;
}

napi_value hash_update(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) return NULL;
  struct hash *hash = hash_of(env, argv[0]);
  if (hash == NULL) return NULL;
  napi_typedarray_type type;
  size_t length;
  void *data;
  bool typed = false;
  if (napi_is_typedarray(env, argv[1], &typed) != napi_ok || !typed || napi_get_typedarray_info(env, argv[1], &type, &length, &data, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "bytes must be a Uint8Array");
    return NULL;
  }
  if (length > 0 && evp.update(hash->ctx, data, length) != 1) napi_throw_error(env, NULL, "EVP_DigestUpdate failed");
  return NULL;
}

napi_value hash_digest(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return NULL;
  struct hash *hash = hash_of(env, argv[0]);
  if (hash == NULL) return NULL;
  unsigned char digest[DIGEST_BYTES];
  unsigned int length = 0;
  hash->done = true;
  if (evp.final(hash->ctx, digest, &length) != 1 || length != DIGEST_BYTES) {
    napi_throw_error(env, NULL, "EVP_DigestFinal_ex failed");
    return NULL;
  }
  napi_value result;
  return napi_create_buffer_copy(env, DIGEST_BYTES, digest, NULL, &result) == napi_ok ? result : NULL;
}

/* The mapping a thread is hashing from, and where its hashMapped continues after a SIGBUS there. */
struct guard {
  sigjmp_buf resume;
  const unsigned char *low;
  const unsigned char *high;
};
static _Thread_local struct guard *volatile active_guard;
static struct sigaction previous_bus;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static bool handler_installed;

static void on_bus(int signal_number, siginfo_t *info, void *context) {
  struct guard *guard = active_guard;
  const unsigned char *address = info == NULL ? NULL : info->si_addr;
  if (guard != NULL && address >= guard->low && address < guard->high) siglongjmp(guard->resume, 1);
  /* Not a fault of ours. */
  if ((previous_bus.sa_flags & SA_SIGINFO) && previous_bus.sa_sigaction != NULL) {
    previous_bus.sa_sigaction(signal_number, info, context);
    return;
  }
  if (!(previous_bus.sa_flags & SA_SIGINFO) && previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
    previous_bus.sa_handler(signal_number);
    return;
  }
  /* As if never installed: the signal again, pending until this handler returns, then its default action. */
  sigaction(SIGBUS, &previous_bus, NULL);
  raise(signal_number);
}

/*
 * False once someone replaced our handler (a `process.on("SIGBUS")` in the
 * application: libuv's then runs first, and a fault in a mapping would
 * return into the faulting load for ever): no file is mapped then, the
 * caller reads it instead.
 */
static bool handler_still_ours(void) {
  struct sigaction current;
  return sigaction(SIGBUS, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_bus;
}

static void install_handler(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_bus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  handler_installed = sigaction(SIGBUS, &action, &previous_bus) == 0;
}

/* Every stream fed [data, data + length), STEP at a time, the bytes AHEAD of each step prefetched. */
static void feed_mapped(struct hash **hashes, uint32_t count, const unsigned char *data, size_t length) {
  for (size_t at = 0; at < length; at += STEP) {
    size_t step = length - at < STEP ? length - at : STEP;
    size_t ahead = at + AHEAD;
    for (size_t line = ahead; line < ahead + STEP && line < length; line += CACHE_LINE) __builtin_prefetch(data + line, 0, 3);
    for (uint32_t index = 0; index < count; index++) evp.update(hashes[index]->ctx, data + at, step);
  }
}

struct mapping {
  uint32_t kind;
  unsigned char *memory;
  size_t length;
};

static void unmap(struct mapping *mapping) {
  if (mapping->memory != NULL) munmap(mapping->memory, mapping->length);
  mapping->memory = NULL;
}

static void free_mapping(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  unmap(data);
  free(data);
}

static struct mapping *mapping_of(napi_env env, napi_value value) {
  return external_of(env, value, MAPPING_KIND, "not a mapping");
}

napi_value map_file(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) return NULL;
  int32_t fd;
  int64_t length;
  bool populate;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int64(env, argv[1], &length) != napi_ok || napi_get_value_bool(env, argv[2], &populate) != napi_ok || fd < 0 || length <= 0) {
    napi_throw_type_error(env, NULL, "fd and length must be numbers (length positive), populate a boolean");
    return NULL;
  }
  napi_value result;
  pthread_once(&handler_once, install_handler);
  int status = handler_installed && handler_still_ours() ? 0 : -ENOSYS;
  unsigned char *memory = status == 0 ? mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (status == 0 && memory == MAP_FAILED) status = -errno;
  if (status == 0 && populate && madvise(memory, (size_t)length, MADV_POPULATE_READ) != 0 && errno == EFAULT) status = -EFAULT;
  struct mapping *mapping = status == 0 ? malloc(sizeof *mapping) : NULL;
  if (status == 0 && mapping == NULL) status = -ENOMEM;
  if (status != 0) {
    if (memory != MAP_FAILED) munmap(memory, (size_t)length);
    return napi_create_int32(env, status, &result) == napi_ok ? result : NULL;
  }
  mapping->kind = MAPPING_KIND;
  mapping->memory = memory;
  mapping->length = (size_t)length;
  if (napi_create_external(env, mapping, free_mapping, NULL, &result) != napi_ok) {
    free_mapping(env, mapping, NULL);
    return NULL;
  }
  return result;
}

napi_value unmap_file(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return NULL;
  struct mapping *mapping = mapping_of(env, argv[0]);
  if (mapping != NULL) unmap(mapping);
  return NULL;
}

napi_value hash_mapped(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) return NULL;
  uint32_t count = 0;
  bool is_array = false;
  if (napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array || napi_get_array_length(env, argv[0], &count) != napi_ok || count == 0 || count > MAX_HASHES) {
    napi_throw_type_error(env, NULL, "hashes must be an array of 1 to 8 hashes");
    return NULL;
  }
  struct hash *hashes[MAX_HASHES];
  for (uint32_t index = 0; index < count; index++) {
    napi_value element;
    if (napi_get_element(env, argv[0], index, &element) != napi_ok) return NULL;
    if ((hashes[index] = hash_of(env, element)) == NULL) return NULL;
  }
  struct mapping *mapping = mapping_of(env, argv[1]);
  if (mapping == NULL) return NULL;
  int64_t position, length;
  if (napi_get_value_int64(env, argv[2], &position) != napi_ok || napi_get_value_int64(env, argv[3], &length) != napi_ok || position < 0 || length <= 0 || mapping->memory == NULL ||
      (uint64_t)position > mapping->length || (uint64_t)length > mapping->length - (uint64_t)position) {
    napi_throw_range_error(env, NULL, "the range is not within the mapping");
    return NULL;
  }
  int status = 0;
  struct guard guard;
  guard.low = mapping->memory;
  guard.high = mapping->memory + mapping->length;
  if (sigsetjmp(guard.resume, 1) == 0) {
    active_guard = &guard;
    feed_mapped(hashes, count, mapping->memory + position, (size_t)length);
  } else {
    status = -EFAULT;
  }
  active_guard = NULL;
  napi_value result;
  return napi_create_int32(env, status, &result) == napi_ok ? result : NULL;
}
