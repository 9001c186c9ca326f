#!/usr/bin/env python3
"""Collects a memory-pressure sweep (bench/memory_pressure/run.sh) into tables and plots.

usage: summarize.py OUT_DIR

Reads OUT_DIR/manifest.jsonl (one line per sweep point), each run's report.json and log, and
OUT_DIR/ceilings-start.json and ceilings-end.json (measured before and after the runs; each
figure is the higher of the two, since other work on the machine only lowers them). Writes OUT_DIR/results.json, results.csv, memory_pressure.svg (iteration
time relative to no offload against per-rank peak memory, ledger and RSS, one series per tier)
and bandwidth.svg (each tier's transfer rate beside the ceilings), and prints a Markdown table
and the issue's goals, each met or not met with its numbers.

Definitions (per run; "per rank" figures are the largest over the 2 ranks):
  iteration      pipeline.measured.iteration_seconds: median over the steps after the first of
                 the slowest rank's step
  vs none        iteration / the fastest of the model's no-offload runs (first and last of its
                 sweep): noise on a shared machine only slows runs down, and the offload runs
                 are measured once, so the ratios err on the side of offload looking slower
  peak, stash    the ledger's peak bytes, all categories / the stash category
  staging        the offload_staging category: the file tier's aligned buffer, or the window a
                 rank lends its peer (the peer's stashes live there)
  rss            peak resident set size of the process (ru_maxrss)
  moved          bytes evicted + prefetched, summed over ranks
  transfer GB/s  moved / engine-thread seconds spent on them, summed over ranks: the rate one
                 engine copies at while it works
  node GB/s      moved / the time at least one rank's engine was copying (the union of the
                 copies' intervals): the device's rate when the node's ranks share it
  per CPU s      moved / the engine thread's CPU seconds on them: above the transfer rate by
                 the time the thread waited for its core (shared with compute), storage or peer
  wait           time a rank blocked for a stash, per step (largest rank)
  load           the 1-minute load average when the run started (other work on the machine)
"""
import csv
import json
import os
import statistics
import sys

MIB = 1 << 20
TIERS = ["none", "file", "peer", "host"]
COLOURS = {"none": "#555555", "file": "#1f77b4", "peer": "#d62728", "host": "#2ca02c"}
LIGHT = {"none": "#bbbbbb", "file": "#9ecae1", "peer": "#f4a6a6", "host": "#a1d99b"}


def load_json(path):
    with open(path) as f:
        return json.load(f)


def best_ceilings(measured):
    """Each figure from whichever measurement had the higher median; `measured` kept beside."""
    def pick(*path):
        def get(c):
            for k in path:
                c = c[k]
            return c
        return max((get(c) for c in measured), key=lambda f: f["gb_per_s"])
    best = json.loads(json.dumps(measured[0]))
    for key in ("memcpy", "mpi_p2p", "mpi_get", "mpi_put", "mpi_put_first"):
        if all(key in c for c in measured):  # mpi_put_first: bench_ceilings since 2026-11-25
            best[key] = pick(key)
    for streams in ("one_stream", "two_streams_per_stream"):
        for what in ("write", "read", "write_read"):
            best["file"][streams][what] = pick("file", streams, what)
    best["measurements"] = measured
    return best


def error_line(log_path):
    """The run's own error message: the last 'spillway: error' line, else the last line."""
    try:
        lines = [l.strip() for l in open(log_path, errors="replace") if l.strip()]
    except OSError:
        return "no log"
    errors = [l for l in lines if "error" in l.lower() and l.startswith("spillway")]
    if errors:
        return errors[-1]
    return lines[-1] if lines else "empty log"


