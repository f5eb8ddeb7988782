#!/usr/bin/env bash
# Runs a fireopal benchmark and the same pattern with MPI peers alternately,
# round after round, in one invocation, and reports per size the median and
# min-max of every contender and the ratio fireopal/peer of the medians,
# with the machine line and the machine's own limits. This is how the
# project states a performance figure (docs/BENCHMARKS.md).
#
#   scripts/compare.sh [--bench pingpong|p2p|put|get|shmem-put|shmem-get|shmem-atomic]
#                      [--btl shm|tcp] [--peers openmpi,mpich,oshmem|none]
#                      [--rounds N] [--quick] [--sizes N[,N]...]
#                      [--json FILE] [--out DIR] [--no-build] [--no-limits]
#                      [-- fireopal bench args...]
#
# Latency ratios under 1 and bandwidth ratios over 1 favour fireopal.
# Raw outputs of every run stay in DIR (default target/compare/<UTC time>/).
# FIREOPAL=path runs that fireopal command instead of building the release.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '8,13p' "$0" | sed 's/^# \{0,3\}//'
}

bench=pingpong btl=shm peers=auto rounds=3 quick=0 sizes="" json="" build=1 out="" limits=1
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bench) bench=${2:?--bench needs a value}; shift 2 ;;
        --btl) btl=${2:?--btl needs a value}; shift 2 ;;
        --peers) peers=${2?--peers needs a value}; shift 2 ;;
        --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
        --quick) quick=1; shift ;;
        --sizes) sizes=${2:?--sizes needs a value}; shift 2 ;;
        --json) json=${2:?--json needs a file}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        --no-build) build=0; shift ;;
        --no-limits) limits=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "compare.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$bench" in pingpong|p2p|put|get|shmem-put|shmem-get|shmem-atomic) ;; *) echo "compare.sh: --bench is pingpong, p2p, put, get, shmem-put, shmem-get or shmem-atomic, not $bench" >&2; exit 2 ;; esac
# The two-sided benchmarks share one MPI program and its peers; the
# symmetric-heap ones compare with OpenSHMEM (and, for put and get over
# tcp, with Open MPI's one-sided operations).
two_sided=0 shmem=0
case "$bench" in pingpong|p2p) two_sided=1 ;; shmem-*) shmem=1 ;; esac
case "$btl" in shm|tcp) ;; *) echo "compare.sh: --btl is shm or tcp, not $btl" >&2; exit 2 ;; esac
case "$rounds" in ''|*[!0-9]*|0) echo "compare.sh: --rounds takes a whole number from 1, not $rounds" >&2; exit 2 ;; esac
case "$sizes" in *[!0-9,]*|,*|*,|*,,*) echo "compare.sh: --sizes takes byte counts separated by commas, not $sizes" >&2; exit 2 ;; esac

# Peers by default: every MPI installed that runs this pattern here.
if [ "$peers" = none ]; then
    peers=""
elif [ "$peers" = auto ]; then
    peers=""
    if [ "$shmem" = 1 ]; then
        command -v oshcc >/dev/null && peers="oshmem"
        if command -v mpicc.openmpi >/dev/null && [ "$btl" = tcp ] && [ "$bench" != shmem-atomic ]; then
            peers="${peers:+$peers,}openmpi"
        fi
    else
        command -v mpicc.openmpi >/dev/null && peers="openmpi"
        if command -v mpicc.mpich >/dev/null && [ "$two_sided" = 1 ]; then
            peers="${peers:+$peers,}mpich"
        fi
    fi
fi
peer_list=()
[ -n "$peers" ] && IFS=, read -r -a peer_list <<<"$peers"
for p in "${peer_list[@]}"; do
    case "$p" in
        openmpi) command -v mpicc.openmpi >/dev/null || { echo "compare.sh: Open MPI is not installed (Debian: openmpi-bin libopenmpi-dev)" >&2; exit 2; } ;;
        mpich)
            command -v mpicc.mpich >/dev/null || { echo "compare.sh: MPICH is not installed (Debian: mpich libmpich-dev)" >&2; exit 2; }
            [ "$two_sided" = 1 ] || { echo "compare.sh: the mpich peer runs pingpong and p2p only (its one-sided operations over ucx are not the pattern measured here)" >&2; exit 2; } ;;
        oshmem)
            command -v oshcc >/dev/null || { echo "compare.sh: OpenSHMEM is not installed (Debian: libopenmpi-dev, which has oshcc and oshrun)" >&2; exit 2; }
            [ "$shmem" = 1 ] || { echo "compare.sh: the oshmem peer runs the shmem-* benchmarks only" >&2; exit 2; } ;;
        *) echo "compare.sh: unknown peer $p (openmpi, mpich, oshmem)" >&2; exit 2 ;;
    esac
done

[ -n "$out" ] || out="target/compare/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

if [ -n "${FIREOPAL:-}" ]; then
    fireopal=$FIREOPAL
else
    [ "$build" = 1 ] && cargo build --release --workspace >&2
    fireopal=target/release/fireopal
fi
[ -x "$fireopal" ] || { echo "compare.sh: $fireopal is missing (drop --no-build)" >&2; exit 2; }

