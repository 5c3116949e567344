/*
 * Hash the bench's 8 x 128 MiB data set (npm run bench makes it) in C, one
 * way per run (hashing from a mapping was measured and not kept:
 * docs/design/performance.md, "Large files"):
 *
 *   cc -O2 bench/probes/mapped-hash.c -o /tmp/mapped-hash -lcrypto
 *   /tmp/mapped-hash read <KiB>                 pread pieces into one buffer, each hashed before the next
 *   /tmp/mapped-hash map <KiB> <ahead KiB>      each file mapped whole (MADV_POPULATE_READ), hashed <KiB>
 *                                               at a time, the <KiB> at <ahead KiB> further prefetched
 *
 * Prints the wall time. Files: OATS_BENCH_DIR/data/big/blob-0..7.bin.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "read") != 0 && strcmp(argv[1], "map") != 0) || (strcmp(argv[1], "map") == 0 && argc < 4)) {
    fprintf(stderr, "usage: %s read <KiB> | map <KiB> <ahead KiB>\n", argv[0]);
    return 2;
  }
  const int mapped = strcmp(argv[1], "map") == 0;
  const size_t piece = (size_t)atoi(argv[2]) << 10;
  const size_t ahead = mapped ? (size_t)atoi(argv[3]) << 10 : 0;
  const char *base = getenv("OATS_BENCH_DIR") ? getenv("OATS_BENCH_DIR") : "/tmp/oats-bench";
  unsigned char *buffer = malloc(piece);
  EVP_MD_CTX *context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), NULL);
  const double start = now();
  for (int index = 0; index < 8; index++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/data/big/blob-%d.bin", base, index);
    int fd = open(path, O_RDONLY);
    struct stat stats;
    if (fd < 0 || fstat(fd, &stats) != 0) {
      perror(path);
      return 1;
    }
    const size_t size = (size_t)stats.st_size;
    if (!mapped) {
      for (size_t at = 0; at < size;) {
        ssize_t got = pread(fd, buffer, piece, (off_t)at);
        if (got <= 0) return 1;
        EVP_DigestUpdate(context, buffer, (size_t)got);
        at += (size_t)got;
      }
    } else {
      unsigned char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) return 1;
      madvise(map, size, MADV_POPULATE_READ);
      for (size_t at = 0; at < size; at += piece) {
        const size_t step = size - at < piece ? size - at : piece;
        for (size_t line = at + ahead; line < at + ahead + step && line < size; line += 64) __builtin_prefetch(map + line, 0, 3);
        EVP_DigestUpdate(context, map + at, step);
      }
      munmap(map, size);
    }
    close(fd);
  }
  unsigned char digest[32];
  unsigned int length;
  EVP_DigestFinal_ex(context, digest, &length);
  printf("%s %s KiB%s%s: %.0f ms (digest %02x%02x...)\n", argv[1], argv[2], mapped ? ", ahead " : "", mapped ? argv[3] : "", now() - start, digest[0], digest[1]);
  return 0;
}
