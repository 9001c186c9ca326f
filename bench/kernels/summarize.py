#!/usr/bin/env python3
"""Markdown summary of bench_kernels' JSON (Google Benchmark, --benchmark_out_format=json).

    python3 bench/kernels/summarize.py build/bench/kernels.json [rerun.json ...]

Later files replace the benchmarks they hold (rerun contended ones with --benchmark_filter
and pass both files); the context line is the first file's.

Benchmarks are named <kind>/<op>/<shape>/t<threads> with kind "op" (a spillway op), "sgemm"
(raw bli_sgemm at the op's m, n, k, transposes and threads) or "memcpy" (a copy moving as many
bytes). Each op row is shown beside its baseline, both as medians over the repetitions, with
the ratio and whether it meets its goal:

    Linear (fwd + input grad + weight grad)  >= 90% of raw sgemm
    element-wise (LayerNorm, GELU, embedding) >= 70% of memcpy

The Linear goal is judged on the combined figure of a layer: the flops of the three products
divided by the sum of their median times, against the same for raw sgemm. The per-pass rows
show where the time goes. Shapes ending in "_r128" are the same layers on 128 tokens, a
pipeline microbatch of one sample: shown in a table of their own, not goal points.

An element-wise op may also have an "incache" row (kind "incache", one thread): the op at the
same width on operands that stay in L2. t threads at [2048, d] cannot beat t times that rate,
so t × the in-cache rate over memcpy's rate is the op's ceiling at that point. It is a
ceiling only up to each call's start-up (the team, the checks, a LayerNorm's first and last
rows), which the in-cache row pays on fewer rows: on 2026-11-27 it came out up to 10% under
its op at 2048 rows. So a point counts as beyond reach only where the larger of its ceiling
and its own ratio is under the goal by more than CEILING_SLACK: there the op misses the goal
by its own instructions, not by how it uses memory, and the verdict says so.

The embedding reads whole tables whatever the row count, so it has a "gather" row instead
(kind "gather", every thread count): its token rows copied to the output alone, at the same
shape and threads, counted as the embedding is. That is work the embedding cannot avoid
(a token row read for every row written, in random order, from a table too big for L1), so
the gather's rate over memcpy's is its ceiling there; it pays the same start-up on the same
rows, so no slack: a point is beyond reach where the larger of that ceiling and its own
ratio is under the goal. Standard library only.
"""

import json
import sys

