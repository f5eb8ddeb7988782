/* Two-sided latency and bandwidth with MPI, in the pattern of
 * `fireopal bench pingpong`, for a same-machine reference:
 *   latency   = half a round trip of MPI_Send/MPI_Recv between ranks 0
 *               and 1, averaged after a warm-up of a tenth;
 *   bandwidth = windows of 64 MPI_Isend answered by one empty message
 *               from the receiver, which has its 64 MPI_Irecv posted.
 * Iteration counts and sizes are the fireopal bench's, so the two run the
 * same number of operations at every size; `--quick` cuts them as the
 * bench's `--quick` does, and `--sizes N[,N]...` measures those sizes
 * (bytes, at most 4 MiB) instead of the default ones, as the bench's
 * `--sizes` does.
 *
 *   mpicc.openmpi -O2 -o /tmp/mpi_pingpong scripts/mpi/pingpong.c
 *   mpirun.openmpi --bind-to core -np 2 --mca btl self,vader /tmp/mpi_pingpong
 *
 * `scripts/compare.sh` builds and runs it alternately with fireopal.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

#define TAG_PING 1
#define TAG_ACK 2

#define MAX_SIZES 32

static int sizes[MAX_SIZES] = {0, 8, 64, 1 << 10, 8 << 10, 64 << 10, 1 << 20, 4 << 20};
static int nsizes = 8;

static int quick;

/* Reads `--sizes`' comma-separated list; 0 if it is malformed. */
static int parse_sizes(const char *list) {
    int n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > LARGEST || n == MAX_SIZES) return 0;
        sizes[n++] = (int)v;
        if (*end == ',' && end[1]) end++;
        else if (*end) return 0;
        p = end;
    }
    nsizes = n;
    return n > 0;
}

/* `--quick` cuts the counts as the fireopal bench's `--quick` does. */
static int iters_at(int n) {
    int iters = latency_iters(n);
    return quick ? (iters / 20 > 5 ? iters / 20 : 5) : iters;
}

static int windows_at(int n) {
    int windows = bw_windows(n);
    return quick ? (windows / 10 > 2 ? windows / 10 : 2) : windows;
}

static double latency_us(int rank, char *buf, int n) {
    int iters = iters_at(n), warmup = iters / 10 > 2 ? iters / 10 : 2;
    double t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, n, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD);
            MPI_Recv(buf, n, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, n, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, n, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

static double bandwidth_mbs(int rank, char *buf, int n) {
    MPI_Request reqs[WINDOW];
    int windows = windows_at(n);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int w = 0; w < windows; w++) {
        if (rank == 0) {
            for (int i = 0; i < WINDOW; i++)
                MPI_Isend(buf, n, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD, &reqs[i]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int i = 0; i < WINDOW; i++)
                MPI_Irecv(buf, n, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, &reqs[i]);
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    return n == 0 ? 0.0 : (double)n * WINDOW * windows / t / 1e6;
}

int main(int argc, char **argv) {
    int rank, size;
    char *buf;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[a], "--sizes") == 0 && a + 1 < argc && parse_sizes(argv[a + 1])) {
            a++;
        } else {
            if (rank == 0) fprintf(stderr, "usage: pingpong [--quick] [--sizes N[,N]...]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Alloc_mem(LARGEST, MPI_INFO_NULL, &buf);
    memset(buf, rank + 1, LARGEST);
    if (rank == 0) {
        printf("# MPI pingpong: rank 0 <-> rank 1\n");
        printf("%10s %14s %16s\n", "size", "latency (us)", "bandwidth (MB/s)");
    }
    for (int s = 0; s < nsizes; s++) {
        int n = sizes[s];
        double lat = latency_us(rank, buf, n);
        double bw = bandwidth_mbs(rank, buf, n);
        if (rank == 0) print_row(n, lat, bw);
    }
    MPI_Free_mem(buf);
    MPI_Finalize();
    return 0;
}
