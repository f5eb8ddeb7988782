/* OSU-pattern latency and bandwidth with MPI point-to-point, the same
 * pattern as examples/pingpong.rs, to measure a reference MPI library at the
 * same moment (see docs/BENCHMARKS.md, "TCP BTL"). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t sizes[] = {0, 8, 64, 1024, 8192, 65536, 1 << 20, 4 << 20};
    char *buf = malloc(4 << 20); memset(buf, 1, 4 << 20);
    MPI_Request req[64];
    if (rank == 0) printf("%10s %14s %16s\n", "bytes", "latency (us)", "bandwidth (GB/s)");
    for (int k = 0; k < 8; k++) {
        int n = (int)sizes[k];
        int iters = n <= 8192 ? 20000 : n <= 65536 ? 5000 : 300, warm = iters / 10;
        double t0 = 0;
        for (int i = 0; i < iters + warm; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (rank == 0) { MPI_Send(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD); MPI_Recv(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
            else { MPI_Recv(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD); }
        }
        double lat = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
        long windows = (2L << 30) / (64L * (n ? n : 1)); if (windows < 5) windows = 5; if (windows > 100) windows = 100;
        double bytes = 0;
        for (long w = 0; w < windows + 2; w++) {
            if (w == 2) { t0 = MPI_Wtime(); bytes = 0; }
            if (rank == 0) {
                for (int j = 0; j < 64; j++) MPI_Isend(buf, n, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(64, req, MPI_STATUSES_IGNORE);
                MPI_Recv(buf, 0, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                bytes += 64.0 * n;
            } else {
                for (int j = 0; j < 64; j++) MPI_Irecv(buf, n, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(64, req, MPI_STATUSES_IGNORE);
                MPI_Send(buf, 0, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
            }
        }
        double bw = bytes / (MPI_Wtime() - t0) / 1e9;
        if (rank == 0) printf("%10d %14.2f %16.3f\n", n, lat, bw);
    }
    MPI_Finalize();
    return 0;
}
