/*
 * SHA-256 with the x86 SHA extensions: two messages hashed one after the
 * other against the same two with their rounds interleaved in one loop
 * (docs/design/performance.md, "Whole-scope fsck and gc", row 27).
 * A round instruction waits for the one before it; two independent messages
 * give the core a second chain to run in those waits. Checks itself: the
 * digest of "abc", and each interleaved digest equal to its one-stream one.
 *
 *   cc -O3 -funroll-loops -msha -msse4.1 -mssse3 -o /tmp/sha-interleave bench/probes/sha-interleave.c && /tmp/sha-interleave
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const uint32_t K[64] = {
 0x428a2f98,0x71374491,0xb5c0fbcf,0xe9b5dba5,0x3956c25b,0x59f111f1,0x923f82a4,0xab1c5ed5,
 0xd807aa98,0x12835b01,0x243185be,0x550c7dc3,0x72be5d74,0x80deb1fe,0x9bdc06a7,0xc19bf174,
 0xe49b69c1,0xefbe4786,0x0fc19dc6,0x240ca1cc,0x2de92c6f,0x4a7484aa,0x5cb0a9dc,0x76f988da,
 0x983e5152,0xa831c66d,0xb00327c8,0xbf597fc7,0xc6e00bf3,0xd5a79147,0x06ca6351,0x14292967,
 0x27b70a85,0x2e1b2138,0x4d2c6dfc,0x53380d13,0x650a7354,0x766a0abb,0x81c2c92e,0x92722c85,
 0xa2bfe8a1,0xa81a664b,0xc24b8b70,0xc76c51a3,0xd192e819,0xd6990624,0xf40e3585,0x106aa070,
 0x19a4c116,0x1e376c08,0x2748774c,0x34b0bcb5,0x391c0cb3,0x4ed8aa4a,0x5b9cca4f,0x682e6ff3,
 0x748f82ee,0x78a5636f,0x84c87814,0x8cc70208,0x90befffa,0xa4506ceb,0xbef9a3f7,0xc67178f2};
static const uint32_t H0[8] = {0x6a09e667,0xbb67ae85,0x3c6ef372,0xa54ff53a,0x510e527f,0x9b05688c,0x1f83d9ab,0x5be0cd19};

#define SCHED(a,b,c,d) _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(a,b), _mm_alignr_epi8(d,c,4)), d)

static inline void load_state(const uint32_t s[8], __m128i *s0, __m128i *s1) {
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&s[0]), 0xB1);
  __m128i u = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&s[4]), 0x1B);
  *s0 = _mm_alignr_epi8(t, u, 8);
  *s1 = _mm_blend_epi16(u, t, 0xF0);
}
static inline void store_state(uint32_t s[8], __m128i s0, __m128i s1) {
  __m128i t = _mm_shuffle_epi32(s0, 0x1B);
  s1 = _mm_shuffle_epi32(s1, 0xB1);
  _mm_storeu_si128((__m128i*)&s[0], _mm_blend_epi16(t, s1, 0xF0));
  _mm_storeu_si128((__m128i*)&s[4], _mm_alignr_epi8(s1, t, 8));
}

void blocks1(uint32_t s[8], const uint8_t *p, size_t n) {
  const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i S0, S1; load_state(s, &S0, &S1);
  for (; n; n--, p += 64) {
    __m128i A0 = S0, A1 = S1, M[4];
    for (int j = 0; j < 4; j++) M[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 16*j)), MASK);
    for (int g = 0; g < 16; g++) {
      __m128i m = _mm_add_epi32(M[g&3], _mm_loadu_si128((const __m128i*)&K[4*g]));
      S1 = _mm_sha256rnds2_epu32(S1, S0, m);
      S0 = _mm_sha256rnds2_epu32(S0, S1, _mm_shuffle_epi32(m, 0x0E));
      if (g < 12) M[g&3] = SCHED(M[g&3], M[(g+1)&3], M[(g+2)&3], M[(g+3)&3]);
    }
    S0 = _mm_add_epi32(S0, A0); S1 = _mm_add_epi32(S1, A1);
  }
  store_state(s, S0, S1);
}

void blocks2(uint32_t s[8], const uint8_t *p, uint32_t t[8], const uint8_t *q, size_t n) {
  const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i S0, S1, T0, T1; load_state(s, &S0, &S1); load_state(t, &T0, &T1);
  for (; n; n--, p += 64, q += 64) {
    __m128i A0 = S0, A1 = S1, B0 = T0, B1 = T1, M[4], N[4];
    for (int j = 0; j < 4; j++) { M[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 16*j)), MASK); N[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(q + 16*j)), MASK); }
    for (int g = 0; g < 16; g++) {
      __m128i k = _mm_loadu_si128((const __m128i*)&K[4*g]);
      __m128i m = _mm_add_epi32(M[g&3], k), o = _mm_add_epi32(N[g&3], k);
      S1 = _mm_sha256rnds2_epu32(S1, S0, m);
      T1 = _mm_sha256rnds2_epu32(T1, T0, o);
      S0 = _mm_sha256rnds2_epu32(S0, S1, _mm_shuffle_epi32(m, 0x0E));
      T0 = _mm_sha256rnds2_epu32(T0, T1, _mm_shuffle_epi32(o, 0x0E));
      if (g < 12) { M[g&3] = SCHED(M[g&3], M[(g+1)&3], M[(g+2)&3], M[(g+3)&3]); N[g&3] = SCHED(N[g&3], N[(g+1)&3], N[(g+2)&3], N[(g+3)&3]); }
    }
    S0 = _mm_add_epi32(S0, A0); S1 = _mm_add_epi32(S1, A1); T0 = _mm_add_epi32(T0, B0); T1 = _mm_add_epi32(T1, B1);
  }
  store_state(s, S0, S1); store_state(t, T0, T1);
}

static void finish(uint32_t s[8], const uint8_t *tail, size_t tailLen, uint64_t total, char hex[65]) {
  uint8_t b[128] = {0}; memcpy(b, tail, tailLen); b[tailLen] = 0x80;
  size_t len = tailLen + 1 + 8 <= 64 ? 64 : 128; uint64_t bits = total * 8;
  for (int i = 0; i < 8; i++) b[len - 1 - i] = (uint8_t)(bits >> (8*i));
  blocks1(s, b, len / 64);
  for (int i = 0; i < 8; i++) sprintf(hex + 8*i, "%08x", s[i]);
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }

int main(void) {
  char hex[65]; uint32_t s[8];
  memcpy(s, H0, 32); finish(s, (const uint8_t*)"abc", 3, 3, hex);
  if (strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") != 0) { printf("abc: wrong digest %s\n", hex); return 1; }
  size_t size = 128u << 20; uint8_t *a = malloc(size), *b = malloc(size);
  if (!a || !b) return 1;
  for (size_t i = 0; i < size; i++) { a[i] = (uint8_t)(i * 131 + 7); b[i] = (uint8_t)(i * 17 + 3); }
  for (int r = 0; r < 5; r++) {
    uint32_t x[8], y[8]; char hx[65], hy[65];
    memcpy(x, H0, 32); memcpy(y, H0, 32);
    double t0 = now(); blocks1(x, a, size / 64); blocks1(y, b, size / 64); double t1 = now();
    finish(x, NULL, 0, size, hx); finish(y, NULL, 0, size, hy);
    memcpy(x, H0, 32); memcpy(y, H0, 32);
    double t2 = now(); blocks2(x, a, y, b, size / 64); double t3 = now();
    char h2x[65], h2y[65]; finish(x, NULL, 0, size, h2x); finish(y, NULL, 0, size, h2y);
    if (strcmp(hx, h2x) != 0 || strcmp(hy, h2y) != 0) { printf("interleaved digests differ\n"); return 1; }
    printf("two 128 MiB messages: one after the other %.1f ms, interleaved %.1f ms (%.2fx)\n", t1 - t0, t3 - t2, (t1 - t0) / (t3 - t2));
  }
  return 0;
}
