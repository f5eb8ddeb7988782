/* What the MPI reference programs share with `fireopal bench`: the
 * iteration counts per message size and the printed row. */
#ifndef FIREOPAL_MPI_PATTERN_H
#define FIREOPAL_MPI_PATTERN_H

#include <stdio.h>

#define WINDOW 64
#define LARGEST (4 << 20)

/* Round trips (or operations) timed for latency at size n. */
static inline int latency_iters(int n) {
    return n <= 8192 ? 20000 : n <= 65536 ? 5000 : n <= (1 << 20) ? 500 : 100;
}

/* Windows of WINDOW operations timed for bandwidth at size n. */
static inline int bw_windows(int n) {
    return n <= 8192 ? 400 : n <= 65536 ? 100 : n <= (1 << 20) ? 20 : 8;
}

/* One result row, sized as the fireopal bench prints it: in the largest
 * unit the size is a whole number of. */
static inline void print_row(int n, double latency_us, double bandwidth_mbs) {
    if (n >= (1 << 20) && n % (1 << 20) == 0)
        printf("%6d MiB %14.2f %16.1f\n", n >> 20, latency_us, bandwidth_mbs);
    else if (n >= 1024 && n % 1024 == 0)
        printf("%6d KiB %14.2f %16.1f\n", n >> 10, latency_us, bandwidth_mbs);
    else
        printf("%8d B %14.2f %16.1f\n", n, latency_us, bandwidth_mbs);
}

#endif