if [ "$limits" = 1 ]; then
    cc -O2 -o "$out/limits" scripts/limits.c
fi
case "$bench" in
    pingpong|p2p) mpi_src=scripts/mpi/pingpong.c mpi_args=() ;;
    shmem-atomic) mpi_src="" mpi_args=() ;;
    shmem-*) mpi_src=scripts/mpi/rma.c mpi_args=("${bench#shmem-}") ;;
    *) mpi_src=scripts/mpi/rma.c mpi_args=("$bench") ;;
esac
shmem_args=("${bench#shmem-}")
if [ "$quick" = 1 ]; then
    [ "$two_sided" = 1 ] || { echo "compare.sh: --quick is for pingpong and p2p only" >&2; exit 2; }
    mpi_args+=(--quick)
fi
if [ -n "$sizes" ]; then
    [ "$two_sided" = 1 ] || { echo "compare.sh: --sizes is for pingpong and p2p only" >&2; exit 2; }
    mpi_args+=(--sizes "$sizes")
fi
for p in "${peer_list[@]}"; do
    if [ "$p" = oshmem ]; then
        oshcc -O2 -o "$out/shmem_oshmem" scripts/shmem/shmem_lat.c 2>"$out/build-$p.log" ||
            { cat "$out/build-$p.log" >&2; exit 1; }
        continue
    fi
    "mpicc.$p" -O2 -o "$out/mpi_$p" "$mpi_src" 2>"$out/build-$p.log" ||
        { cat "$out/build-$p.log" >&2; exit 1; }
done

# The machine line, and its limits measured now.
{
    echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    # The model name alone may not tell a processor's generation.
    echo "cpu_family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "cpu_model=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "cores=$(nproc)"
    echo "kernel=$(uname -sr)"
    # The peers' tcp runs under the system's congestion control.
    echo "tcp_congestion=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo '?')"
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "load=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "bench=$bench"
    echo "btl=$btl"
    echo "rounds=$rounds"
    echo "quick=$quick"
    echo "sizes=$sizes"
    echo "peers=$peers"
    echo "extra=${extra[*]:-}"
} >"$out/machine.txt"
if [ "$limits" = 1 ]; then
    "$out/limits" >"$out/limits.txt"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI and UCX pick interfaces by themselves: keep them on loopback.
ompi_common=(--bind-to core -np 2 --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)

run_one() {
    local who=$1 file=$2
    case "$who" in
        fireopal)
            local args=("$bench" --btl "$btl" --json)
            [ "$quick" = 1 ] && args+=(--quick)
            [ -n "$sizes" ] && args+=(--sizes "$sizes")
            # On loopback too, as the peers are: one tcp module, where every
            # interface would otherwise be a lane of its own.
            local pin=()
            [ "$btl" = tcp ] && pin=(--param btl_tcp_if_include=lo)
            "$fireopal" run --bind-to core -n 2 "${pin[@]}" -- "$fireopal" bench "${args[@]}" "${extra[@]}" >"$file"
            ;;
        openmpi)
            local mca=(--mca btl "self,vader")
            if [ "$btl" = tcp ]; then
                mca=(--mca btl "self,tcp")
                # osc rdma refuses a window over the tcp BTL.
                [ "$two_sided" = 1 ] || mca+=(--mca osc pt2pt)
            fi
            timeout 600 mpirun.openmpi "${ompi_common[@]}" "${mca[@]}" "$out/mpi_openmpi" "${mpi_args[@]}" >"$file"
            ;;
        oshmem)
            # Open MPI's OSHMEM over UCX: shared memory, or UCX's tcp on lo.
            # It crashes in shmem_finalize after printing its figures; the
            # report needs the figures, so the exit status is not checked.
            local ucx=()
            [ "$btl" = tcp ] && ucx=(-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo)
            timeout 600 oshrun "${ompi_common[@]}" "${ucx[@]}" "$out/shmem_oshmem" "${shmem_args[@]}" >"$file" 2>"$file.stderr" || true
            grep -q ' B ' "$file" || { echo "compare.sh: oshmem printed no figures:" >&2; cat "$file" "$file.stderr" >&2; exit 1; }
            ;;
        mpich)
            if [ "$btl" = tcp ]; then
                # Through UCX's tcp transport on lo, never its shared memory.
                MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo \
                    timeout 600 mpiexec.hydra -bind-to core -n 2 "$out/mpi_mpich" "${mpi_args[@]}" >"$file"
            else
                timeout 600 mpiexec.hydra -bind-to core -n 2 "$out/mpi_mpich" "${mpi_args[@]}" >"$file"
            fi
            ;;
    esac
}

contenders=(fireopal "${peer_list[@]}")
count=${#contenders[@]}
for ((r = 1; r <= rounds; r++)); do
    # Each round starts one contender later, so none always runs first.
    for ((k = 0; k < count; k++)); do
        who=${contenders[$(((r - 1 + k) % count))]}
        echo "round $r/$rounds: $who" >&2
        run_one "$who" "$out/round-$r-$who.txt"
    done
done

report_args=("$out")
[ -n "$json" ] && report_args+=(--json "$json")
python3 scripts/compare_report.py "${report_args[@]}"
