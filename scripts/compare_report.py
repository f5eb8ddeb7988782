#!/usr/bin/env python3
"""Summarises a directory written by scripts/compare.sh.

Reads machine.txt, limits.txt and round-<r>-<contender>.txt (fireopal's
bench JSON, or the MPI programs' tables), and prints per size the median
and min-max latency and bandwidth of every contender over the rounds, with
the ratio fireopal/peer of the medians. With --json FILE it also writes
the same figures, and every round's raw value, as JSON.
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
    if n >= 1 << 20:
        return f"{n >> 20} MiB"
    if n >= 1 << 10:
        return f"{n >> 10} KiB"
    return f"{n} B"


def spread(values):
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    machine = read_kv(args.dir / "machine.txt")
    limits = read_kv(args.dir / "limits.txt")
    runs = {}  # contender -> list of {size: (lat, bw)}
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
    if "fireopal" not in runs:
        sys.exit(f"compare_report: no fireopal run in {args.dir}")
    order = [p for p in machine.get("peers", "").split(",") if p]
    peers = [p for p in order if p in runs] + sorted(
        w for w in runs if w != "fireopal" and w not in order
    )
    sizes = sorted(set.intersection(*(set(r) for rs in runs.values() for r in rs)))

    figures = {}
    for who, rs in runs.items():
        figures[who] = {
            s: {
                "latency_us": spread([r[s][0] for r in rs]),
                "bandwidth_mbs": spread([r[s][1] for r in rs]),
            }
            for s in sizes
        }

    def ratio(who, s, key):
        a = figures["fireopal"][s][key]["median"]
        b = figures[who][s][key]["median"]
        return a / b if b else None

    print(
        f"# {machine.get('bench', '?')} over {machine.get('btl', '?')}: "
        f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('kernel', '?')}, {machine.get('date', '?')}, "
        f"load {machine.get('load', '?')}, {len(runs['fireopal'])} rounds alternating"
        + (f", fireopal args: {machine['extra']}" if machine.get("extra") else "")
    )
    if limits:
        print("# limits: " + ", ".join(f"{k} {v}" for k, v in limits.items()))
    print("# median (min-max); ratio = fireopal / peer of the medians")
    for key, unit, label in (
        ("latency_us", "us", "latency"),
        ("bandwidth_mbs", "MB/s", "bandwidth"),
    ):
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
            f = figures["fireopal"][s][key]
            line = f"| {human(s)} | {f['median']:.2f} ({f['min']:.2f}-{f['max']:.2f}) |"
            for p in peers:
                g = figures[p][s][key]
                r = ratio(p, s, key)
                line += f" {g['median']:.2f} ({g['min']:.2f}-{g['max']:.2f}) | "
                line += f"{r:.2f} |" if r is not None else "- |"
            print(line)

    if args.json:
        doc = {
            "machine": machine,
            "limits": limits,
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
                    }
                }
                for s in sizes
            },
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
