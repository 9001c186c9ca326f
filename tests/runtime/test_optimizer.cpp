// The optimizers must follow torch.optim's update rules, or a run cannot be compared with its
// PyTorch reference; the references below are those rules written out in double precision.
#include "runtime/optimizer.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "kernels/op_timer.hpp"

namespace spw {
namespace {

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

Tensor make_tensor(const Shape& shape, MemoryCategory category) {
  auto t = Tensor::zeros(shape, category);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// A parameter with its gradient, and the double-precision twin the reference updates.
struct Param {
  std::string name;
  Tensor value, grad;
  std::vector<double> ref;           // reference parameter
  std::vector<double> ref_a, ref_b;  // reference state: momentum, or m and v

  Param(std::string n, const Shape& shape, std::uint64_t seed)
      : name(std::move(n)),
        value(make_tensor(shape, MemoryCategory::parameters)),
        grad(make_tensor(shape, MemoryCategory::gradients)) {
    const auto init = random_values(static_cast<std::size_t>(value.numel()), seed);
    for (std::size_t i = 0; i < init.size(); ++i) {
      value.data()[i] = static_cast<float>(init[i]);
      ref.push_back(value.data()[i]);
    }
    ref_a.assign(ref.size(), 0.0);
    ref_b.assign(ref.size(), 0.0);
  }

  // Both the float gradient and what the reference sees (the same float values).
  std::vector<double> set_grad(std::uint64_t seed) {
    const auto g = random_values(ref.size(), seed);
    std::vector<double> seen(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      grad.data()[i] = static_cast<float>(g[i]);
      seen[i] = grad.data()[i];
    }
    return seen;
  }
};

std::vector<NamedParameter> named(std::vector<Param>& params) {
  std::vector<NamedParameter> out;
  for (Param& p : params) out.push_back({p.name, &p.value, &p.grad});
  return out;
}

// A Linear weight (decayed), its bias and a LayerNorm gain (not decayed).
std::vector<Param> small_model() {
  std::vector<Param> params;
  params.emplace_back("blocks.0.mlp.fc1.weight", Shape{3, 4}, 1);
  params.emplace_back("blocks.0.mlp.fc1.bias", Shape{3}, 2);
  params.emplace_back("blocks.0.ln1.weight", Shape{4}, 3);
  return params;
}

void expect_matches_reference(const std::vector<Param>& params) {
  for (const Param& p : params) {
    for (std::size_t i = 0; i < p.ref.size(); ++i) {
      ASSERT_NEAR(p.value.data()[i], p.ref[i], 2e-6 * std::max(1.0, std::abs(p.ref[i])))
          << p.name << "[" << i << "]";
    }
  }
}

std::unique_ptr<Optimizer> make(const OptimizerSettings& s, std::vector<NamedParameter> params) {
  auto optimizer = make_optimizer(s, std::move(params));
  EXPECT_TRUE(optimizer.ok()) << optimizer.status().message();
  return std::move(optimizer).value();
}

TEST(Sgd, MomentumMatchesTorchOverThreeSteps) {
  auto params = small_model();
  OptimizerSettings s;
  s.kind = "sgd";
  s.lr = 0.1;
  s.momentum = 0.9;
  s.weight_decay = 0.05;
  auto optimizer = make(s, named(params));
  ASSERT_EQ(optimizer->state_names(), std::vector<std::string>{"momentum_buffer"});
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      Param& p = params[k];
      const auto g = p.set_grad(100 + 10 * step + k);
      const bool decay = p.value.rank() >= 2;
      for (std::size_t i = 0; i < g.size(); ++i) {
        // torch.optim.SGD, dampening 0, nesterov off: d = g + wd p; b = d on the first step,
        // else b = mu b + d; p -= lr b.
        const double d = g[i] + (decay ? s.weight_decay * p.ref[i] : 0.0);
        p.ref_a[i] = step == 0 ? d : s.momentum * p.ref_a[i] + d;
        p.ref[i] -= s.lr * p.ref_a[i];
      }
    }
    ASSERT_TRUE(optimizer->step().ok());
    expect_matches_reference(params);
  }
  EXPECT_EQ(optimizer->step_count(), 3);
  for (std::size_t k = 0; k < params.size(); ++k) {
    for (std::size_t i = 0; i < params[k].ref_a.size(); ++i) {
      EXPECT_NEAR(optimizer->state(k, 0).data()[i], params[k].ref_a[i], 2e-6);
    }
  }
}

TEST(Sgd, WithoutMomentumKeepsNoStateAndStepsAlongTheGradient) {
  auto params = small_model();
  OptimizerSettings s;
  s.kind = "sgd";
  s.lr = 0.2;
  s.weight_decay = 0.1;
  auto optimizer = make(s, named(params));
  EXPECT_TRUE(optimizer->state_names().empty());
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      Param& p = params[k];
      const auto g = p.set_grad(200 + 10 * step + k);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const double d = g[i] + (p.value.rank() >= 2 ? s.weight_decay * p.ref[i] : 0.0);
        p.ref[i] -= s.lr * d;
      }
    }
    ASSERT_TRUE(optimizer->step().ok());
    expect_matches_reference(params);
  }
}

