/* What this machine allows two processes on cores 0 and 1, as floors for
 * the transports' figures:
 *   cacheline_half_rtt_ns   one cache line passed back and forth through
 *                           shared memory (the floor of shm latency);
 *   cacheline_half_rtt_ns_spaced  the same with each waiting side doing
 *                           40 dependent multiply-adds between its looks
 *                           at the line, about as long as a transport's
 *                           poll loop takes (on some virtual machines a
 *                           waiter that looks without pause slows the
 *                           line's transfer);
 *   memcpy_MBps_<n>         one core copying n bytes (the ceiling of a
 *                           copy-in/copy-out transport);
 *   memcpy_MBps_<n>_skew16  the same with the destination 16 bytes further
 *                           into its cache line than the source, where
 *                           `rep movsb` slows down on some processors;
 *   tcp_half_rtt_us_<n>     TCP over loopback with both sides polling
 *                           non-blocking sockets, as fireopal and Open MPI
 *                           do, under Reno congestion control as fireopal's
 *                           connections within a host (the floor of tcp
 *                           latency at n bytes; under BBR a large message
 *                           waits on acknowledgements);
 *   tcp_half_rtt_us_<n>_after16  the same with each message sent behind
 *                           a 16-byte header in one sendmsg and read after
 *                           it, as a framed transport does: the kernel's
 *                           copies then meet the skew above.
 * One `name value` line each.
 *
 *   cc -O2 -o /tmp/limits scripts/limits.c && /tmp/limits
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_core(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    sched_setaffinity(0, sizeof set, &set); /* best effort: one core is fine */
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Dependent arithmetic the optimiser keeps: `n` multiply-adds. */
static void spacer(int n) {
    uint64_t x = (uint64_t)n;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1;
        __asm__ volatile("" : "+r"(x));
    }
}

static void cacheline(int spacing) {
    enum { ROUNDS = 1000000 };
    volatile uint64_t *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (line == MAP_FAILED) die("mmap");
    *line = 0;
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        on_core(1);
        for (uint64_t i = 1; i < 2 * ROUNDS; i += 2) {
            while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != i) spacer(spacing);
            __atomic_store_n(line, i + 1, __ATOMIC_RELEASE);
        }
        _exit(0);
    }
    on_core(0);
    double t0 = now();
    for (uint64_t i = 0; i < 2 * ROUNDS; i += 2) {
        __atomic_store_n(line, i + 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != i + 2) spacer(spacing);
    }
    double t = now() - t0;
    waitpid(child, NULL, 0);
    printf("cacheline_half_rtt_ns%s %.1f\n", spacing ? "_spaced" : "", t / ROUNDS / 2 * 1e9);
}

static void copy_rate(size_t n, size_t skew) {
    char *from = aligned_alloc(4096, n + 4096), *to = aligned_alloc(4096, n + 4096);
    if (!from || !to) die("aligned_alloc");
    memset(from, 1, n + 4096);
    memset(to, 2, n + 4096);
    int rounds = (int)((1u << 30) / n);
    double t0 = now();
    for (int i = 0; i < rounds; i++) {
        memcpy(to + skew, from, n);
        __asm__ volatile("" ::: "memory");
    }
    double t = now() - t0;
    printf("memcpy_MBps_%zu%s %.0f\n", n, skew ? "_skew16" : "", (double)n * rounds / t / 1e6);
    free(from);
    free(to);
}

/* Sends `head` bytes of `hdr` then `n` of `p`, gathered. */
static void send_all(int s, const char *hdr, size_t head, const char *p, size_t n) {
    size_t done = 0, total = head + n;
    while (done < total) {
        struct iovec iov[2];
        int k = 0;
        if (done < head) iov[k++] = (struct iovec){(void *)(hdr + done), head - done};
        size_t in_p = done > head ? done - head : 0;
        iov[k++] = (struct iovec){(void *)(p + in_p), n - in_p};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        ssize_t r = sendmsg(s, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EAGAIN) continue;
            die("sendmsg");
        }
        done += (size_t)r;
    }
}

static void recv_all(int s, char *p, size_t n) {
    while (n > 0) {
        ssize_t r = recv(s, p, n, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EAGAIN) continue;
            die("recv");
        }
        if (r == 0) {
            fprintf(stderr, "peer closed\n");
            exit(1);
        }
        p += r;
        n -= (size_t)r;
    }
}

/* Reno, which every kernel has and lets anyone choose; a refusal leaves
 * the system's default. */
static void reno(int s) {
    setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, "reno", 4);
}

static void tcp_pingpong(size_t n, size_t head) {
    int rounds = n <= 65536 ? 20000 : 500, warmup = rounds / 10, one = 1;
    char hdr[64] = {0};
    char *buf = aligned_alloc(4096, n + 4096);
    if (!buf) die("aligned_alloc");
    memset(buf, 3, n);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (listener < 0 || bind(listener, (void *)&addr, sizeof addr) < 0 ||
        getsockname(listener, (void *)&addr, &len) < 0 || listen(listener, 1) < 0)
        die("listen");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        on_core(1);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0) reno(s);
        if (s < 0 || connect(s, (void *)&addr, sizeof addr) < 0) die("connect");
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (int i = 0; i < warmup + rounds; i++) {
            recv_all(s, hdr, head);
            recv_all(s, buf, n);
            send_all(s, hdr, head, buf, n);
        }
        _exit(0);
    }
    on_core(0);
    int s = accept(listener, NULL, NULL);
    if (s < 0) die("accept");
    reno(s);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double t0 = 0;
    for (int i = 0; i < warmup + rounds; i++) {
        if (i == warmup) t0 = now();
        send_all(s, hdr, head, buf, n);
        recv_all(s, hdr, head);
        recv_all(s, buf, n);
    }
    double t = now() - t0;
    waitpid(child, NULL, 0);
    close(s);
    close(listener);
    free(buf);
    printf("tcp_half_rtt_us_%zu%s %.2f\n", n, head ? "_after16" : "", t / rounds / 2 * 1e6);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    cacheline(0);
    cacheline(40);
    copy_rate(64 << 10, 0);
    copy_rate(64 << 10, 16);
    copy_rate(1 << 20, 0);
    copy_rate(4 << 20, 0);
    tcp_pingpong(8, 0);
    tcp_pingpong(64 << 10, 0);
    tcp_pingpong(1 << 20, 0);
    tcp_pingpong(1 << 20, 16);
    return 0;
}
