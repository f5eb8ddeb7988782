/* How fast this machine's memcpy copies n bytes when the destination lies
 * `ahead` bytes past the source modulo 4 KiB (negative: behind), in one
 * call and in 2 KiB calls, against the same bytes aligned. The copy in
 * fireopal_core::copy chooses between its vector loop and one memcpy by
 * that distance.
 *
 *   cc -O2 -o /tmp/copy_skew scripts/copy_skew.c
 *   /tmp/copy_skew 262144 -16 8 16 32 144 336
 *
 * Prints one line per distance: GB/s of one memcpy, of 2 KiB pieces and
 * of the aligned copy, each the best of seven timed batches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE 2048

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Best GB/s over seven batches of `reps` copies; mode 0 one call, 1 pieces. */
static double rate(char *dst, const char *src, size_t n, int mode, long reps) {
    double best = 1e30;
    for (int b = 0; b < 7; b++) {
        double t0 = now();
        for (long i = 0; i < reps; i++) {
            if (mode == 0) {
                memcpy(dst, src, n);
            } else {
                for (size_t k = 0; k < n; k += PIECE)
                    memcpy(dst + k, src + k, n - k < PIECE ? n - k : PIECE);
            }
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
        double t = (now() - t0) / reps;
        if (t < best) best = t;
    }
    return n / best / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: copy_skew BYTES AHEAD [AHEAD...]\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10);
    if (n == 0 || n > (64u << 20)) {
        fprintf(stderr, "copy_skew: BYTES from 1 to 64 MiB\n");
        return 2;
    }
    /* Both buffers page-aligned with two pages of room on each side. */
    char *a = aligned_alloc(4096, n + 4 * 4096), *b = aligned_alloc(4096, n + 4 * 4096);
    if (!a || !b) return 1;
    memset(a, 1, n + 4 * 4096);
    memset(b, 2, n + 4 * 4096);
    const char *src = a + 2 * 4096 + 16;
    long reps = (long)(2e9 / n / 7) + 1;
    double aligned = rate(b + 2 * 4096 + 16, src, n, 0, reps);
    for (int i = 2; i < argc; i++) {
        long ahead = strtol(argv[i], NULL, 10);
        if (ahead <= -4096 || ahead >= 4096) {
            fprintf(stderr, "copy_skew: AHEAD within one page, not %ld\n", ahead);
            return 2;
        }
        char *dst = b + 2 * 4096 + 16 + ahead;
        printf("bytes %zu ahead %ld: one memcpy %.2f GB/s, 2 KiB pieces %.2f, aligned %.2f\n",
               n, ahead, rate(dst, src, n, 0, reps), rate(dst, src, n, 1, reps), aligned);
    }
    return 0;
}