// torch.optim.AdamW: p *= 1 - lr wd (decayed tensors only); m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
void adamw_reference_step(Param& p, const std::vector<double>& g, const OptimizerSettings& s,
                          int t) {
  const bool decay = p.value.rank() >= 2;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (decay) p.ref[i] *= 1.0 - s.lr * s.weight_decay;
    p.ref_a[i] = s.beta1 * p.ref_a[i] + (1.0 - s.beta1) * g[i];
    p.ref_b[i] = s.beta2 * p.ref_b[i] + (1.0 - s.beta2) * g[i] * g[i];
    const double m_hat = p.ref_a[i] / (1.0 - std::pow(s.beta1, t));
    const double v_hat = p.ref_b[i] / (1.0 - std::pow(s.beta2, t));
    p.ref[i] -= s.lr * m_hat / (std::sqrt(v_hat) + s.eps);
  }
}

OptimizerSettings adamw_settings() {
  OptimizerSettings s;
  s.kind = "adamw";
  s.lr = 0.01;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  return s;
}

TEST(AdamW, MatchesTorchOverThreeSteps) {
  auto params = small_model();
  const OptimizerSettings s = adamw_settings();
  auto optimizer = make(s, named(params));
  ASSERT_EQ(optimizer->state_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto g = params[k].set_grad(300 + 10 * step + k);
      adamw_reference_step(params[k], g, s, step);
    }
    ASSERT_TRUE(optimizer->step().ok());
    expect_matches_reference(params);
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    for (std::size_t i = 0; i < params[k].ref.size(); ++i) {
      EXPECT_NEAR(optimizer->state(k, 0).data()[i], params[k].ref_a[i], 1e-7);
      EXPECT_NEAR(optimizer->state(k, 1).data()[i], params[k].ref_b[i], 1e-7);
    }
  }
}

TEST(AdamW, BiasCorrectionFollowsARestoredStepCount) {
  auto params = small_model();
  const OptimizerSettings s = adamw_settings();
  auto optimizer = make(s, named(params));
  ASSERT_TRUE(optimizer->set_step(10).ok());
  for (std::size_t k = 0; k < params.size(); ++k) {
    adamw_reference_step(params[k], params[k].set_grad(400 + k), s, 11);
  }
  ASSERT_TRUE(optimizer->step().ok());
  expect_matches_reference(params);
  EXPECT_EQ(optimizer->step_count(), 11);
  EXPECT_EQ(optimizer->set_step(-1).code(), StatusCode::invalid_argument);
}

