/*
 * A reader thread that copies a large file out of the page cache while the
 * calling thread hashes what it copied before (src/engine/read-ring.ts
 * is the only caller and says why; docs/design/performance.md, "The read
 * ring").
 *
 *   createRing(slots, slotSize) -> ring       slots * slotSize bytes, owned here
 *   ringMemory(ring) -> Buffer                those bytes (an external Buffer)
 *   ringRead(ring, fd, position, length) -> bool
 *   ringNext(ring) -> number
 *   ringStop(ring) -> bool
 *
 * ringRead starts one thread that preads `length` bytes of a duplicate of
 * `fd` from `position`, slot after slot: piece k (slotSize bytes, the last
 * one shorter) goes to slot k % slots, and the thread never runs more than
 * `slots` pieces ahead of the caller. It returns false, having started
 * nothing, while the ring's last read has not been stopped (its caller may
 * still be hashing a slot) or its thread still runs, or when none could
 * start.
 *
 * ringNext gives back the slot of the piece it returned before, waits for
 * the next piece and returns how many bytes of it landed (the caller knows
 * which slot: the k-th call of a read returns piece k): fewer than asked for
 * means the file ended early, a negative number is -errno. After such a
 * piece the thread has ended; asking for a piece past the last is a
 * TypeError, never a wait that cannot end.
 *
 * ringStop asks the thread to end after its current pread and waits for it
 * (up to STOP_WAIT_NS): true once it has, and the ring takes a new read. The thread reads only its own
 * descriptor and this ring's memory, and holds a reference to both, so a
 * caller that closes its descriptor, drops the ring or throws at any point
 * can never have a byte written anywhere else.
 *
 * Waiting is by polling on both sides: the reader naps READER_NAP_NS when it
 * is `slots` pieces ahead, the caller spins a little and then naps. A
 * condition variable's wake-up made a system call and, on a virtual
 * machine, an interrupt to the other vCPU for every few pieces, and cost
 * more than the copy it moved (measured: no gain at all).
 */
#define _GNU_SOURCE
#include "addon.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS 64
#define MAX_SLOT_SIZE (16 << 20)
#define THREAD_STACK (64 << 10)
#define READER_NAP_NS 30000L
#define CALLER_NAP_NS 20000L
#define CALLER_SPINS 2000
#define STOP_WAIT_NS 2000000000L
#define STOP_POLL_NS 20000L

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

struct ring {
  /* The handle, each memory Buffer and a running thread hold one each; the last to go unmaps the ring. */
  _Atomic int refs;
  /* The ring and its slots are one private mapping of this many bytes (see create_ring). */
  size_t mapped;
  uint32_t slots;
  size_t slot_size;
  unsigned char *memory;
  int64_t lengths[MAX_SLOTS];
  /* The current read: written by ringRead before its thread starts, read-only afterwards. */
  int fd;
  int64_t position;
  int64_t length;
  uint64_t pieces;
  /* Pieces the thread has finished, pieces the caller has given back. */
  _Atomic uint64_t produced;
  _Atomic uint64_t consumed;
  _Atomic int stop;
  _Atomic int running;
  /* The caller's side only: a read started and not yet stopped, and the pieces ringNext returned in it. */
  bool active;
  uint64_t taken;
};

static void release(struct ring *ring) {
  if (atomic_fetch_sub(&ring->refs, 1) == 1) munmap(ring, ring->mapped);
}

static void nap(long ns) {
  const struct timespec wait = {0, ns};
  nanosleep(&wait, NULL);
}

/* Fill `length` bytes at `at` or stop at the end of the file: the bytes read, or -errno. */
static int64_t fill(int fd, unsigned char *into, size_t length, int64_t at) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = pread(fd, into + done, length - done, (off_t)(at + (int64_t)done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return -(int64_t)errno;
    }
    if (got == 0) break;
    done += (size_t)got;
  }
  return (int64_t)done;
}

static void *run(void *argument) {
  struct ring *ring = argument;
  for (uint64_t piece = 0; piece < ring->pieces && !atomic_load(&ring->stop); piece++) {
    while (piece - atomic_load_explicit(&ring->consumed, memory_order_acquire) >= ring->slots && !atomic_load(&ring->stop)) nap(READER_NAP_NS);
    if (atomic_load(&ring->stop)) break;
    int64_t offset = (int64_t)(piece * ring->slot_size);
    size_t wanted = (size_t)(ring->length - offset < (int64_t)ring->slot_size ? ring->length - offset : (int64_t)ring->slot_size);
    uint32_t slot = (uint32_t)(piece % ring->slots);
    int64_t got = fill(ring->fd, ring->memory + (size_t)slot * ring->slot_size, wanted, ring->position + offset);
    ring->lengths[slot] = got;
    atomic_store_explicit(&ring->produced, piece + 1, memory_order_release);
    if (got != (int64_t)wanted) break;
  }
  close(ring->fd);
  atomic_store_explicit(&ring->running, 0, memory_order_release);
  release(ring);
  return NULL;
}

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

static void finalize_handle(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  struct ring *ring = data;
  atomic_store(&ring->stop, 1);
  release(ring);
}

static void finalize_memory(napi_env env, void *data, void *hint) {
  (void)env;
  (void)data;
  release(hint);
}

static struct ring *ring_of(napi_env env, napi_value value, const char *caller) {
  void *data = NULL;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_external || napi_get_value_external(env, value, &data) != napi_ok || data == NULL) {
    napi_throw_type_error(env, NULL, caller);
    return NULL;
  }
  return data;
}

