#!/usr/bin/env python3
"""Per-step kernel table from a kernel trace (bench/kernel_trace.cpp's CSV).

Every CUDA graph launched enough times (a decode step per batch bucket) is cut into its replays;
the median replay by span is printed kernel by kernel, then summed per kernel name. Columns:
"path us", the kernel's share of the critical path (its end minus the latest earlier end: what the
step would lose without it); "us", its duration, which with dependent launches includes time spent
waiting for the previous kernel; "gap us", start minus the latest earlier end (negative: overlap).
After each graph's table: the device's idle time between consecutive replays (issue 21's
step-to-step measure). With --eager, also the kernels launched outside graphs (prompt steps),
summed per kernel name.
Usage: kernel_timeline.py TRACE.csv [--min-kernels 50] [--eager]
"""
import csv
import re
import sys
from collections import OrderedDict, defaultdict


def short_name(name):
    name = re.sub(r"deepinfer::kernels::cuda::|\(anonymous namespace\)::|deepinfer::|void |\bDType::k", "", name)
    name = re.sub(r"\([A-Za-z_:]+\)(?=-?\d)", "", name)  # enum casts in template arguments
    name = re.sub(r"\(.*\)$", "", name)
    return name[:100]


def main():
    args = sys.argv[1:]
    min_kernels = 50
    if "--min-kernels" in args:
        i = args.index("--min-kernels")
        min_kernels = int(args[i + 1])
        del args[i:i + 2]
    eager = "--eager" in args
    if eager:
        args.remove("--eager")
    rows = []
    with open(args[0], newline="") as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), int(r["graph_id"]), int(r["grid"]), r["name"]))
    rows.sort()
    graphs = OrderedDict()
    for row in rows:
        if row[2] != 0:
            graphs.setdefault(row[2], []).append(row)
    for graph_id, kernels in graphs.items():
        # A replay starts where the graph's first few kernels come again in order (one name alone
        # recurs: the graph opens with several small gathers).
        opening = [k[4] for k in kernels[:8]]
        starts = [i for i in range(len(kernels)) if [k[4] for k in kernels[i:i + len(opening)]] == opening]
        if len(starts) < 2 or starts[1] < min_kernels:
            continue
        per_replay = starts[1]
        replays = [kernels[s:s + per_replay] for s in starts if len(kernels[s:s + per_replay]) == per_replay]
        replays.sort(key=lambda r: r[-1][1] - r[0][0])
        replay = replays[len(replays) // 2]
        span = (replay[-1][1] - replay[0][0]) / 1e3
        busy = sum(k[1] - k[0] for k in replay) / 1e3
        print(f"== graph {graph_id}: {per_replay} kernels per replay, {len(replays)} replays; "
              f"median replay span {span:.1f} us, kernel time {busy:.1f} us, span - kernel time {span - busy:.1f} us")
        print(f"{'#':>4} {'path us':>8} {'us':>8} {'gap us':>7} {'grid':>6}  kernel")
        totals = defaultdict(lambda: [0, 0.0, 0.0])
        previous_end = None
        for i, (start, end, _, grid, name) in enumerate(replay):
            gap = (start - previous_end) / 1e3 if previous_end is not None else 0.0
            path = (end - start if previous_end is None else max(0, end - previous_end)) / 1e3
            previous_end = end if previous_end is None else max(previous_end, end)
            label = f"{short_name(name)} grid={grid}"
            t = totals[label]
            t[0] += 1
            t[1] += path
            t[2] += (end - start) / 1e3
            if i < 40 or i >= per_replay - 12:
                print(f"{i:4d} {path:8.2f} {(end - start) / 1e3:8.2f} {gap:7.2f} {grid:6d}  {short_name(name)}")
            elif i == 40:
                print("   ... (middle layers omitted; all are in the totals below)")
        print(f"{'count':>6} {'path us':>9} {'each':>7} {'dur each':>8}  kernel (per replay)")
        for label, (count, path, duration) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
            print(f"{count:6d} {path:9.1f} {path / count:7.2f} {duration / count:8.2f}  {label}")
        print_idle_between_replays(rows, [kernels[s][0] for s in starts], graph_id)
        print()
    if eager:
        print_eager_totals(rows)


def print_eager_totals(rows):
    """Kernels and copies outside graphs, summed per name, longest total first."""
    totals = defaultdict(lambda: [0, 0.0])
    for start, end, graph_id, _, name in rows:
        if graph_id == 0:
            totals[short_name(name)][0] += 1
            totals[short_name(name)][1] += (end - start) / 1e3
    print(f"== outside graphs: {'count':>6} {'total us':>10} {'each us':>9}  kernel")
    for name, (count, total) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:40]:
        print(f"{count:6d} {total:10.1f} {total / count:9.2f}  {name}")


def print_idle_between_replays(rows, replay_starts, graph_id):
    """The device's idle time from one replay's start to the next's: the window minus the union of
    every kernel in it (the steps' own sampling included; copies count as idle, the multiprocessors
    wait through them, as they do through the copy kernels that read or write pinned host memory),
    and the device-to-host copies in the window (by DMA or by kernel). Windows over 50 ms are pauses
    between runs, not steps, and are left out. Then the window of median idle from its graph's last
    kernel on: every kernel and copy between the two replays, with the idle time before each."""
    kernels = [r for r in rows if not r[4].startswith("memcpy ") and "copy_pieces" not in r[4]]
    copies_to_host = [r for r in rows if r[4].startswith("memcpy DtoH") or "copy_pieces_to_host_kernel" in r[4]]
    steps = []  # (idle us, window us, device-to-host copies, begin, end)
    for begin, end in zip(replay_starts, replay_starts[1:]):
        if end - begin > 50_000_000:
            continue
        busy, covered_to = 0, begin
        for start, stop, *_ in kernels:
            if stop <= begin or start >= end:
                continue
            start, stop = max(start, covered_to), min(stop, end)
            if stop > start:
                busy += stop - start
                covered_to = stop
        to_host = sum(1 for r in copies_to_host if begin <= r[0] < end)
        steps.append(((end - begin - busy) / 1e3, (end - begin) / 1e3, to_host, begin, end))
    if not steps:
        return
    idle = sorted(s[0] for s in steps)
    windows = sorted(s[1] for s in steps)
    to_host = sorted(s[2] for s in steps)
    print(f"between consecutive replays ({len(idle)} steps): median step {windows[len(windows) // 2]:.1f} us, "
          f"median idle {idle[len(idle) // 2]:.1f} us, busy {100 * (1 - sum(idle) / sum(windows)):.2f} %, "
          f"median device-to-host copies {to_host[len(to_host) // 2]}")
    _, _, _, begin, end = sorted(steps)[len(steps) // 2]
    window = [r for r in rows if begin <= r[0] < end]
    last_graph = max((i for i, r in enumerate(window) if r[2] == graph_id), default=-1)
    if last_graph < 0:
        return
    print("from the end of the median-idle step's graph to the next replay: idle before (us), duration (us), what")
    previous_end = window[last_graph][1]
    for start, stop, _, _, name in window[last_graph + 1:] + [r for r in rows if r[0] == end][:1]:
        print(f"  {(start - previous_end) / 1e3:7.2f} {(stop - start) / 1e3:8.2f}  {short_name(name)}")
        previous_end = max(previous_end, stop)


if __name__ == "__main__":
    main()