def collect(out):
    rows = []
    with open(os.path.join(out, "manifest.jsonl")) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    results = []
    for m in rows:
        row = {
            "name": m["name"], "model": m.get("model"), "tier": m["tier"],
            "cap_fraction": m.get("cap_fraction"), "cap_bytes": m.get("cap_bytes"),
            "lookahead": m.get("lookahead"),
            "load_at_start": float(m["load_at_start"]) if "load_at_start" in m else None,
        }
        if "skipped" in m:
            row.update(status="skipped", message=m["skipped"])
            results.append(row)
            continue
        report_path = os.path.join(out, m["report"])
        if m["exit_code"] != 0 or not os.path.exists(report_path):
            row.update(status="failed", exit_code=m["exit_code"],
                       message=error_line(os.path.join(out, m["log"])))
            results.append(row)
            continue
        report = load_json(report_path)
        ranks = report["pipeline"]["measured"]["ranks"]
        per_rank = []
        for r in ranks:
            o = r["offload"]
            per_rank.append({
                "rank": r["rank"],
                "peak_bytes": r["peak_bytes"],
                "peak_bytes_by_category": r["peak_bytes_by_category"],
                "peak_rss_bytes": r.get("peak_rss_bytes"),
                "bytes_evicted": o["bytes_evicted"], "bytes_prefetched": o["bytes_prefetched"],
                "evict_seconds": o["evict_seconds"], "prefetch_seconds": o["prefetch_seconds"],
                "engine_cpu_seconds": o.get("evict_cpu_seconds", 0) + o.get("prefetch_cpu_seconds", 0),
                # mapping prefetch targets' pages: allocation work, not transfer
                "map_seconds": o.get("prefetch_map_seconds", 0),
                "map_cpu_seconds": o.get("prefetch_map_cpu_seconds", 0),
                "wait_seconds_per_step": o["wait_seconds_per_step"],
                "failed_evictions": o["failed_evictions"],
                # memory the rank mapped anew per step (median after the first)
                "allocated_bytes_per_step": r.get("allocated_bytes_per_step"),
            })
        moved = sum(r["bytes_evicted"] + r["bytes_prefetched"] for r in per_rank)
        map_s = sum(r["map_seconds"] for r in per_rank)
        map_cpu_s = sum(r["map_cpu_seconds"] for r in per_rank)
        engine_s = sum(r["evict_seconds"] + r["prefetch_seconds"] for r in per_rank) - map_s
        engine_cpu_s = sum(r["engine_cpu_seconds"] for r in per_rank) - map_cpu_s
        ev = sum(r["bytes_evicted"] for r in per_rank)
        ev_s = sum(r["evict_seconds"] for r in per_rank)
        pf = sum(r["bytes_prefetched"] for r in per_rank)
        pf_s = sum(r["prefetch_seconds"] for r in per_rank) - map_s
        rss = [r["peak_rss_bytes"] for r in per_rank if r["peak_rss_bytes"] is not None]
        row.update(
            status="ok",
            steps=report["steps"],
            iteration_s=report["pipeline"]["measured"]["iteration_seconds"],
            tokens_per_s=report["throughput"]["median"],
            peak_bytes=max(r["peak_bytes"] for r in per_rank),
            stash_bytes=max(r["peak_bytes_by_category"]["stash"] for r in per_rank),
            staging_bytes=max(r["peak_bytes_by_category"]["offload_staging"] for r in per_rank),
            rss_bytes=max(rss) if rss else None,
            bytes_moved=moved,
            engine_seconds=engine_s,
            transfer_gb_per_s=moved / engine_s / 1e9 if engine_s > 0 else None,
            # the tier's rate over both ranks' copies together (one node: they share the
            # device), from the engines' own copy intervals; None in reports made before it
            node_gb_per_s=min((n["gb_per_s"] for n in
                               report["pipeline"]["measured"].get("offload_by_node", [])
                               if n["busy_seconds"] > 0), default=None),
            engine_cpu_seconds=engine_cpu_s,
            cpu_gb_per_s=moved / engine_cpu_s / 1e9 if engine_cpu_s > 0 else None,
            evict_gb_per_s=ev / ev_s / 1e9 if ev_s > 0 else None,
            prefetch_gb_per_s=pf / pf_s / 1e9 if pf_s > 0 else None,
            map_s_per_step=max(r["map_seconds"] for r in per_rank) / report["steps"],
            allocated_bytes_per_step=max((r["allocated_bytes_per_step"] for r in per_rank
                                          if r["allocated_bytes_per_step"] is not None),
                                         default=None),
            wait_s_per_step=max(r["wait_seconds_per_step"] for r in per_rank),
            failed_evictions=sum(r["failed_evictions"] for r in per_rank),
            ranks=per_rank,
        )
        results.append(row)

    # Ratios against the model's no-offload, uncapped runs.
    for model in {r["model"] for r in results if r.get("model")}:
        refs = [r for r in results if r.get("model") == model and r["tier"] == "none"
                and r["cap_fraction"] is None and r["status"] == "ok"]
        if not refs:
            continue
        ref_iter = min(r["iteration_s"] for r in refs)
        ref_stash = refs[0]["stash_bytes"]
        ref_peak = refs[0]["peak_bytes"]
        for r in results:
            if r.get("model") != model or r["status"] != "ok":
                continue
            r["reference_iteration_s"] = ref_iter
            r["iteration_ratio"] = r["iteration_s"] / ref_iter
            r["stash_cut"] = ref_stash / r["stash_bytes"] if r["stash_bytes"] > 0 else None
            r["peak_fraction"] = r["peak_bytes"] / ref_peak
            if r["cap_bytes"] is not None:
                r["within_cap"] = r["peak_bytes"] <= r["cap_bytes"]
    return results


