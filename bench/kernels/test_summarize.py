#!/usr/bin/env python3
"""Checks summarize.py's element-wise verdicts and ceilings on hand-made benchmark JSON
(ctest: bench.kernels_summarize)."""
import contextlib
import importlib.util
import io
import json
import os
import tempfile
import unittest

spec = importlib.util.spec_from_file_location(
    "summarize", os.path.join(os.path.dirname(os.path.abspath(__file__)), "summarize.py"))
summarize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize)


def median(name, rate, foreign_cores=0.0, unit="bytes"):
    """A median aggregate of benchmark `name` at `rate` GB/s (or GFLOP/s, unit "flops"), its
    thread on the CPU."""
    entry = {"name": name + "_median", "run_name": name, "run_type": "aggregate",
             "aggregate_name": "median", "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ms",
             "foreign_cores": foreign_cores}
    entry.update({unit: rate * 1e9, unit[:-1] + "_count": rate * 1e6})
    return entry


def summary(entries):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernels.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"context": {"num_cpus": 2}, "benchmarks": entries}, f)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            summarize.main(["summarize.py", path])
        return out.getvalue()


def row(text, op, shape, threads):
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:3] == [op, shape, str(threads)]:
            return cells
    raise AssertionError(f"no row for {op} {shape} t{threads} in:\n{text}")


EMB = "embedding_fwd/2048x256"
GELU = "gelu_fwd/2048x256"


def point(name, threads, op, memcpy, ceiling_kind=None, ceiling=None, foreign_cores=0.0):
    """The summary of one element-wise point: the op and memcpy at op / memcpy GB/s, beside
    a ceiling row of ceiling_kind ("gather" at the same threads, "incache" on one)."""
    entries = [median(f"op/{name}/t{threads}", op), median(f"memcpy/{name}/t{threads}", memcpy)]
    if ceiling_kind == "gather":
        entries.append(median(f"gather/{name}/t{threads}", ceiling, foreign_cores))
    elif ceiling_kind == "incache":
        entries.append(median(f"incache/{name}/t1", ceiling, foreign_cores))
    text = summary(entries)
    op_name, shape = name.split("/")
    rows, cols = shape.split("x")
    return row(text, op_name, f"[{rows},{cols}]", threads), text


class EmbeddingCeiling(unittest.TestCase):
    def test_the_gather_sets_the_ceiling_without_slack(self):
        # op at 50%, its gather at 64% of memcpy: under 70% with no slack, so beyond reach.
        cells, text = point(EMB, 2, 50.0, 100.0, "gather", 64.0)
        self.assertEqual(cells[5:9], ["50%", "—", "64%", "**no** (ceiling under the goal)"])
        self.assertIn("Goal met at 0 of 1 uncontended points; at 1 of the 1 missed", text)

    def test_a_gather_at_the_goal_leaves_the_miss_open(self):
        cells, text = point(EMB, 2, 60.0, 100.0, "gather", 71.0)
        self.assertEqual(cells[8], "**no**")
        self.assertIn("at 0 of the 1 missed", text)

    def test_a_contended_gather_makes_the_point_contended(self):
        cells, text = point(EMB, 2, 50.0, 100.0, "gather", 64.0, foreign_cores=0.5)
        self.assertEqual(cells[8], "? (contended)")
        self.assertIn("Goal met at 0 of 0 uncontended points", text)


class InCacheCeiling(unittest.TestCase):
    def test_in_cache_ceiling_keeps_its_slack(self):
        # 2 threads x 31 GB/s in cache over 100 = 62%: under 70% but within the slack
        # (62% x 1.15 >= 70%), so the miss may still be the op's own.
        cells, _ = point(GELU, 2, 55.0, 100.0, "incache", 31.0)
        self.assertEqual(cells[6:9], ["31.0", "62%", "**no**"])
        # 2 x 25 = 50%: under the goal by more than the slack.
        cells, _ = point(GELU, 2, 45.0, 100.0, "incache", 25.0)
        self.assertEqual(cells[8], "**no** (ceiling under the goal)")

    def test_a_met_goal_is_yes_whatever_the_ceiling(self):
        cells, text = point(GELU, 1, 80.0, 100.0, "incache", 50.0)
        self.assertEqual(cells[8], "yes")
        self.assertIn("Goal met at 1 of 1 uncontended points", text)


if __name__ == "__main__":
    unittest.main()
