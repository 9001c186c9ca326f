// Reference causal multi-head self-attention: the textbook formulas in plain loops, in float
// or double, for tests to check spw::ops::attention_* against. Layouts as in
// kernels/ops/attention.hpp: qkv [batch*seq, 3d] = Q | K | V, y [batch*seq, d],
// lse [batch, heads, seq]. Shapes are the caller's responsibility.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace spw::ref {

template <class T>
struct AttentionForward {
  std::vector<T> y;
  std::vector<T> lse;
};

template <class T>
AttentionForward<T> attention_forward(const std::vector<T>& qkv, std::int64_t batch,
                                      std::int64_t seq, std::int64_t heads) {
  const std::int64_t d = static_cast<std::int64_t>(qkv.size()) / (batch * seq * 3);
  const std::int64_t hd = d / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h,
                std::int64_t c) -> T {
    return qkv[static_cast<std::size_t>((b * seq + t) * 3 * d + part * d + h * hd + c)];
  };
  AttentionForward<T> result;
  result.y.assign(static_cast<std::size_t>(batch * seq * d), T(0));
  result.lse.assign(static_cast<std::size_t>(batch * heads * seq), T(0));
  std::vector<T> s(static_cast<std::size_t>(seq));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < seq; ++i) {
        T max = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          T dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) dot += at(b, i, 0, h, c) * at(b, j, 1, h, c);
          s[static_cast<std::size_t>(j)] = dot * scale;
          max = std::max(max, s[static_cast<std::size_t>(j)]);
        }
        T sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - max);
        result.lse[static_cast<std::size_t>((b * heads + h) * seq + i)] = max + std::log(sum);
        for (std::int64_t c = 0; c < hd; ++c) {
          T acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) {
            acc += std::exp(s[static_cast<std::size_t>(j)] - max) / sum * at(b, j, 2, h, c);
          }
          result.y[static_cast<std::size_t>((b * seq + i) * d + h * hd + c)] = acc;
        }
      }
    }
  }
  return result;
}

// dqkv [batch*seq, 3d] from dy [batch*seq, d]; recomputes the softmax from qkv.
template <class T>
std::vector<T> attention_backward(const std::vector<T>& dy, const std::vector<T>& qkv,
                                  std::int64_t batch, std::int64_t seq, std::int64_t heads) {
  const std::int64_t d = static_cast<std::int64_t>(qkv.size()) / (batch * seq * 3);
  const std::int64_t hd = d / heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  auto index = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h,
                   std::int64_t c) {
    return static_cast<std::size_t>((b * seq + t) * 3 * d + part * d + h * hd + c);
  };
  auto dy_at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t c) {
    return dy[static_cast<std::size_t>((b * seq + t) * d + h * hd + c)];
  };
  std::vector<T> dqkv(qkv.size(), T(0));
  const auto n = static_cast<std::size_t>(seq);
  std::vector<T> p(n * n), dp(n * n);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      std::fill(p.begin(), p.end(), T(0));
      std::fill(dp.begin(), dp.end(), T(0));
      for (std::int64_t i = 0; i < seq; ++i) {
        T max = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          T dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) {
            dot += qkv[index(b, i, 0, h, c)] * qkv[index(b, j, 1, h, c)];
          }
          p[static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j)] = dot * scale;
          max = std::max(max, dot * scale);
        }
        T sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          T& e = p[static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j)];
          e = std::exp(e - max);
          sum += e;
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          p[static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j)] /= sum;
        }
      }
      // dP = dO Vᵀ, then the softmax Jacobian: dS_ij = P_ij (dP_ij - Σ_k P_ik dP_ik).
      for (std::int64_t i = 0; i < seq; ++i) {
        T weighted = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          T dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) {
            dot += dy_at(b, i, h, c) * qkv[index(b, j, 2, h, c)];
          }
          dp[static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j)] = dot;
          weighted += p[static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j)] * dot;
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const auto ij = static_cast<std::size_t>(i) * n + static_cast<std::size_t>(j);
          const T ds = p[ij] * (dp[ij] - weighted);
          for (std::int64_t c = 0; c < hd; ++c) {
            dqkv[index(b, i, 0, h, c)] += ds * scale * qkv[index(b, j, 1, h, c)];
            dqkv[index(b, j, 1, h, c)] += ds * scale * qkv[index(b, i, 0, h, c)];
            dqkv[index(b, j, 2, h, c)] += p[ij] * dy_at(b, i, h, c);
          }
        }
      }
    }
  }
  return dqkv;
}

}  // namespace spw::ref
