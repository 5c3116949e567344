/*
 * What a fresh page and a system call cost on this machine (docs/design/performance.md,
 * "The costs the design answers to"):
 *
 *   cc -O2 bench/probes/fault-cost.c -o /tmp/fault-cost
 *   /tmp/fault-cost [<directory of small files> [<file listing directories, one per line>]]
 *
 * Prints, per 4 KiB page of a 64 MiB anonymous mapping: a first write
 * (one fault each), MADV_POPULATE_WRITE and then a first write, MAP_POPULATE,
 * and a first write into a 2 MiB-aligned MADV_HUGEPAGE region; a bare
 * getppid(); with a directory, the calls a digest makes for each small file
 * in it (openat, fstat, pread, fstat, close), five rounds; with a listing, the
 * calls the walk makes for each directory (open, fstat, getdents64 to the
 * end, close), five rounds.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define SIZE ((size_t)64 << 20)
#define PAGE 4096
#define ROUNDS 5

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static char *fresh(size_t size, int flags) {
  char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}

static double touch(char *p, size_t size) {
  double start = now_us();
  for (size_t at = 0; at < size; at += PAGE) p[at] = 1;
  return (now_us() - start) / (double)(size / PAGE);
}

static void pages(void) {
  printf("first write to a fresh page: %.2f us a page\n", touch(fresh(SIZE, 0), SIZE));
  char *populated = fresh(SIZE, 0);
  double start = now_us();
  madvise(populated, SIZE, MADV_POPULATE_WRITE);
  double populate = (now_us() - start) / (double)(SIZE / PAGE);
  printf("MADV_POPULATE_WRITE: %.2f us a page, then a first write: %.2f us a page\n", populate, touch(populated, SIZE));
  start = now_us();
  fresh(SIZE, MAP_POPULATE);
  printf("MAP_POPULATE: %.2f us a page\n", (now_us() - start) / (double)(SIZE / PAGE));
  size_t huge = (size_t)2 << 20;
  char *region = fresh(SIZE + huge, 0);
  char *aligned = (char *)(((unsigned long)region + huge - 1) & ~(huge - 1));
  madvise(aligned, SIZE, MADV_HUGEPAGE);
  printf("MADV_HUGEPAGE region, first write: %.2f us a 4 KiB page\n", touch(aligned, SIZE));
}

static void calls(void) {
  int n = 200000;
  double start = now_us();
  for (int i = 0; i < n; i++) syscall(SYS_getppid);
  printf("getppid: %.3f us\n", (now_us() - start) / n);
}

static void small_files(const char *dir) {
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
  DIR *listing = fdopendir(dup(dirfd));
  if (dirfd < 0 || listing == NULL) {
    perror(dir);
    exit(1);
  }
  static char names[4096][256];
  static char data[1 << 20];
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(listing)) != NULL && count < 4096)
    if (entry->d_type == DT_REG) snprintf(names[count++], sizeof names[0], "%s", entry->d_name);
  double t[5] = {0};
  struct stat before, after;
  for (int round = 0; round < ROUNDS; round++)
    for (int i = 0; i < count; i++) {
      double a = now_us();
      int fd = openat(dirfd, names[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      double b = now_us();
      fstat(fd, &before);
      double c = now_us();
      if (pread(fd, data, sizeof data, 0) < 0) perror("pread");
      double d = now_us();
      fstat(fd, &after);
      double e = now_us();
      close(fd);
      double f = now_us();
      t[0] += b - a, t[1] += c - b, t[2] += d - c, t[3] += e - d, t[4] += f - e;
    }
  double m = (double)ROUNDS * count;
  printf("%d small files: openat %.2f, fstat %.2f, pread %.2f, fstat %.2f, close %.2f: %.2f us a file\n", count, t[0] / m, t[1] / m, t[2] / m, t[3] / m, t[4] / m,
         (t[0] + t[1] + t[2] + t[3] + t[4]) / m);
}

static void directories(const char *list) {
  FILE *file = fopen(list, "r");
  if (file == NULL) {
    perror(list);
    exit(1);
  }
  static char line[4096];
  static char buffer[32768];
  char **paths = malloc(65536 * sizeof *paths);
  int count = 0;
  while (count < 65536 && fgets(line, sizeof line, file)) {
    line[strcspn(line, "\n")] = '\0';
    paths[count++] = strdup(line);
  }
  double t[4] = {0};
  struct stat status;
  for (int round = 0; round < ROUNDS; round++)
    for (int i = 0; i < count; i++) {
      double a = now_us();
      int fd = open(paths[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      double b = now_us();
      fstat(fd, &status);
      double c = now_us();
      while (syscall(SYS_getdents64, fd, buffer, sizeof buffer) > 0) continue;
      double d = now_us();
      close(fd);
      double e = now_us();
      t[0] += b - a, t[1] += c - b, t[2] += d - c, t[3] += e - d;
    }
  double m = (double)ROUNDS * count;
  printf("%d directories: open %.2f, fstat %.2f, getdents64 %.2f, close %.2f us\n", count, t[0] / m, t[1] / m, t[2] / m, t[3] / m);
}

int main(int argc, char **argv) {
  pages();
  calls();
  if (argc > 1) small_files(argv[1]);
  if (argc > 2) directories(argv[2]);
  return 0;
}
