// Shared by the validator's tests: what validate() says about a schedule that must fail.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "partition/validator.hpp"

namespace spw::sched {

// The validator's message for `schedule` (invalid_argument expected), or "accepted:" and
// the lists when it passes, so a failed expectation shows what was accepted.
inline std::string rejection(const Schedule& schedule) {
  auto report = validate(schedule);
  if (report.ok()) return "accepted:\n" + to_string(schedule);
  EXPECT_EQ(report.status().code(), StatusCode::invalid_argument);
  return report.status().message();
}

}  // namespace spw::sched