def fmt(v, spec, none="–"):
    return none if v is None else format(v, spec)


def cap_label(r):
    return "none" if r["cap_fraction"] is None else f"{100 * r['cap_fraction']:.0f}%"


def markdown(results, ceilings):
    lines = ["| model | tier | cap | look-ahead | iteration (s) | vs none | peak MiB | stash MiB "
             "| staging MiB | RSS MiB | moved GiB | transfer GB/s | node GB/s | per CPU s | map s/step "
             "| alloc MiB/step | wait s/step | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- | --- | --- |"]
    for r in results:
        if r["status"] == "skipped":
            lines.append(f"| {r.get('model') or 'all'} | {r['tier']} | | | skipped: {r['message']} "
                         "| | | | | | | | | | | | | |")
            continue
        la = r["lookahead"] if r["tier"] != "none" else ""
        if r["status"] == "failed":
            msg = r["message"].replace("|", "/")
            if len(msg) > 140:
                msg = msg[:137] + "..."
            lines.append(f"| {r['model']} | {r['tier']} | {cap_label(r)} | {la} | did not run: {msg} "
                         f"| | | | | | | | | | | | | {fmt(r['load_at_start'], '.1f')} |")
            continue
        lines.append(
            f"| {r['model']} | {r['tier']} | {cap_label(r)} | {la} | {r['iteration_s']:.2f} | "
            f"{fmt(r.get('iteration_ratio'), '.2f')} | {r['peak_bytes'] / MIB:.0f} | "
            f"{r['stash_bytes'] / MIB:.0f} | {r['staging_bytes'] / MIB:.0f} | "
            f"{fmt(r['rss_bytes'] and r['rss_bytes'] / MIB, '.0f')} | "
            f"{r['bytes_moved'] / (1 << 30):.2f} | {fmt(r['transfer_gb_per_s'], '.2f')} | "
            f"{fmt(r.get('node_gb_per_s'), '.2f')} | "
            f"{fmt(r['cpu_gb_per_s'], '.2f')} | {r['map_s_per_step']:.3f} | "
            f"{fmt(r['allocated_bytes_per_step'] and r['allocated_bytes_per_step'] / MIB, '.0f')} | "
            f"{r['wait_s_per_step']:.3f} | {fmt(r['load_at_start'], '.1f')} |")
    c = ceilings
    f1, f2 = c["file"]["one_stream"], c["file"]["two_streams_per_stream"]
    lines += ["", f"Ceilings measured in the same run, before and after the runs (the higher "
              f"median of the {len(c.get('measurements', [c]))} measurements; GB/s, best "
              "repetition in brackets):", "",
              "| what | GB/s |", "| --- | --- |",
              f"| memcpy, {c['memcpy']['bytes'] >> 20} MiB, 1 thread | {gb(c['memcpy'])} |",
              f"| MPI point-to-point one way, {c['mpi_p2p']['bytes'] >> 20} MiB | {gb(c['mpi_p2p'])} |",
              f"| MPI_Get, passive target, osc {c['osc'] or 'default'} | {gb(c['mpi_get'])} |",
              f"| MPI_Put, passive target, osc {c['osc'] or 'default'} | {gb(c['mpi_put'])} |"]
    if "mpi_put_first" in c:
        lines += [f"| MPI_Put into a window not touched before (first-touch page faults) | "
                  f"{gb(c['mpi_put_first'])} |"]
    lines += [
              f"| storage write / read, 1 stream ({c['file']['dir']}, "
              f"{'O_DIRECT' if c['file']['o_direct'] else 'page cache'}) | "
              f"{gb(f1['write'])} / {gb(f1['read'])} |",
              f"| storage write+read, 1 stream | {gb(f1['write_read'])} |",
              f"| storage write+read, each of 2 streams at once | {gb(f2['write_read'])} |"]
    return "\n".join(lines)


