/*
 * Read and hash the bench's 8 x 128 MiB data set (npm run bench makes it) in C,
 * one run (docs/design/performance.md, "The read ring"):
 *
 *   cc -O2 -pthread bench/probes/ring-reads.c -o /tmp/ring-reads -lcrypto
 *   /tmp/ring-reads inline <KiB>                256 KiB reads, each hashed before the next
 *   /tmp/ring-reads spin|nap|cond <KiB> <slots> a reader thread fills a ring of slots while this one hashes
 *
 * spin: both sides spin; nap: the reader naps 30 us while the ring is full; cond:
 * a condition variable, the reader woken once half the ring is free. Prints wall
 * time and the process's CPU time. Files: OATS_BENCH_DIR/data/big/blob-0..7.bin.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double ms(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char *mode;
static size_t piece;
static unsigned slots;
static unsigned char *ring[64];
static ssize_t lengths[64];
static atomic_long produced, consumed;
static atomic_int reader_waits;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t freed = PTHREAD_COND_INITIALIZER;
static char files[8][4096];

static void *reader(void *unused) {
  (void)unused;
  long k = 0;
  for (int f = 0; f < 8; f++) {
    int fd = open(files[f], O_RDONLY);
    for (;;) {
      if (!strcmp(mode, "cond")) {
        if (k - atomic_load(&consumed) >= (long)slots) {
          pthread_mutex_lock(&lock);
          atomic_store(&reader_waits, 1);
          while (k - atomic_load(&consumed) > (long)slots / 2) pthread_cond_wait(&freed, &lock);
          atomic_store(&reader_waits, 0);
          pthread_mutex_unlock(&lock);
        }
      } else {
        while (k - atomic_load(&consumed) >= (long)slots) {
          if (!strcmp(mode, "nap")) nanosleep(&(struct timespec){0, 30000}, NULL);
        }
      }
      ssize_t n = read(fd, ring[k % slots], piece);
      lengths[k % slots] = n;
      atomic_store(&produced, k + 1);
      k++;
      if (n <= 0) break;
    }
    close(fd);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: ring-reads inline|spin|nap|cond <KiB> [slots]\n"), 2;
  mode = argv[1];
  piece = (size_t)atoi(argv[2]) << 10;
  slots = argc > 3 ? (unsigned)atoi(argv[3]) : 8;
  if (slots < 2 || slots > 64 || piece == 0) return 2;
  const char *dir = getenv("OATS_BENCH_DIR") ? getenv("OATS_BENCH_DIR") : "/tmp/oats-bench";
  for (int f = 0; f < 8; f++) snprintf(files[f], sizeof files[f], "%s/data/big/blob-%d.bin", dir, f);
  for (unsigned s = 0; s < slots; s++) ring[s] = aligned_alloc(4096, piece);
  EVP_MD_CTX *hash = EVP_MD_CTX_new();
  EVP_DigestInit_ex(hash, EVP_sha256(), NULL);
  double wall = ms(CLOCK_MONOTONIC), cpu = ms(CLOCK_PROCESS_CPUTIME_ID);
  if (!strcmp(mode, "inline")) {
    for (int f = 0; f < 8; f++) {
      int fd = open(files[f], O_RDONLY);
      ssize_t n;
      while ((n = read(fd, ring[0], piece)) > 0) EVP_DigestUpdate(hash, ring[0], (size_t)n);
      close(fd);
    }
  } else {
    pthread_t thread;
    pthread_create(&thread, NULL, reader, NULL);
    for (long k = 0, ended = 0; ended < 8; k++) {
      while (atomic_load(&produced) <= k) {
      }
      ssize_t n = lengths[k % slots];
      if (n > 0) EVP_DigestUpdate(hash, ring[k % slots], (size_t)n);
      else ended++;
      atomic_store(&consumed, k + 1);
      if (!strcmp(mode, "cond") && atomic_load(&reader_waits)) {
        pthread_mutex_lock(&lock);
        pthread_cond_signal(&freed);
        pthread_mutex_unlock(&lock);
      }
    }
    pthread_join(thread, NULL);
  }
  unsigned char digest[32];
  unsigned length;
  EVP_DigestFinal_ex(hash, digest, &length);
  printf("%s %zu KiB x %u: %.0f ms wall, %.0f ms CPU, sha256 %02x%02x...\n", mode, piece >> 10, slots, ms(CLOCK_MONOTONIC) - wall, ms(CLOCK_PROCESS_CPUTIME_ID) - cpu, digest[0], digest[1]);
  return 0;
}
