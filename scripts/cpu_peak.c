/* The CPU's own float32 and bfloat16 multiply-add rates, one core (issue 5).
 *
 *   cc -O2 -mavx512f -mavx512bf16 scripts/cpu_peak.c -o cpu_peak && ./cpu_peak
 *
 * Runs 24 independent chains (enough to hide the latency of either
 * instruction) of vfmadd231ps (16 float32 multiply-adds) and of vdpbf16ps
 * (32 bfloat16 products summed pairwise into 16 float32 lanes) on 512-bit
 * registers, and prints the rate of each in GFLOP/s (best of 3) and their
 * ratio. A ratio below 1 means no bfloat16 matmul or convolution built on
 * vdpbf16ps can beat float32 on this CPU; only AMX tiles could. scripts/bench_train.py
 * builds and runs it next to its mixed_bfloat16 row.
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 24
#define ROUNDS 8000000L

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  __m512 acc[CHAINS];
  for (int k = 0; k < CHAINS; ++k) acc[k] = _mm512_setzero_ps();
  const __m512 a = _mm512_set1_ps(1e-8f), b = _mm512_set1_ps(1.0f);
  const __m512bh ah = (__m512bh)_mm512_set1_epi16(0x3f80);  /* bfloat16 1.0 */
  const __m512bh bh = (__m512bh)_mm512_set1_epi16(0x0001);  /* a tiny bfloat16 */
  double fma_best = 1e30, dot_best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    double start = now();
    for (long i = 0; i < ROUNDS; ++i) {
#pragma GCC unroll 24
      for (int k = 0; k < CHAINS; ++k) acc[k] = _mm512_fmadd_ps(a, b, acc[k]);
      __asm__ volatile("" : : "v"(acc[0]));
    }
    double t = now() - start;
    if (t < fma_best) fma_best = t;
    start = now();
    for (long i = 0; i < ROUNDS; ++i) {
#pragma GCC unroll 24
      for (int k = 0; k < CHAINS; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], ah, bh);
      __asm__ volatile("" : : "v"(acc[0]));
    }
    t = now() - start;
    if (t < dot_best) dot_best = t;
  }
  float sum = 0.0f;
  for (int k = 0; k < CHAINS; ++k) sum += _mm512_reduce_add_ps(acc[k]);
  const double instructions = (double)ROUNDS * CHAINS;
  const double fma_gflops = instructions * 16 * 2 / fma_best / 1e9;
  const double dot_gflops = instructions * 32 * 2 / dot_best / 1e9;
  printf("float32 vfmadd231ps %.1f GFLOP/s, bfloat16 vdpbf16ps %.1f GFLOP/s, ratio %.3f "
         "(checksum %g)\n", fma_gflops, dot_gflops, dot_gflops / fma_gflops, sum);
  return 0;
}