def gb(figure):
    return f"{figure['gb_per_s']:.2f} ({figure['best_gb_per_s']:.2f})"


def goals(results, ceilings):
    """Each goal per model: (text, status) pairs, status "met", "not met" or "reported"."""
    out = []
    p2p = ceilings["mpi_p2p"]["gb_per_s"]
    storage = ceilings["file"]["one_stream"]["write_read"]["gb_per_s"]
    # Both ranks' engines write and read at the same time in a run, as in this figure.
    storage_shared = ceilings["file"]["two_streams_per_stream"]["write_read"]["gb_per_s"]
    models = sorted({r["model"] for r in results if r.get("model")},
                    key=lambda m: [r.get("model") for r in results].index(m))
    for model in models:
        ok = [r for r in results if r.get("model") == model and r["status"] == "ok"]
        ran = lambda tier: [r for r in ok if r["tier"] == tier]
        for tier in ("peer", "file"):
            tried = [r for r in results if r.get("model") == model and r["tier"] == tier]
            if not tried:
                continue
            runs = ran(tier)
            failed = [r for r in tried if r["status"] == "failed"]
            note = f" ({len(failed)} of {len(tried)} {tier} runs did not run: see the table)" if failed else ""
            if not runs:
                out.append((f"{model}, {tier} tier: no run completed{note}", "not met"))
                continue
            rates = [r["transfer_gb_per_s"] for r in runs if r["transfer_gb_per_s"]]
            rate = statistics.median(rates) if rates else 0.0
            cpu_rates = [r["cpu_gb_per_s"] for r in runs if r.get("cpu_gb_per_s")]
            cpu_rate = statistics.median(cpu_rates) if cpu_rates else 0.0
            if tier == "peer":
                both = [r for r in runs if (r["stash_cut"] or 0) >= 3 and r["iteration_ratio"] <= 1.10]
                best = max(both or runs, key=lambda r: ((r["stash_cut"] or 0) >= 3,
                                                        -r["iteration_ratio"]))
                out.append((f"{model}, peer tier: stash memory per rank cut ≥ 3× with iteration "
                            f"time within 10% of no offload — best run {best['name']}: stash cut "
                            f"{fmt(best['stash_cut'], '.2f')}×, iteration {best['iteration_ratio']:.2f}× "
                            f"(peak of all memory {100 * best['peak_fraction']:.0f}% of no offload, "
                            f"the lent window included){note}", verdict(both)))
                out.append((f"{model}, peer tier: transfer ≥ 80% of MPI point-to-point — median "
                            f"{rate:.2f} GB/s over {len(rates)} runs = "
                            f"{100 * rate / p2p:.0f}% of {p2p:.2f} GB/s (per second of the engine "
                            f"thread's CPU time {cpu_rate:.2f} GB/s = {100 * cpu_rate / p2p:.0f}%)",
                            verdict(rate >= 0.8 * p2p)))
            else:
                out.append((f"{model}, file tier: transfer ≥ 80% of the storage's sequential "
                            f"write+read, one stream — median {rate:.2f} GB/s over {len(rates)} "
                            f"runs = {100 * rate / storage:.0f}% of {storage:.2f} GB/s",
                            verdict(rate >= 0.8 * storage)))
                out.append((f"{model}, file tier: the same against one of two streams at once "
                            f"(both ranks' engines share the device in a run) — "
                            f"{100 * rate / storage_shared:.0f}% of {storage_shared:.2f} GB/s",
                            verdict(rate >= 0.8 * storage_shared)))
                node_rates = [r["node_gb_per_s"] for r in runs if r.get("node_gb_per_s")]
                if node_rates:
                    node_rate = statistics.median(node_rates)
                    out.append((f"{model}, file tier: the device's rate over both ranks' copies "
                                f"together (the union of their copy intervals) ≥ 80% of one "
                                f"stream's write+read — median {node_rate:.2f} GB/s over "
                                f"{len(node_rates)} runs = {100 * node_rate / storage:.0f}% of "
                                f"{storage:.2f} GB/s", verdict(node_rate >= 0.8 * storage)))
                ratios = sorted(r["iteration_ratio"] for r in runs)
                waits = [r["wait_s_per_step"] for r in runs]
                out.append((f"{model}, file tier: time cost reported — iteration "
                            f"{ratios[0]:.2f}–{ratios[-1]:.2f}× no offload, waits "
                            f"{min(waits):.3f}–{max(waits):.3f} s per step", "reported"))
        capped = [r for r in ok if r["cap_bytes"] is not None]
        over = [r for r in capped if not r["within_cap"]]
        if any(r.get("cap_bytes") is not None for r in results if r.get("model") == model):
            # (a sweep run with --caps none has no capped runs to judge)
            out.append((f"{model}: every capped run's ledger peak ≤ its cap "
                        f"({len(capped) - len(over)} of {len(capped)})",
                        verdict(capped and not over)))
        bound = [r for r in results if r.get("model") == model and r["tier"] == "none"
                 and r["cap_fraction"] is not None and r["cap_fraction"] < 1]
        if bound:
            fits = [r for r in bound if r["status"] == "ok"]
            out.append((f"{model}: without offload, every cap below 100% fails (the caps bind): "
                        f"{len(bound) - len(fits)} of {len(bound)}", verdict(not fits)))
    return out