TEST(AdamW, LearningRateCanChangeBetweenSteps) {
  auto params = small_model();
  OptimizerSettings s = adamw_settings();
  auto optimizer = make(s, named(params));
  for (int step = 1; step <= 3; ++step) {
    s.lr = 0.01 * step;
    optimizer->set_learning_rate(s.lr);
    for (std::size_t k = 0; k < params.size(); ++k) {
      adamw_reference_step(params[k], params[k].set_grad(500 + 10 * step + k), s, step);
    }
    ASSERT_TRUE(optimizer->step().ok());
  }
  expect_matches_reference(params);
  EXPECT_DOUBLE_EQ(optimizer->learning_rate(), 0.03);
}

// With zero gradients every change comes from weight decay: rank >= 2 tensors shrink by
// exactly 1 - lr wd (SGD: p - lr wd p), vectors keep every bit.
TEST(WeightDecay, AppliesToTensorsOfRankTwoAndUpOnly) {
  for (const std::string kind : {"sgd", "adamw"}) {
    std::vector<Param> params;
    params.emplace_back("conv.weight", Shape{2, 3, 2, 2}, 11);
    params.emplace_back("fc.weight", Shape{5, 3}, 12);
    params.emplace_back("fc.bias", Shape{5}, 13);
    params.emplace_back("ln.weight", Shape{3}, 14);
    std::vector<std::vector<float>> before;
    for (Param& p : params) before.emplace_back(p.value.data(), p.value.data() + p.value.numel());
    OptimizerSettings s = adamw_settings();
    s.kind = kind;
    s.momentum = 0.9;
    s.lr = 0.5;
    s.weight_decay = 0.2;
    auto optimizer = make(s, named(params));
    ASSERT_TRUE(optimizer->step().ok());
    for (std::size_t k = 0; k < params.size(); ++k) {
      const bool decays = params[k].value.rank() >= 2;
      for (std::size_t i = 0; i < before[k].size(); ++i) {
        const float p = before[k][i];
        float expected = p;
        if (decays) {
          expected = kind == "adamw" ? p * static_cast<float>(1.0 - s.lr * s.weight_decay)
                                     : p - 0.5f * (0.2f * p);
        }
        ASSERT_EQ(params[k].value.data()[i], expected) << kind << " " << params[k].name;
      }
    }
  }
}

TEST(Optimizer, StateIsAccountedAsOptimizerStateAndShapedLikeTheParameters) {
  auto params = small_model();
  std::size_t param_bytes = 0;
  for (const Param& p : params) param_bytes += p.value.bytes();
  auto& ledger = MemoryLedger::process();
  const std::size_t before = ledger.snapshot().current_of(MemoryCategory::optimizer_state);
  {
    auto optimizer = make(adamw_settings(), named(params));
    EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::optimizer_state),
              before + 2 * param_bytes);
    for (std::size_t k = 0; k < params.size(); ++k) {
      EXPECT_EQ(optimizer->state(k, 1).shape(), params[k].value.shape());
      EXPECT_EQ(optimizer->state(k, 1).allocation()->category(), MemoryCategory::optimizer_state);
    }
  }
  EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::optimizer_state), before);
}

TEST(Optimizer, ZeroGradClearsEveryGradient) {
  auto params = small_model();
  auto optimizer = make(adamw_settings(), named(params));
  for (std::size_t k = 0; k < params.size(); ++k) params[k].set_grad(600 + k);
  optimizer->zero_grad();
  for (const Param& p : params) {
    for (std::int64_t i = 0; i < p.grad.numel(); ++i) ASSERT_EQ(p.grad.data()[i], 0.0f);
  }
}

TEST(Optimizer, EachStepCountsAsOneOptimizerStepInTheOpTimes) {
  for (const char* kind : {"sgd", "adamw"}) {
    auto params = small_model();
    OptimizerSettings s = adamw_settings();
    s.kind = kind;
    auto optimizer = make(s, named(params));
    const OpTimes before = op_times();
    ASSERT_TRUE(optimizer->step().ok());
    ASSERT_TRUE(optimizer->step().ok());
    const OpTimes d = op_times().since(before);
    EXPECT_EQ(d.calls_of(KernelOp::optimizer_step), 2) << kind;
    EXPECT_GT(d.seconds_of(KernelOp::optimizer_step), 0) << kind;
  }
}

