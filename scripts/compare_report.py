#!/usr/bin/env python3
"""Summarises a directory written by scripts/compare.sh.

Reads machine.txt, limits.txt and round-<r>-<contender>.txt (fireopal's
bench JSON, or the MPI programs' tables), and prints per size the median
and min-max latency and bandwidth of every contender over the rounds, with
the ratio fireopal/peer of the medians. With --json FILE it also writes
the same figures, every round's raw value and the paired ratios below,
as JSON.

Each round runs the contenders one after the other, so a round's runs lie
seconds apart where the rounds span minutes. The paired ratios divide
fireopal's figure by the peer's of the same round and take the median
over the rounds: a slower stretch of the host that spans a round weighs
on both sides of its ratio alike.

Some hosts run a whole job in a slower state now and then (its cause
lies outside the guest: every cache-line transfer and kernel copy takes
twice as long or more). A run whose rounds fell in different states
compares the states, not the libraries, so the report also gives the
medians of each contender's rounds in its faster state: a round is slow
when at two sizes or more its latency is over SLOW times that
contender's best at the size. (The slow state moves small messages on
shared memory and large ones on loopback tcp; one size alone may be
noise.)
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}
ROW = re.compile(r"^\s*(\d+)\s+(B|KiB|MiB)\s+([0-9.]+)\s+([0-9.]+)\s*$")
ROUND_FILE = re.compile(r"^round-(\d+)-([a-z]+)\.txt$")
# A round whose latencies at two sizes are over this many times the
# contender's best is in the host's slow state.
SLOW = 1.5


def parse_fireopal(text):
    """Rows of `fireopal bench ... --json`: {size: (latency_us, bandwidth_mbs)}."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            doc = json.loads(line)
            return {
                r["size"]: (r["latency_us"], r["bandwidth_mbs"]) for r in doc["results"]
            }
    raise ValueError("no JSON line in fireopal's output")