def verdict(condition):
    return "met" if condition else "not met"


# ---- SVG ----------------------------------------------------------------------------------

def esc(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_ticks(lo, hi, n=5):
    span = hi - lo if hi > lo else 1.0
    raw = span / n
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    start = step * int(lo / step)
    ticks = []
    t = start
    while t <= hi + 1e-9:
        if t >= lo - 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


def memory_plot(results, path):
    models = []
    for r in results:
        if r.get("model") and r["status"] == "ok" and r["model"] not in models:
            models.append(r["model"])
    pw, ph, left, top, gap = 420, 300, 60, 56, 70
    width = max(left + len(models) * (pw + gap), 640)
    height = top + ph + 90
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">Iteration time '
           'relative to no offload against per-rank peak memory</text>',
           f'<text x="{width / 2}" y="33" text-anchor="middle" fill="#555">filled: ledger peak, '
           'hollow: peak RSS (largest rank); each run\'s name shows on hover</text>']
    for i, model in enumerate(models):
        runs = [r for r in results if r.get("model") == model and r["status"] == "ok"]
        xs = [r["peak_bytes"] / MIB for r in runs] + [r["rss_bytes"] / MIB for r in runs if r["rss_bytes"]]
        ys = [r["iteration_ratio"] for r in runs if "iteration_ratio" in r]
        x0, x1 = 0, max(xs) * 1.08
        y0, y1 = min(0.8, min(ys) * 0.95), max(1.3, max(ys) * 1.05)
        ox = left + i * (pw + gap)
        X = lambda v: ox + (v - x0) / (x1 - x0) * pw
        Y = lambda v: top + ph - (v - y0) / (y1 - y0) * ph
        svg.append(f'<rect x="{ox}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        svg.append(f'<text x="{ox + pw / 2}" y="{top - 6}" text-anchor="middle" font-weight="bold">{esc(model)}</text>')
        for t in nice_ticks(x0, x1):
            svg.append(f'<line x1="{X(t):.1f}" y1="{top + ph}" x2="{X(t):.1f}" y2="{top + ph + 4}" stroke="#999"/>')
            svg.append(f'<text x="{X(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{t:g}</text>')
        for t in nice_ticks(y0, y1):
            svg.append(f'<line x1="{ox}" y1="{Y(t):.1f}" x2="{ox + pw}" y2="{Y(t):.1f}" stroke="#eee"/>')
            svg.append(f'<text x="{ox - 5}" y="{Y(t) + 4:.1f}" text-anchor="end">{t:.2f}</text>')
        svg.append(f'<line x1="{ox}" y1="{Y(1.1):.1f}" x2="{ox + pw}" y2="{Y(1.1):.1f}" '
                   'stroke="#d62728" stroke-dasharray="4,3"/>')
        svg.append(f'<text x="{ox + pw - 4}" y="{Y(1.1) - 4:.1f}" text-anchor="end" fill="#d62728">goal: within 10%</text>')
        svg.append(f'<text x="{ox + pw / 2}" y="{top + ph + 34}" text-anchor="middle">peak MiB per rank (largest rank)</text>')
        svg.append(f'<text transform="translate({ox - 42},{top + ph / 2}) rotate(-90)" text-anchor="middle">iteration / no offload</text>')
        for r in runs:
            if "iteration_ratio" not in r:
                continue
            c = COLOURS.get(r["tier"], "#000")
            x, y = X(r["peak_bytes"] / MIB), Y(r["iteration_ratio"])
            if r["rss_bytes"]:
                xr = X(r["rss_bytes"] / MIB)
                svg.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{xr:.1f}" y2="{y:.1f}" stroke="{c}" stroke-opacity="0.4"/>')
                svg.append(f'<circle cx="{xr:.1f}" cy="{y:.1f}" r="4" fill="white" stroke="{c}"/>')
            svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{c}"><title>{esc(r["name"])}</title></circle>')
    ly = top + ph + 56
    lx = left
    for tier in TIERS:
        if any(r["tier"] == tier and r["status"] == "ok" for r in results):
            svg.append(f'<circle cx="{lx}" cy="{ly}" r="5" fill="{COLOURS[tier]}"/>')
            svg.append(f'<text x="{lx + 9}" y="{ly + 4}">{tier}</text>')
            lx += 70
    svg.append("</svg>")
    write_atomically(path, "\n".join(svg) + "\n")


def bandwidth_plot(results, ceilings, path):
    bars = []
    c = ceilings
    bars.append(("memcpy (ceiling)", c["memcpy"]["gb_per_s"], "#999999"))
    bars.append(("MPI p2p (ceiling)", c["mpi_p2p"]["gb_per_s"], "#999999"))
    bars.append((f"MPI_Get osc {c['osc'] or 'default'} (ceiling)", c["mpi_get"]["gb_per_s"], "#999999"))
    bars.append((f"MPI_Put osc {c['osc'] or 'default'} (ceiling)", c["mpi_put"]["gb_per_s"], "#999999"))
    bars.append(("storage wr+rd, 1 stream (ceiling)", c["file"]["one_stream"]["write_read"]["gb_per_s"], "#999999"))
    bars.append(("storage wr+rd, 2 streams, each (ceiling)",
                 c["file"]["two_streams_per_stream"]["write_read"]["gb_per_s"], "#999999"))
    models = []
    for r in results:
        if r.get("model") and r["model"] not in models:
            models.append(r["model"])
    for model in models:
        for tier in ("peer", "file", "host"):
            rates = [r["transfer_gb_per_s"] for r in results if r.get("model") == model
                     and r["tier"] == tier and r["status"] == "ok" and r.get("transfer_gb_per_s")]
            if rates:
                bars.append((f"{model} {tier} tier (median of {len(rates)})", statistics.median(rates),
                             COLOURS[tier]))
            cpu = [r["cpu_gb_per_s"] for r in results if r.get("model") == model
                   and r["tier"] == tier and r["status"] == "ok" and r.get("cpu_gb_per_s")]
            if cpu:
                bars.append((f"{model} {tier} tier, per engine CPU second", statistics.median(cpu),
                             LIGHT[tier]))
    label_w, bw, bh, top = 250, 380, 18, 40
    height = top + len(bars) * (bh + 6) + 40
    width = label_w + bw + 80
    vmax = max(b[1] for b in bars) * 1.1
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">Offload transfer '
           'rate beside the ceilings measured in the same run (GB/s)</text>']
    for i, (label, value, colour) in enumerate(bars):
        y = top + i * (bh + 6)
        w = value / vmax * bw
        svg.append(f'<text x="{label_w - 6}" y="{y + bh - 5}" text-anchor="end">{esc(label)}</text>')
        svg.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bh}" fill="{colour}"/>')
        svg.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bh - 5}">{value:.2f}</text>')
    svg.append("</svg>")
    write_atomically(path, "\n".join(svg) + "\n")


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


