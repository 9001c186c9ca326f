#!/usr/bin/env python3
"""Checks summarize.py's closed forms and its floor for any schedule against hand-computed
values (ctest: bench.pipeline_summarize)."""
import importlib.util
import os
import unittest

spec = importlib.util.spec_from_file_location(
    "summarize", os.path.join(os.path.dirname(os.path.abspath(__file__)), "summarize.py"))
summarize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize)


def report(P, costs):
    """A report.json with the parts the floor reads: per stage (F, B, W) seconds."""
    return {"pipeline": {"layout": {"pipeline_ranks": P},
                         "predicted": {"stage_costs": [
                             {"stage": s, "forward_seconds": f, "backward_input_seconds": b,
                              "backward_weight_seconds": w}
                             for s, (f, b, w) in enumerate(costs)]}}}


class ClosedForms(unittest.TestCase):
    def test_gpipe_and_1f1b_idle_p_minus_1_over_m_plus_p_minus_1(self):
        self.assertAlmostEqual(summarize.closed_form("1f1b", 2, 4, 1), 1 / 5)
        self.assertAlmostEqual(summarize.closed_form("gpipe", 4, 8, 1), 3 / 11)

    def test_interleaved_divides_the_fill_by_its_chunks(self):
        self.assertAlmostEqual(summarize.closed_form("interleaved-1f1b", 2, 4, 2), 1 / 9)

    def test_zb_h1_idles_the_largest_of_f_b_and_f_plus_b_minus_w(self):
        # F = B = W: a third of 1F1B's idle.
        self.assertAlmostEqual(summarize.closed_form("zb-h1", 2, 4, 1), 1 / (12 + 1))
        # F = 2, B = 1, W = 1.5: F is the largest, 2 of idle over 4 (2 + 1 + 1.5) of work.
        self.assertAlmostEqual(summarize.closed_form("zb-h1", 2, 4, 1, 2.0, 1.0, 1.5), 2 / 20)


class BubbleSteps(unittest.TestCase):
    def test_the_three_steps_add_up_from_the_closed_form_to_the_measured_bubble(self):
        row = {"closed_form_bubble_measured_fbw": 0.025, "predicted_free_links_bubble": 0.029,
               "predicted_bubble": 0.031, "bubble": 0.034}
        stages, links, rest = summarize.bubble_steps(row)
        self.assertAlmostEqual(stages, 0.004)
        self.assertAlmostEqual(links, 0.002)
        self.assertAlmostEqual(rest, 0.003)
        self.assertAlmostEqual(0.025 + stages + links + rest, row["bubble"])

    def test_reports_without_a_free_links_prediction_leave_those_steps_out(self):
        row = {"closed_form_bubble_measured_fbw": 0.025, "predicted_free_links_bubble": None,
               "predicted_bubble": 0.031, "bubble": 0.034}
        stages, links, rest = summarize.bubble_steps(row)
        self.assertIsNone(stages)
        self.assertIsNone(links)
        self.assertAlmostEqual(rest, 0.003)


class FloorAnySchedule(unittest.TestCase):
    def test_equal_stages_leave_only_the_first_forward(self):
        # Rank 1 starts after one F (1 s) and then works 4 (1 + 1 + 1) = 12 s.
        self.assertAlmostEqual(summarize.floor_any_schedule(report(2, [(1, 1, 1)] * 2), 4),
                               1 - 24 / (2 * 13))

    def test_a_heavier_last_stage_sets_the_iteration(self):
        # Work 12 and 13.2 s; the last rank ends at 1 + 13.2 at the earliest.
        floor = summarize.floor_any_schedule(report(2, [(1, 1, 1), (1.1, 1.1, 1.1)]), 4)
        self.assertAlmostEqual(floor, 1 - 25.2 / (2 * 14.2))
        # Above the closed form of equal stages at the mean costs (1.05 each): no schedule
        # meets that one on these stages.
        self.assertGreater(floor, summarize.closed_form("zb-h1", 2, 4, 1, 1.05, 1.05, 1.05))

    def test_a_heavier_first_stage_is_busy_from_the_start(self):
        # Rank 0 works 4 (2 + 1 + 1) = 16 s from time 0; rank 1 ends by 2 + 12 = 14 at best.
        floor = summarize.floor_any_schedule(report(2, [(2, 1, 1), (1, 1, 1)]), 4)
        self.assertAlmostEqual(floor, 1 - 28 / (2 * 16))

    def test_interleaved_stages_go_to_rank_s_mod_p(self):
        # Stages 0 and 2 on rank 0 (work 2 (3 + 3) = 12), 1 and 3 on rank 1 (2 (3 + 6) = 18),
        # which starts after stage 0's forward.
        costs = [(1, 1, 1), (1, 1, 1), (1, 1, 1), (2, 2, 2)]
        self.assertAlmostEqual(summarize.floor_any_schedule(report(2, costs), 2),
                               1 - 30 / (2 * 19))


if __name__ == "__main__":
    unittest.main()