/* The ring of a call whose one argument is a ring; NULL with a TypeError pending. */
static struct ring *only_ring(napi_env env, napi_callback_info info, const char *caller) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) {
    napi_throw_type_error(env, NULL, caller);
    return NULL;
  }
  return ring_of(env, argv[0], caller);
}

static napi_value boolean(napi_env env, bool value) {
  napi_value result;
  return napi_get_boolean(env, value, &result) == napi_ok ? result : NULL;
}

napi_value create_ring(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  uint32_t slots, slot_size;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) return throw_type(env, "createRing: two arguments");
  if (napi_get_value_uint32(env, argv[0], &slots) != napi_ok || slots < 2 || slots > MAX_SLOTS) return throw_type(env, "createRing: slots");
  if (napi_get_value_uint32(env, argv[1], &slot_size) != napi_ok || slot_size < 4096 || slot_size > MAX_SLOT_SIZE) return throw_type(env, "createRing: slotSize");
  // One mapping, the ring then its slots, unmapped by the last reference: a use after that faults at once
  // rather than writing into memory the allocator has given to someone else (test/read-ring.test.ts counts on it).
  size_t header = (sizeof(struct ring) + 4095) & ~(size_t)4095;
  size_t mapped = header + (size_t)slots * slot_size;
  void *region = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) {
    napi_throw_error(env, NULL, "createRing: out of memory");
    return NULL;
  }
  struct ring *ring = region; // zeroed, as every anonymous mapping is
  ring->mapped = mapped;
  ring->memory = (unsigned char *)region + header;
  ring->slots = slots;
  ring->slot_size = slot_size;
  ring->fd = -1;
  atomic_init(&ring->refs, 1);
  napi_value handle;
  if (napi_create_external(env, ring, finalize_handle, NULL, &handle) != napi_ok) {
    release(ring);
    return NULL;
  }
  return handle;
}

napi_value ring_memory(napi_env env, napi_callback_info info) {
  struct ring *ring = only_ring(env, info, "ringMemory: a ring");
  if (ring == NULL) return NULL;
  atomic_fetch_add(&ring->refs, 1);
  napi_value buffer;
  if (napi_create_external_buffer(env, (size_t)ring->slots * ring->slot_size, ring->memory, finalize_memory, ring, &buffer) != napi_ok) {
    release(ring);
    return NULL;
  }
  return buffer;
}

napi_value ring_read(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  int32_t fd;
  int64_t position, length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) return throw_type(env, "ringRead: four arguments");
  struct ring *ring = ring_of(env, argv[0], "ringRead: a ring");
  if (ring == NULL) return NULL;
  if (napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0) return throw_type(env, "ringRead: fd");
  if (napi_get_value_int64(env, argv[2], &position) != napi_ok || position < 0) return throw_type(env, "ringRead: position");
  if (napi_get_value_int64(env, argv[3], &length) != napi_ok || length <= 0 || length > INT64_MAX - position) return throw_type(env, "ringRead: length");
  // Not while a read is under way, even one whose thread has read everything: its caller may still be hashing a slot.
  if (ring->active || atomic_load_explicit(&ring->running, memory_order_acquire)) return boolean(env, false);
  // The thread's own descriptor: the caller may close its one whenever it likes.
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return boolean(env, false);
  ring->fd = own;
  ring->position = position;
  ring->length = length;
  ring->pieces = (uint64_t)((length + (int64_t)ring->slot_size - 1) / (int64_t)ring->slot_size);
  ring->taken = 0;
  ring->active = true;
  atomic_store(&ring->produced, 0);
  atomic_store(&ring->consumed, 0);
  atomic_store(&ring->stop, 0);
  atomic_store(&ring->running, 1);
  atomic_fetch_add(&ring->refs, 1);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, THREAD_STACK);
  pthread_t thread;
  int started = pthread_create(&thread, &attributes, run, ring);
  pthread_attr_destroy(&attributes);
  if (started != 0) {
    close(own);
    ring->active = false;
    atomic_store(&ring->running, 0);
    atomic_fetch_sub(&ring->refs, 1);
    return boolean(env, false);
  }
  return boolean(env, true);
}

napi_value ring_next(napi_env env, napi_callback_info info) {
  struct ring *ring = only_ring(env, info, "ringNext: a ring");
  if (ring == NULL) return NULL;
  uint64_t piece = ring->taken;
  if (!ring->active || piece >= ring->pieces || (piece > 0 && ring->lengths[(piece - 1) % ring->slots] != (int64_t)ring->slot_size) || atomic_load(&ring->stop))
    return throw_type(env, "ringNext: no piece left in this read");
  atomic_store_explicit(&ring->consumed, piece, memory_order_release);
  for (int spins = 0; atomic_load_explicit(&ring->produced, memory_order_acquire) <= piece; spins++) {
    if (spins < CALLER_SPINS)
      CPU_RELAX();
    else
      nap(CALLER_NAP_NS);
  }
  ring->taken = piece + 1;
  napi_value result;
  return napi_create_int64(env, ring->lengths[piece % ring->slots], &result) == napi_ok ? result : NULL;
}

napi_value ring_stop(napi_env env, napi_callback_info info) {
  struct ring *ring = only_ring(env, info, "ringStop: a ring");
  if (ring == NULL) return NULL;
  atomic_store(&ring->stop, 1);
  for (long waited = 0; atomic_load_explicit(&ring->running, memory_order_acquire) && waited < STOP_WAIT_NS; waited += STOP_POLL_NS) nap(STOP_POLL_NS);
  bool ended = !atomic_load_explicit(&ring->running, memory_order_acquire);
  if (ended) ring->active = false;
  return boolean(env, ended);
}