CSV_FIELDS = ["name", "model", "tier", "cap_fraction", "cap_bytes", "lookahead", "status",
              "iteration_s", "iteration_ratio", "tokens_per_s", "peak_bytes", "stash_bytes",
              "staging_bytes", "rss_bytes", "stash_cut", "bytes_moved", "engine_seconds",
              "transfer_gb_per_s", "node_gb_per_s", "evict_gb_per_s", "prefetch_gb_per_s", "engine_cpu_seconds",
              "cpu_gb_per_s", "map_s_per_step", "allocated_bytes_per_step", "wait_s_per_step",
              "rank0_peak_bytes", "rank1_peak_bytes", "rank0_rss_bytes", "rank1_rss_bytes",
              "load_at_start", "message"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py OUT_DIR")
    out = sys.argv[1]
    for needed in ("manifest.jsonl", "ceilings-start.json"):
        if not os.path.exists(os.path.join(out, needed)):
            sys.exit(f"summarize.py: no {needed} in {out}: run bench/memory_pressure/run.sh {out} first")
    measured = [load_json(os.path.join(out, f"ceilings-{when}.json")) for when in ("start", "end")
                if os.path.exists(os.path.join(out, f"ceilings-{when}.json"))]
    ceilings = best_ceilings(measured)
    results = collect(out)
    checked = goals(results, ceilings)
    env_path = os.path.join(out, "environment.json")
    environment = load_json(env_path) if os.path.exists(env_path) else {}
    write_atomically(os.path.join(out, "results.json"), json.dumps(
        {"environment": environment, "ceilings": ceilings, "runs": results,
         "goals": [{"goal": g, "status": s} for g, s in checked]}, indent=1) + "\n")
    tmp = os.path.join(out, "results.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in results:
            row = dict(r)
            for i, rank in enumerate(r.get("ranks", [])[:2]):
                row[f"rank{i}_peak_bytes"] = rank["peak_bytes"]
                row[f"rank{i}_rss_bytes"] = rank["peak_rss_bytes"]
            w.writerow(row)
    os.replace(tmp, os.path.join(out, "results.csv"))
    memory_plot(results, os.path.join(out, "memory_pressure.svg"))
    bandwidth_plot(results, ceilings, os.path.join(out, "bandwidth.svg"))
    if environment:
        e = environment
        print(f"{e['date']}, {e['host']}: {e['ranks']} ranks x {e['threads_per_rank']} thread(s), "
              f"{e['cpus']} CPUs, {e['memory_nodes']} memory node(s), commit {e['commit']}; "
              f"load average {e['load_before']} before, {e['load_after']} after; "
              f"{e['seconds']} s\n")
    print(markdown(results, ceilings))
    print("\nGoals:\n")
    for text, status in checked:
        print(f"- **{status}**: {text}")


if __name__ == "__main__":
    main()
