// Reference token + position embedding: plain loops in float or double, for tests to check
// spw::ops::embedding_* against. tokens is [batch, seq] with ids in [0, vocab); token_table
// [vocab, d], position_table [max_seq >= seq, d], y and dy [batch*seq, d]. Shapes and ids are
// the caller's responsibility.
#pragma once

#include <cstdint>

namespace spw::ref {

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t batch, std::int64_t seq,
                       const T* token_table, const T* position_table, std::int64_t d, T* y) {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      const std::int64_t row = b * seq + t;
      const std::int64_t id = tokens[row];
      for (std::int64_t j = 0; j < d; ++j) {
        y[row * d + j] = token_table[id * d + j] + position_table[t * d + j];
      }
    }
  }
}

// dtoken_table and dposition_table are accumulated into (+=), like the optimized op.
template <class T>
void embedding_backward_weight(const std::int32_t* tokens, std::int64_t batch, std::int64_t seq,
                               const T* dy, std::int64_t d, T* dtoken_table,
                               T* dposition_table) {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      const std::int64_t row = b * seq + t;
      const std::int64_t id = tokens[row];
      for (std::int64_t j = 0; j < d; ++j) {
        dtoken_table[id * d + j] += dy[row * d + j];
        dposition_table[t * d + j] += dy[row * d + j];
      }
    }
  }
}

}  // namespace spw::ref