LINEAR_GOAL = 0.90
ELEMENTWISE_GOAL = 0.70
CEILING_SLACK = 0.15
TOKENS = 2048
LINEAR_SHAPES = {  # name: (in multiple of d, out multiple of d)
    "proj": (1, 1),
    "qkv": (1, 3),
    "fc1": (1, 4),
    "fc2": (4, 1),
}
LINEAR_PASSES = ["linear_fwd", "linear_bwd_in", "linear_bwd_w"]
TIME_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def load(path, runs):
    """Adds the median and cv entries of one JSON file to runs, replacing what was there."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    fresh = {}  # (kind, op, shape, threads) -> {"median": entry, "cv": entry}
    for entry in data.get("benchmarks", []):
        if entry.get("error_occurred"):
            print(f"> benchmark {entry['name']} failed: {entry.get('error_message', '?')}")
            continue
        if entry.get("run_type") == "aggregate":
            stat = entry.get("aggregate_name")
        else:
            stat = "median"  # a single repetition: its only run stands for the median
        if stat not in ("median", "cv"):
            continue
        parts = [p for p in entry["run_name"].split("/") if p not in ("real_time", "manual_time")]
        if len(parts) != 4 or not parts[3].startswith("t"):
            continue
        kind, op, shape, threads = parts[0], parts[1], parts[2], int(parts[3][1:])
        fresh.setdefault((kind, op, shape, threads), {})[stat] = entry
    runs.update(fresh)
    return data.get("context", {})


def seconds(entry):
    return entry["real_time"] * TIME_UNIT_SECONDS[entry.get("time_unit", "ns")]


def rate(entry):
    """(value in G units, unit, count per iteration) of a median entry."""
    if "flops" in entry:
        return entry["flops"] / 1e9, "GFLOP/s", entry["flop_count"]
    return entry["bytes"] / 1e9, "GB/s", entry["byte_count"]


def fmt(x, digits=1):
    return "—" if x is None else f"{x:.{digits}f}"


def cv_text(run):
    cv = run.get("cv")
    return "—" if cv is None else f"{100 * cv['real_time']:.0f}%"


# A measurement is "contended" when another process took CPU the benchmark needed: its main
# thread got less than MIN_CPU_SHARE of the wall time on the CPU, or other processes (and the
# hypervisor's steal) used more than the cores the benchmark left free, plus FOREIGN_SLACK.
MIN_CPU_SHARE = 0.90
FOREIGN_SLACK = 0.10
NUM_CPUS = 2  # replaced by the JSON context's num_cpus


def foreign(entry):
    return entry.get("foreign_cores") if entry else None


def contended(threads, *entries):
    for e in entries:
        if e is None:
            continue
        if e.get("real_time") and e["cpu_time"] / e["real_time"] < MIN_CPU_SHARE:
            return True
        f = foreign(e)
        if f is not None and f > max(0, NUM_CPUS - threads) + FOREIGN_SLACK:
            return True
    return False


def share_text(*entries):
    return "/".join("—" if foreign(e) is None else f"{foreign(e):.2f}" for e in entries)


def verdict(ratio, goal, noisy=False):
    if ratio is None or goal is None:
        return "—"
    if noisy:
        return "? (contended)"
    return "yes" if ratio >= goal else "**no**"


def split_linear_shape(shape):
    """"fc2_d256" -> ("fc2", 256, TOKENS); "fc2_d256_r128" -> ("fc2", 256, 128)."""
    name, rest = shape.split("_d")
    d, _, tokens = rest.partition("_r")
    return name, int(d), int(tokens) if tokens else TOKENS


def linear_shape_text(shape):
    name, d, tokens = split_linear_shape(shape)
    mi, mo = LINEAR_SHAPES[name]
    return f"{name} [{tokens},{mi * d}]x[{mo * d},{mi * d}]"


def is_goal_shape(shape):
    return split_linear_shape(shape)[2] == TOKENS


def elementwise_shape_text(shape):
    rows, cols = shape.split("x")
    return f"[{rows},{cols}]"


def attention_shape_text(shape):
    fields = dict((p[0], p[1:]) for p in shape.split("_"))
    return f"B{fields['b']} T{fields['s']} d{fields['d']} H{fields['h']}"


ELEMENTWISE_ORDER = ["layernorm_fwd", "layernorm_bwd_in", "layernorm_bwd_w", "layernorm_bwd",
                     "gelu_fwd", "gelu_fwd_tails", "gelu_bwd", "embedding_fwd"]


# Rows the benchmark shows beside the goal's points but that are not among them.
NOT_GOAL_POINTS = {"gelu_fwd_tails", "layernorm_bwd"}


def op_order(op):
    return ELEMENTWISE_ORDER.index(op) if op in ELEMENTWISE_ORDER else len(ELEMENTWISE_ORDER)


def linear_order(shape):
    name, d, tokens = split_linear_shape(shape)
    return -tokens, d, list(LINEAR_SHAPES).index(name)


def attention_order(shape, threads):
    fields = dict((p[0], p[1:]) for p in shape.split("_"))
    return int(fields["d"]), threads, -int(fields["b"])


def linear_layers(runs):
    """The Linear goal's figure per (shape, threads): the three passes' flops over the sum of
    their median times, for the op and for raw sgemm. Layers missing a pass are left out."""
    layers = []
    ops = [k for k in runs if k[0] == "op" and "median" in runs[k]]
    layer_keys = sorted({(k[2], k[3]) for k in ops if k[1] in LINEAR_PASSES},
                        key=lambda st: (linear_order(st[0]), st[1]))
    for shape, threads in layer_keys:
        op_flops = op_time = base_flops = base_time = 0.0
        complete = True
        contended_passes = []
        for p in LINEAR_PASSES:
            o = runs.get(("op", p, shape, threads), {}).get("median")
            b = runs.get(("sgemm", p, shape, threads), {}).get("median")
            if o is None or b is None:
                complete = False
                break
            if contended(threads, o, b):
                contended_passes.append(f"{p}/{shape}/t{threads}")
            op_flops += o["flop_count"]
            op_time += seconds(o)
            base_flops += b["flop_count"]
            base_time += seconds(b)
        if not complete:
            continue
        g_op = op_flops / op_time / 1e9
        g_base = base_flops / base_time / 1e9
        layers.append({"shape": shape, "threads": threads, "op": g_op, "baseline": g_base,
                       "ratio": g_op / g_base, "goal": is_goal_shape(shape),
                       "noisy": bool(contended_passes),
                       "contended_passes": contended_passes})
    return layers


def elementwise_points(runs):
    """Each element-wise row: the op's and memcpy's GB/s, their ratio, the ceiling (and the
    slack it is judged with), whether it was contended and whether it is a goal point."""
    points = []
    ops = [k for k in runs if k[0] == "op" and "median" in runs[k]]
    ew_keys = sorted((k for k in ops if k[1].startswith(("layernorm", "gelu", "embedding"))),
                     key=lambda k: (op_order(k[1]), shape_sort_key(k[2]), k[3]))
    for key in ew_keys:
        o = runs[key]["median"]
        b = runs.get(("memcpy",) + key[1:], {}).get("median")
        g_op = rate(o)[0]
        g_base = rate(b)[0] if b else None
        ratio = g_op / g_base if g_base else None
        c = runs.get(("incache", key[1], key[2], 1), {}).get("median")
        g_cache = rate(c)[0] if c else None
        ceiling = key[3] * g_cache / g_base if g_cache and g_base else None
        slack = CEILING_SLACK
        gather = runs.get(("gather",) + key[1:], {}).get("median")
        if gather and g_base:
            ceiling = rate(gather)[0] / g_base
            slack = 0.0
        noisy = (contended(key[3], o, b) or (c is not None and contended(1, c))
                 or (gather is not None and contended(key[3], gather)))
        points.append({"key": key, "op": g_op, "baseline": g_base, "ratio": ratio,
                       "incache": g_cache, "ceiling": ceiling, "slack": slack,
                       "noisy": noisy, "goal": key[1] not in NOT_GOAL_POINTS,
                       "op_entry": o, "baseline_entry": b})
    return points


def beyond_reach(point):
    """A missed point whose ceiling (or its own ratio, if higher) is under the goal, by more
    than the slack for an in-cache ceiling, at all for the embedding's gather."""
    ratio, ceiling = point["ratio"], point["ceiling"]
    return (ratio is not None and ratio < ELEMENTWISE_GOAL and ceiling is not None
            and max(ceiling, ratio) * (1 + point["slack"]) < ELEMENTWISE_GOAL)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def shape_sort_key(shape):
    digits = "".join(c if c.isdigit() else " " for c in shape).split()
    return [int(x) for x in digits], shape


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: summarize.py kernels.json [rerun.json ...]", file=sys.stderr)
        return 2
    runs = {}
    context = load(argv[1], runs)
    for path in argv[2:]:
        load(path, runs)
    rerun = set()
    global NUM_CPUS
    NUM_CPUS = int(context.get("num_cpus", NUM_CPUS))
    ops = [k for k in runs if k[0] == "op" and "median" in runs[k]]
    missing = []

    def baseline(key, kind):
        b = runs.get((kind,) + key[1:])
        return b if b and "median" in b else None

    out = []
    reps = next((r["median"].get("repetitions") for r in runs.values() if "median" in r), 1)
    load_avg = context.get("load_avg")
    out.append(f"# bench_kernels: medians of {reps} repetitions")
    out.append("")
    out.append(f"Run {context.get('date', '?')} on {context.get('host_name', '?')}, "
               f"{context.get('num_cpus', '?')} CPUs, BLIS {context.get('blis_version', '?')}; "
               f"load average at start {', '.join(f'{x:.2f}' for x in load_avg) if load_avg else '?'}. "
               "cv is the op's coefficient of variation over the repetitions. \"others' "
               "cores\" is the CPU other processes and the hypervisor took while the op / its "
               "baseline ran (median, in cores): a run is contended, and its verdict reads "
               "\"? (contended)\" instead of yes or no, when they took more than the cores it "
               f"left free + {FOREIGN_SLACK}, or its main thread was on the CPU less than "
               f"{100 * MIN_CPU_SHARE:.0f}% of the time. Rerun those when the machine is idle.")
    out.append("")

    # ---- Linear, combined per layer shape ----
    header = ["op", "shape", "threads", "GFLOP/s", "raw sgemm GFLOP/s", "ratio",
              "goal ≥ 90%"]
    combined = {True: [], False: []}  # by whether the shape is a goal point
    for layer in linear_layers(runs):
        rerun.update(layer["contended_passes"])
        combined[layer["goal"]].append(
            ["linear fwd+bwd", linear_shape_text(layer["shape"]), layer["threads"],
             fmt(layer["op"]), fmt(layer["baseline"]), f"{100 * layer['ratio']:.0f}%",
             verdict(layer["ratio"], LINEAR_GOAL, layer["noisy"]) if layer["goal"] else "—"])
    if combined[True]:
        out.append("## Linear, forward + input gradient + weight gradient (the goal)")
        out.append("")
        out.append(table(header, combined[True]))
        out.append("")
    if combined[False]:
        out.append("## Linear on a microbatch of 128 tokens, forward + both gradients (not a goal point)")
        out.append("")
        out.append(table(header[:-1] + ["goal"], combined[False]))
        out.append("")

    # ---- Linear, per pass ----
    rows = []
    linear_keys = sorted((k for k in ops if k[1] in LINEAR_PASSES),
                         key=lambda k: (linear_order(k[2]), LINEAR_PASSES.index(k[1]), k[3]))
    for key in linear_keys:
        o = runs[key]["median"]
        b = baseline(key, "sgemm")
        g_op = rate(o)[0]
        g_base = rate(b["median"])[0] if b else None
        if b is None:
            missing.append("/".join(map(str, key)))
        ratio = g_op / g_base if g_base else None
        bm = b["median"] if b else None
        if contended(key[3], o, bm):
            rerun.add(f"{key[1]}/{key[2]}/t{key[3]}")
        rows.append([key[1], linear_shape_text(key[2]), key[3], fmt(g_op), fmt(g_base),
                     "—" if ratio is None else f"{100 * ratio:.0f}%",
                     verdict(ratio, LINEAR_GOAL, contended(key[3], o, bm))
                     if is_goal_shape(key[2]) else "—", cv_text(runs[key]),
                     share_text(o, bm)])
    if rows:
        out.append("## Linear, per pass")
        out.append("")
        out.append(table(header + ["cv", "others' cores"], rows))
        out.append("")

    # ---- element-wise ----
    rows = []
    tally = {"points": 0, "met": 0, "beyond": 0}
    for p in elementwise_points(runs):
        key, ratio, ceiling = p["key"], p["ratio"], p["ceiling"]
        if p["baseline"] is None:
            missing.append("/".join(map(str, key)))
        if p["noisy"]:
            rerun.add(f"{key[1]}/{key[2]}/t{key[3]}")
        text = verdict(ratio, ELEMENTWISE_GOAL, p["noisy"])
        if ratio is not None and not p["noisy"] and p["goal"]:
            tally["points"] += 1
            tally["met"] += ratio >= ELEMENTWISE_GOAL
            if beyond_reach(p):
                tally["beyond"] += 1
                text += " (ceiling under the goal)"
        rows.append([key[1], elementwise_shape_text(key[2]), key[3], fmt(p["op"]),
                     fmt(p["baseline"]), "—" if ratio is None else f"{100 * ratio:.0f}%",
                     fmt(p["incache"]), "—" if ceiling is None else f"{100 * ceiling:.0f}%",
                     text, cv_text(runs[key]), share_text(p["op_entry"], p["baseline_entry"])])
    if rows:
        out.append("## Element-wise (GB/s = bytes read + bytes written per second)")
        out.append("")
        out.append(table(["op", "shape", "threads", "GB/s", "memcpy GB/s", "ratio",
                          "in-cache GB/s, 1 thread", "ceiling", "goal ≥ 70%", "cv",
                          "others' cores"], rows))
        out.append("")
        out.append(f"Goal met at {tally['met']} of {tally['points']} uncontended points; "
                   f"at {tally['beyond']} of the {tally['points'] - tally['met']} missed, the "
                   "ceiling (threads × the in-cache rate, over memcpy's rate, or the op's own "
                   f"ratio if higher) is under the goal by more than {100 * CEILING_SLACK:.0f}%, "
                   "or for the embedding, its token rows' gather alone is under it. "
                   + ", ".join(sorted(NOT_GOAL_POINTS)) + " not counted (not a goal point).")
        out.append("")

    # ---- attention ----
    rows = []
    att_keys = [k for k in ops if k[1].startswith("attention")]
    for shape, threads in sorted({(k[2], k[3]) for k in att_keys},
                                 key=lambda st: attention_order(*st)):
        f = runs.get(("op", "attention_fwd", shape, threads), {})
        b = runs.get(("op", "attention_bwd", shape, threads), {})
        for name, run in (("attention_fwd", f), ("attention_bwd", b)):
            if "median" in run:
                if contended(threads, run["median"]):
                    rerun.add(f"{name}/{shape}/t{threads}")
                rows.append([name, attention_shape_text(shape), threads,
                             fmt(rate(run["median"])[0]), cv_text(run),
                             share_text(run["median"])])
        if "median" in f and "median" in b:
            fm, bm = f["median"], b["median"]
            g = (fm["flop_count"] + bm["flop_count"]) / (seconds(fm) + seconds(bm)) / 1e9
            rows.append(["attention fwd+bwd", attention_shape_text(shape), threads, fmt(g), "—",
                         "—"])
    if rows:
        out.append("## Causal attention (no baseline; flops of the unmasked half only)")
        out.append("")
        out.append(table(["op", "shape", "threads", "GFLOP/s", "cv", "others' cores"], rows))
        out.append("")
        out.append("Forward 4·B·d·T(T+1)/2, backward 8·B·d·T(T+1)/2 flops (the backward's "
                   "recomputed Q·Kᵀ, softmax and exp not counted); ×2T/(T+1) for the dense "
                   "convention that also counts the masked half.")
        out.append("")

    if rerun:
        out.append(f"{len(rerun)} contended measurements. To rerun them into another directory, "
                   "then summarize both files (the second replaces what it holds):")
        out.append("")
        out.append("    bench/kernels/run.sh RERUN_DIR --benchmark_filter='/(" +
                   "|".join(sorted(rerun)) + ")/'")
        out.append("    python3 bench/kernels/summarize.py FIRST_DIR/kernels.json "
                   "RERUN_DIR/kernels.json")
        out.append("")
    if missing:
        out.append("No baseline found for: " + ", ".join(missing))
        out.append("")
    print("\n".join(out).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
