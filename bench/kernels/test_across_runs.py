#!/usr/bin/env python3
"""Checks across_runs.py's medians and verdicts on hand-made runs of bench_kernels' JSON
(ctest: bench.kernels_across_runs)."""
import contextlib
import importlib.util
import io
import json
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


across_runs = load_module("across_runs")
# The one-run tests' hand-made medians and their reading of a table row.
one_run = load_module("test_summarize")
median, row = one_run.median, one_run.row


GELU = "gelu_fwd/2048x256/t2"
EMB = "embedding_fwd/2048x256/t2"
LAYER = "fc1_d256/t2"


def run(gelu, memcpy=100.0, gelu_foreign=0.0, emb=None, gather=None, linear=None):
    """One run's entries: GELU at `gelu` GB/s beside memcpy, optionally the embedding and
    its gather, and the three Linear passes at linear[0] against raw sgemm at linear[1]."""
    entries = [median(f"op/{GELU}", gelu, gelu_foreign), median(f"memcpy/{GELU}", memcpy)]
    if emb is not None:
        entries += [median(f"op/{EMB}", emb), median(f"memcpy/{EMB}", memcpy),
                    median(f"gather/{EMB}", gather)]
    if linear is not None:
        for p in ("linear_fwd", "linear_bwd_in", "linear_bwd_w"):
            entries += [median(f"op/{p}/{LAYER}", linear[0], unit="flops"),
                        median(f"sgemm/{p}/{LAYER}", linear[1], unit="flops")]
    return entries


def summary(*runs):
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, entries in enumerate(runs):
            path = os.path.join(tmp, f"run{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"context": {"num_cpus": 2}, "benchmarks": entries}, f)
            paths.append(path)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = across_runs.main(["across_runs.py"] + paths)
        return code, out.getvalue()


class ElementwiseMedian(unittest.TestCase):
    def test_one_slow_run_does_not_decide_the_point(self):
        _, text = summary(run(73.0), run(72.0), run(63.0))
        self.assertEqual(row(text, "gelu_fwd", "[2048,256]", 2)[3:5],
                         ["73% / 72% / 63%", "72%"])
        self.assertEqual(row(text, "gelu_fwd", "[2048,256]", 2)[7], "yes")
        self.assertIn("met at the median at 1 of 1 points", text)

    def test_two_slow_runs_miss_it(self):
        _, text = summary(run(73.0), run(65.0), run(63.0))
        self.assertEqual(row(text, "gelu_fwd", "[2048,256]", 2)[4:], ["65%", "—", "—",
                                                                      "**no**"])
        self.assertIn("met at the median at 0 of 1 points; at 0 of the 1 missed", text)

    def test_a_contended_run_is_left_out_of_the_median(self):
        _, text = summary(run(73.0), run(50.0, gelu_foreign=0.5), run(71.0))
        cells = row(text, "gelu_fwd", "[2048,256]", 2)
        self.assertEqual(cells[3:5], ["73% / ? / 71%", "72%"])
        self.assertEqual(cells[7], "yes")

    def test_the_median_gather_under_the_goal_is_beyond_reach(self):
        _, text = summary(run(80.0, emb=56.0, gather=64.0), run(80.0, emb=57.0, gather=61.0),
                          run(80.0, emb=57.0, gather=63.0))
        cells = row(text, "embedding_fwd", "[2048,256]", 2)
        self.assertEqual(cells[4:], ["57%", "64% / 61% / 63%", "63%",
                                     "**no** (ceiling under the goal)"])
        self.assertIn("met at the median at 1 of 2 points; at 1 of the 1 missed", text)


class LinearMedian(unittest.TestCase):
    def test_linear_goal_judged_on_the_median_layer_ratio(self):
        _, text = summary(run(80.0, linear=(95.0, 100.0)), run(80.0, linear=(85.0, 100.0)),
                          run(80.0, linear=(91.0, 100.0)))
        cells = row(text, "linear fwd+bwd", "fc1 [2048,256]x[1024,256]", 2)
        self.assertEqual(cells[3:], ["95% / 85% / 91%", "91%", "yes"])
        self.assertIn("Linear goal met at the median at 1 of 1 points", text)


class BadInput(unittest.TestCase):
    def test_one_run_is_refused_with_usage(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(across_runs.main(["across_runs.py", "only.json"]), 2)
        self.assertIn("usage: across_runs.py RUN1/kernels.json RUN2/kernels.json",
                      err.getvalue())

    def test_a_missing_file_is_named(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = across_runs.main(["across_runs.py", "/nonexistent/a.json",
                                     "/nonexistent/b.json"])
        self.assertEqual(code, 1)
        self.assertIn("cannot read the runs", err.getvalue())
        self.assertIn("/nonexistent/a.json", err.getvalue())


if __name__ == "__main__":
    unittest.main()