// Runs `steps` AdamW steps on a tensor large enough to split over every thread, with an odd
// size so the vector loops have remainders, and returns the parameter bits.
std::vector<float> run_large(int threads, int steps, const std::string& kind) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<Param> params;
  params.emplace_back("w", Shape{1001, 517}, 21);
  params.emplace_back("b", Shape{1001}, 22);
  OptimizerSettings s = adamw_settings();
  s.kind = kind;
  s.momentum = 0.9;
  auto optimizer = make(s, named(params));
  for (int step = 0; step < steps; ++step) {
    params[0].set_grad(700 + step);
    params[1].set_grad(800 + step);
    EXPECT_TRUE(optimizer->step().ok());
  }
  omp_set_num_threads(saved);
  std::vector<float> out(params[0].value.data(), params[0].value.data() + params[0].value.numel());
  out.insert(out.end(), params[1].value.data(), params[1].value.data() + params[1].value.numel());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Optimizer, UpdatesAreBitIdenticalRunToRunAndAcrossThreadCounts) {
  for (const std::string kind : {"sgd", "adamw"}) {
    const int threads = std::max(2, omp_get_max_threads());
    const auto first = run_large(threads, 4, kind);
    EXPECT_TRUE(same_bits(first, run_large(threads, 4, kind))) << kind;
    EXPECT_TRUE(same_bits(first, run_large(1, 4, kind))) << kind;
    EXPECT_TRUE(same_bits(first, run_large(3, 4, kind))) << kind;
  }
}

TEST(MakeOptimizer, RejectsBadSettings) {
  auto params = small_model();
  auto check = [&](OptimizerSettings s, const std::string& needle) {
    auto optimizer = make_optimizer(s, named(params));
    ASSERT_FALSE(optimizer.ok()) << needle;
    EXPECT_EQ(optimizer.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(optimizer.status().message().find(needle), std::string::npos)
        << optimizer.status().message();
  };
  OptimizerSettings s = adamw_settings();
  s.kind = "adam";
  check(s, "optimizer kind 'adam' is not one of: sgd, adamw");
  s = adamw_settings();
  s.lr = -1.0;
  check(s, "lr");
  s = adamw_settings();
  s.lr = std::nan("");
  check(s, "lr");
  s = adamw_settings();
  s.beta2 = 1.0;
  check(s, "betas");
  s = adamw_settings();
  s.eps = 0.0;
  check(s, "eps");
  s = adamw_settings();
  s.weight_decay = -0.1;
  check(s, "weight_decay");
  s.kind = "sgd";
  s.weight_decay = 0.0;
  s.momentum = 1.5;
  check(s, "momentum");
}

TEST(MakeOptimizer, RejectsBadParameterLists) {
  auto params = small_model();
  auto list = named(params);

  auto twice = list;
  twice.push_back(list[0]);
  auto r = make_optimizer(adamw_settings(), twice);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "optimizer parameter 'blocks.0.mlp.fc1.weight' is listed twice");

  auto tied = list;
  tied.push_back({"lm_head.weight", list[0].value, list[0].grad});
  r = make_optimizer(adamw_settings(), tied);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("same tensor"), std::string::npos) << r.status().message();

  Tensor wrong = make_tensor(Shape{4, 3}, MemoryCategory::gradients);
  auto mismatched = list;
  mismatched[0].grad = &wrong;
  r = make_optimizer(adamw_settings(), mismatched);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::shape_mismatch);

  auto no_grad = list;
  no_grad[1].grad = nullptr;
  r = make_optimizer(adamw_settings(), no_grad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);

  auto unnamed = list;
  unnamed[2].name.clear();
  EXPECT_FALSE(make_optimizer(adamw_settings(), unnamed).ok());
}

}  // namespace
}  // namespace spw
