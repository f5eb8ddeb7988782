/* One-sided latency and bandwidth with MPI, in the pattern of
 * `fireopal bench put|get`, for a same-machine reference:
 *   latency   = one MPI_Put (or MPI_Get) and MPI_Win_flush, averaged;
 *   bandwidth = windows of 64 operations, one MPI_Win_flush per window.
 * Rank 0 works on rank 1's window inside one passive-target epoch.
 *
 *   mpicc.openmpi -O2 -o /tmp/mpi_rma scripts/mpi/rma.c
 *   mpirun.openmpi --bind-to core -np 2 --mca btl self,vader /tmp/mpi_rma put
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

static const int sizes[] = {8, 64, 1 << 10, 8 << 10, 64 << 10, 1 << 20, 4 << 20};

static void op(int put, char *local, int n, MPI_Win win) {
    if (put)
        MPI_Put(local, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win);
    else
        MPI_Get(local, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win);
}

int main(int argc, char **argv) {
    int rank, size, put = !(argc > 1 && strcmp(argv[1], "get") == 0);
    char *window, *local;
    MPI_Win win;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Alloc_mem(LARGEST, MPI_INFO_NULL, &window);
    MPI_Alloc_mem(LARGEST, MPI_INFO_NULL, &local);
    memset(window, rank + 1, LARGEST);
    memset(local, rank + 3, LARGEST);
    MPI_Win_create(window, LARGEST, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (rank == 0) {
        printf("# MPI %s: rank 0 -> rank 1's window; latency = one operation and MPI_Win_flush\n",
               put ? "put" : "get");
        printf("%10s %14s %16s\n", "size", "latency (us)", "bandwidth (MB/s)");
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int n = sizes[s], iters = latency_iters(n), warmup = iters / 10, windows = bw_windows(n);
            double t0 = 0, lat, bw;
            for (int i = 0; i < warmup + iters; i++) {
                if (i == warmup) t0 = MPI_Wtime();
                op(put, local, n, win);
                MPI_Win_flush(1, win);
            }
            lat = (MPI_Wtime() - t0) * 1e6 / iters;
            t0 = MPI_Wtime();
            for (int w = 0; w < windows; w++) {
                for (int i = 0; i < WINDOW; i++) op(put, local, n, win);
                MPI_Win_flush(1, win);
            }
            bw = (double)n * WINDOW * windows / (MPI_Wtime() - t0) / 1e6;
            print_row(n, lat, bw);
        }
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Free_mem(window);
    MPI_Free_mem(local);
    MPI_Finalize();
    return 0;
}
