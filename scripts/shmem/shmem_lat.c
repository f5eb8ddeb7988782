/*
 * One-sided latency on the OpenSHMEM API, in the pattern of the OSU
 * OpenSHMEM benchmarks (osu_oshm_put, osu_oshm_get, osu_oshm_atomics) and
 * of `fireopal bench shmem-put|shmem-get|shmem-atomic`, which
 * scripts/compare.sh runs against it:
 *
 *   oshcc -O2 -o /tmp/shmem_lat scripts/shmem/shmem_lat.c
 *   oshrun --bind-to core -np 2 /tmp/shmem_lat put|get|atomic
 *
 * PE 0 puts n bytes into PE 1's symmetric buffer and quiets (put), or gets
 * them (get), or does a 64-bit fetch-add on PE 1's word (atomic), many
 * times after a warm-up, and prints per size the mean time of one
 * operation. Bandwidth is timed apart: windows of 64 shmem_putmem_nbi (or
 * shmem_getmem_nbi) and one shmem_quiet each, as scripts/mpi/rma.c times
 * MPI's; for the atomic it is 8 bytes over the time of one. The table is
 * the one the comparison script reads.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void print_row(size_t n, double us, double mbs)
{
    /* In the largest unit the size is a whole number of. */
    if (n >= (1u << 20) && n % (1u << 20) == 0)
        printf("%10zu MiB %14.3f %16.1f\n", n >> 20, us, mbs);
    else if (n >= 1024 && n % 1024 == 0)
        printf("%10zu KiB %14.3f %16.1f\n", n >> 10, us, mbs);
    else
        printf("%10zu B %14.3f %16.1f\n", n, us, mbs);
}

/* Windows timed for bandwidth at size n, as fireopal's bench and
 * scripts/mpi/pattern.h count them. */
static int bw_windows(size_t n)
{
    return n <= 8192 ? 400 : n <= 65536 ? 100 : n <= (1 << 20) ? 20 : 8;
}

int main(int argc, char **argv)
{
    const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20};
    const size_t max = 4 << 20;
    const char *op = argc > 1 ? argv[1] : "put";
    int atomic = strcmp(op, "atomic") == 0, get = strcmp(op, "get") == 0;
    if (!atomic && !get && strcmp(op, "put") != 0) {
        fprintf(stderr, "usage: %s put|get|atomic\n", argv[0]);
        return 2;
    }
    shmem_init();
    int me = shmem_my_pe();
    char *buf = shmem_malloc(max);
    long *word = shmem_calloc(1, sizeof(long));
    char *local = malloc(max);
    memset(buf, me + 1, max);
    memset(local, me + 100, max);
    shmem_barrier_all();
    if (me == 0) {
        printf("# shmem %s: PE 0 -> PE 1\n%10s %14s %16s\n", op, "size", "latency (us)",
               "bandwidth (MB/s)");
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            if (atomic && n != 8)
                break;
            int iters = n <= 8192 ? 10000 : (n <= 65536 ? 1000 : 100);
            int warmup = iters / 10;
            double t0 = 0;
            for (int i = 0; i < warmup + iters; i++) {
                if (i == warmup)
                    t0 = now_us();
                if (atomic) {
                    shmem_long_atomic_fetch_add(word, 1, 1);
                } else if (get) {
                    shmem_getmem(local, buf, n, 1);
                } else {
                    shmem_putmem(buf, local, n, 1);
                    shmem_quiet();
                }
            }
            double us = (now_us() - t0) / iters, mbs = n / us;
            if (!atomic) {
                int windows = bw_windows(n);
                t0 = now_us();
                for (int w = 0; w < windows; w++) {
                    for (int i = 0; i < 64; i++) {
                        if (get)
                            shmem_getmem_nbi(local, buf, n, 1);
                        else
                            shmem_putmem_nbi(buf, local, n, 1);
                    }
                    shmem_quiet();
                }
                mbs = (double)n * 64 * windows / (now_us() - t0);
            }
            print_row(n, us, mbs);
        }
        fflush(stdout);
    }
    shmem_barrier_all();
    free(local);
    shmem_free(word);
    shmem_free(buf);
    shmem_finalize();
    return 0;
}