def parse_table(text):
    """Rows of the MPI programs' tables (`8 B`, `64 KiB`, `1 MiB`)."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rows[int(m.group(1)) * UNITS[m.group(2)]] = (float(m.group(3)), float(m.group(4)))
    if not rows:
        raise ValueError("no result rows")
    return rows


def read_kv(path):
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=" if "=" in line else " ")
            if sep:
                out[key.strip()] = value.strip()
    return out


def human(n):
    """`n` in the largest unit it is a whole number of, as the benches
    print it."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def spread(values):
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def slowdown(rounds, sizes):
    """Each round's latency against the best of all rounds, size by size:
    the second largest of these ratios (the largest with one size), 1.0
    for a round that was fastest at every size or all but one."""
    best = {s: min(r[s][0] for r in rounds) for s in sizes}
    out = []
    for r in rounds:
        ratios = sorted(r[s][0] / best[s] for s in sizes if best[s] > 0)
        out.append(ratios[-2] if len(ratios) > 1 else (ratios or [1.0])[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    machine = read_kv(args.dir / "machine.txt")
    limits = read_kv(args.dir / "limits.txt")
    runs = {}  # contender -> list of {size: (lat, bw)}
    by_round = {}  # contender -> {round: {size: (lat, bw)}}
    numbers = {}  # contender -> the round of each of its runs, as in `runs`
    for f in sorted(args.dir.iterdir()):
        m = ROUND_FILE.match(f.name)
        if not m:
            continue
        who = m.group(2)
        text = f.read_text()
        try:
            rows = parse_fireopal(text) if who == "fireopal" else parse_table(text)
        except (ValueError, KeyError, json.JSONDecodeError) as e:
            sys.exit(f"compare_report: {f}: {e}")
        runs.setdefault(who, []).append(rows)
        by_round.setdefault(who, {})[int(m.group(1))] = rows
        numbers.setdefault(who, []).append(int(m.group(1)))
    if "fireopal" not in runs:
        sys.exit(f"compare_report: no fireopal run in {args.dir}")
    order = [p for p in machine.get("peers", "").split(",") if p]
    peers = [p for p in order if p in runs] + sorted(
        w for w in runs if w != "fireopal" and w not in order
    )
    sizes = sorted(set.intersection(*(set(r) for rs in runs.values() for r in rs)))

    def summarise(pick):
        out = {}
        for who, rs in runs.items():
            rs = pick(who, rs)
            out[who] = {
                s: {
                    "latency_us": spread([r[s][0] for r in rs]),
                    "bandwidth_mbs": spread([r[s][1] for r in rs]),
                }
                for s in sizes
            }
        return out

    slow = {who: slowdown(rs, sizes) for who, rs in runs.items()}
    fast_rounds = {
        who: [r for r, x in zip(rs, slow[who]) if x <= SLOW] for who, rs in runs.items()
    }
    figures = summarise(lambda who, rs: rs)
    fast = (
        summarise(lambda who, rs: fast_rounds[who])
        if all(fast_rounds.values())
        else None
    )

    def ratio(who, s, key, figs=None):
        figs = figs or figures
        a = figs["fireopal"][s][key]["median"]
        b = figs[who][s][key]["median"]
        return a / b if b else None

    cpu = machine.get("cpu", "?")
    if machine.get("cpu_family") and machine.get("cpu_model"):
        cpu += f" (family {machine['cpu_family']}, model {machine['cpu_model']})"
    print(
        f"# {machine.get('bench', '?')} over {machine.get('btl', '?')}: "
        f"{cpu}, {machine.get('cores', '?')} cores, "
        f"{machine.get('kernel', '?')}, {machine.get('date', '?')}, "
        f"load {machine.get('load', '?')}, {len(runs['fireopal'])} rounds alternating"
        + (
            f", system tcp congestion control {machine['tcp_congestion']}"
            if machine.get("btl") == "tcp" and machine.get("tcp_congestion")
            else ""
        )
        + (f", sizes {machine['sizes']}" if machine.get("sizes") else "")
        + (f", fireopal args: {machine['extra']}" if machine.get("extra") else "")
    )
    if limits:
        print("# limits: " + ", ".join(f"{k} {v}" for k, v in limits.items()))
    print("# median (min-max); ratio = fireopal / peer of the medians")
    print(
        "# slow-state rounds (at two sizes over "
        + f"{SLOW}x the contender's best latency): "
        + ", ".join(
            f"{who} {sum(x > SLOW for x in slow[who])} of {len(slow[who])}"
            for who in ["fireopal"] + peers
        )
    )

    def tables(figs, keys):
        for key, unit, label in keys:
            head = f"| size | fireopal {label} ({unit}) |"
            rule = "|---|---|"
            for p in peers:
                head += f" {p} ({unit}) | ratio |"
                rule += "---|---|"
            print()
            print(head)
            print(rule)
            for s in sizes:
                if key == "bandwidth_mbs" and s == 0:
                    continue
                f = figs["fireopal"][s][key]
                line = f"| {human(s)} | {f['median']:.2f} ({f['min']:.2f}-{f['max']:.2f}) |"
                for p in peers:
                    g = figs[p][s][key]
                    r = ratio(p, s, key, figs)
                    line += f" {g['median']:.2f} ({g['min']:.2f}-{g['max']:.2f}) | "
                    line += f"{r:.2f} |" if r is not None else "- |"
                print(line)

    both = (("latency_us", "us", "latency"), ("bandwidth_mbs", "MB/s", "bandwidth"))
    tables(figures, both)
    if fast is not None and peers and any(any(x > SLOW for x in v) for v in slow.values()):
        print()
        print("# the rounds in each contender's faster state only")
        tables(fast, both)

    # Fireopal's figure over the peer's of the same round, per round
    # (index 0 latency, 1 bandwidth), in the given rounds or all of them.
    def paired(p, s, index, rounds=None):
        common = sorted(set(by_round["fireopal"]) & set(by_round[p]))
        return [
            by_round["fireopal"][r][s][index] / by_round[p][r][s][index]
            for r in common
            if (rounds is None or r in rounds) and by_round[p][r][s][index]
        ]

    # The rounds in which each contender ran in its faster state.
    fast_numbers = {
        who: {n for n, x in zip(numbers[who], slow[who]) if x <= SLOW} for who in runs
    }

    if peers:
        print()
        print(
            "# paired: fireopal / peer within each round, median (min-max) over the "
            "rounds, and [n] rounds with both in their faster state, their median"
        )
        for index, label in ((0, "latency"), (1, "bandwidth")):
            head, rule = "| size |", "|---|"
            for p in peers:
                head += f" {label} / {p}, all rounds | both faster |"
                rule += "---|---|"
            print()
            print(head)
            print(rule)
            for s in sizes:
                if index == 1 and s == 0:
                    continue
                line = f"| {human(s)} |"
                for p in peers:
                    v = paired(p, s, index)
                    w = paired(p, s, index, fast_numbers["fireopal"] & fast_numbers[p])
                    line += (
                        f" {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) |"
                        if v
                        else " - |"
                    )
                    line += f" [{len(w)}] {statistics.median(w):.2f} |" if w else " [0] - |"
                print(line)

    if args.json:
        doc = {
            "machine": machine,
            "limits": limits,
            "slowdown": slow,
            "slow_above": SLOW,
            "sizes": {
                str(s): {
                    who: figures[who][s] for who in figures
                }
                | {
                    "ratio": {
                        p: {
                            "latency": ratio(p, s, "latency_us"),
                            "bandwidth": ratio(p, s, "bandwidth_mbs"),
                        }
                        for p in peers
                    },
                    "paired": {
                        p: {
                            "latency": paired(p, s, 0),
                            "bandwidth": paired(p, s, 1),
                        }
                        for p in peers
                    },
                }
                for s in sizes
            },
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
