#include "partition/slot_memory.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <deque>

namespace spw::sched {

namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

enum Part : std::uint8_t { kIn, kMid, kOut, kOutGrad, kInGrad, kRest, kParts };
using Pieces = std::array<std::int64_t, kParts>;

struct Slot {
  int chunk = -1;
  std::array<bool, kParts> held{};
  bool weight_done = false;
  bool grad_sent = false;
  bool stash_sent = false;
  bool dropped = false;  // DropStash: an evaluation's forward, no backward to wait for
  double evicted_at = -1;     // an Offload's copy end, until the memory is given back
  std::vector<double> taken;  // when the receiver of each of its sends took the data
};

struct Chunk {
  int stage = -1;
  bool forward = false;   // runs the stage's forwards here
  bool backward = false;  // runs its backwards here
  bool sends_grad = false;
  Pieces pieces{};
  std::int64_t full = 0;  // a pooled slot: every piece this chunk ever allocates
  // Slots keep their memory for the next microbatch: without offload, or where the list
  // offloads none of this chunk's stashes (the executor's chunk_offloads_), since pooling
  // then holds nothing an offload would have freed.
  bool pooled = true;
  int made = 0;           // pooled slots made
  int free_pooled = 0;    // of which free
  int in_use = 0, most_in_use = 0;
};

class Replay {
 public:
  Replay(const Schedule& s, const CostModel& c, int rank, const RankReplay& r)
      : s_(s), c_(c), rank_(rank), r_(r), list_(s.lists[index(rank)]) {
    const int S = s.stages();
    const auto activation = [&](int stage) {
      return stage >= 0 && stage + 1 < S ? cost(stage).activation_bytes : 0;
    };
    for (int chunk = 0; chunk < s.chunks_on(rank); ++chunk) {
      Chunk k;
      k.stage = s.stage(rank, chunk);
      k.forward = s.forward_rank_of(k.stage) == rank;
      k.backward = s.backward_rank_of(k.stage) == rank;
      k.sends_grad = k.stage > 0 && s.backward_rank_of(k.stage - 1) != rank;
      const StageCost& sc = cost(k.stage);
      Pieces& p = k.pieces;
      p[kIn] = activation(k.stage - 1);
      p[kMid] = std::max<std::int64_t>(0, sc.stash_bytes - p[kIn]);
      p[kOut] = k.forward ? activation(k.stage) : 0;
      p[kOutGrad] = k.backward ? activation(k.stage) : 0;
      p[kInGrad] = k.backward ? std::min(p[kIn], sc.backward_bytes) : 0;
      p[kRest] = k.backward ? sc.backward_bytes - p[kInGrad] : 0;
      for (std::int64_t bytes : p) k.full += bytes;
      k.pooled = !c.memory.offloading ||
                 std::none_of(list_.begin(), list_.end(), [&](const Instruction& in) {
                   return in.op == Op::offload && in.chunk == chunk;
                 });
      any_unpooled_ = any_unpooled_ || !k.pooled;
      chunks_.push_back(k);
    }
    active_.assign(chunks_.size() * index(s.microbatches), -1);
    for (const auto& [done, sent] : r.receives)
      latest_sent_.push_back(latest_sent_.empty() ? sent : std::max(latest_sent_.back(), sent));
  }

  void run();
  std::int64_t peak() const;
  // Pooled: the slots made; otherwise the most in use at once (a chunk's own, beside pooled
  // chunks).
  int max_slots() const {
    const bool all_unpooled =
        std::none_of(chunks_.begin(), chunks_.end(), [](const Chunk& k) { return k.pooled; });
    if (all_unpooled) return max_slots_;
    int slots = 0;
    for (const Chunk& k : chunks_) slots += k.pooled ? k.made : k.most_in_use;
    return slots;
  }

 private:
  const StageCost& cost(int stage) const {
    return c_.stages.size() == 1 ? c_.stages[0] : c_.stages[index(stage)];
  }
  int& active(int chunk, int mb) {
    return active_[index(chunk) * index(s_.microbatches) + index(mb)];
  }
  void allocate(Slot& slot, Part part, double at);
  void free(Slot& slot, Part part, double at);
  bool seen_complete(double taken, double at) const;
  void test_retiring(double at);
  Slot& take(int chunk, int mb, double at);
  void retire_if_done(int chunk, int mb, double at);
  void release(std::size_t retiring, double at);
  void wait_for_stashes_taken(int chunk, double at);
  void settle_evictions(double at);
  void make_resident(Slot& slot, double at);
  void post_receives_through(long long through, std::size_t needed, double at);

  const Schedule& s_;
  const CostModel& c_;
  int rank_;
  const RankReplay& r_;
  const std::vector<Instruction>& list_;
  bool any_unpooled_ = false;
  std::vector<Chunk> chunks_;
  std::deque<Slot> slots_;  // every slot taken this step, by id (a deque: references stay valid)
  std::vector<int> active_;  // [chunk][mb] slot id, -1 for none
  std::vector<int> retiring_;
  std::vector<int> evicting_;
  std::vector<double> failed_tests_;  // when a test found a send unfinished, increasing
  std::vector<double> latest_sent_;   // [i] the latest message sent among receives 0..i
  std::vector<std::size_t> receives_;  // positions of the receives in the list
  std::size_t next_to_post_ = 0;
  std::vector<std::pair<double, std::int64_t>> events_;  // unpooled memory changes
  int in_use_ = 0, max_slots_ = 0;
};

void Replay::allocate(Slot& slot, Part part, double at) {
  if (slot.held[part]) return;
  slot.held[part] = true;
  const Chunk& k = chunks_[index(slot.chunk)];
  if (!k.pooled) events_.emplace_back(at, k.pieces[part]);
}

void Replay::free(Slot& slot, Part part, double at) {
  if (!slot.held[part]) return;
  slot.held[part] = false;
  const Chunk& k = chunks_[index(slot.chunk)];
  if (!k.pooled) events_.emplace_back(at, -k.pieces[part]);
}

// Progress strictly between the receiver taking the data and this test: an earlier test
// that failed, a blocking wait overlapping that span, or a receive ended before the test
// whose message was sent after the data was taken.
bool Replay::seen_complete(double taken, double at) const {
  const auto failed = std::upper_bound(failed_tests_.begin(), failed_tests_.end(), taken);
  if (failed != failed_tests_.end() && *failed < at) return true;
  const auto wait = std::upper_bound(
      r_.waits.begin(), r_.waits.end(), taken,
      [](double t, const std::pair<double, double>& w) { return t < w.second; });
  if (wait != r_.waits.end() && std::max(wait->first, taken) < at) return true;
  const auto before = std::lower_bound(
      r_.receives.begin(), r_.receives.end(), at,
      [](const std::pair<double, double>& r, double t) { return r.first < t; });
  if (before == r_.receives.begin()) return false;
  return latest_sent_[index(static_cast<int>(before - r_.receives.begin()) - 1)] > taken;
}

void Replay::test_retiring(double at) {
  bool unfinished = false;
  for (std::size_t i = 0; i < retiring_.size();) {
    Slot& slot = slots_[index(retiring_[i])];
    const bool done = std::all_of(slot.taken.begin(), slot.taken.end(),
                                  [&](double taken) { return seen_complete(taken, at); });
    if (!done) {
      unfinished = true;
      ++i;
      continue;
    }
    release(i, at);
  }
  if (unfinished && (failed_tests_.empty() || failed_tests_.back() < at))
    failed_tests_.push_back(at);
}

// Gives back the slot at retiring_[i], its sends complete.
void Replay::release(std::size_t i, double at) {
  Slot& slot = slots_[index(retiring_[i])];
  Chunk& chunk = chunks_[index(slot.chunk)];
  if (chunk.pooled) {
    ++chunk.free_pooled;
  } else {
    for (int part = 0; part < kParts; ++part) free(slot, static_cast<Part>(part), at);
  }
  --in_use_;
  --chunk.in_use;
  retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
}

// Before a forward-only chunk's forward: at most kForwardStashesWaiting of its stashes stay
// waiting to be taken; the executor waits for the oldest ones.
void Replay::wait_for_stashes_taken(int chunk, double at) {
  test_retiring(at);
  int waiting = 0;
  for (int id : retiring_) waiting += slots_[index(id)].chunk == chunk ? 1 : 0;
  for (std::size_t i = 0; i < retiring_.size() && waiting > kForwardStashesWaiting;) {
    if (slots_[index(retiring_[i])].chunk != chunk) {
      ++i;
      continue;
    }
    release(i, at);
    --waiting;
  }
}

Slot& Replay::take(int chunk, int mb, double at) {
  int& id = active(chunk, mb);
  if (id >= 0) return slots_[index(id)];
  test_retiring(at);
  Chunk& k = chunks_[index(chunk)];
  if (k.pooled) {
    if (k.free_pooled > 0) {
      --k.free_pooled;
    } else {
      ++k.made;
    }
  }
  max_slots_ = std::max(max_slots_, ++in_use_);
  k.most_in_use = std::max(k.most_in_use, ++k.in_use);
  id = static_cast<int>(slots_.size());
  slots_.push_back(Slot{});
  slots_.back().chunk = chunk;
  return slots_.back();
}

void Replay::retire_if_done(int chunk, int mb, double at) {
  int& id = active(chunk, mb);
  Slot& slot = slots_[index(id)];
  const Chunk& k = chunks_[index(chunk)];
  if (slot.dropped) {
    for (Part part : {kIn, kMid}) free(slot, part, at);
  } else if (k.backward) {
    if (!slot.weight_done || (k.sends_grad && !slot.grad_sent)) return;
    // Under offload the executor keeps only what its sends may still read.
    for (Part part : {kIn, kMid, kOutGrad, kRest}) free(slot, part, at);
  } else if (!slot.stash_sent) {
    return;
  }
  retiring_.push_back(id);
  id = -1;
}

void Replay::settle_evictions(double at) {
  for (std::size_t i = 0; i < evicting_.size();) {
    Slot& slot = slots_[index(evicting_[i])];
    if (slot.evicted_at > at) {
      ++i;
      continue;
    }
    free(slot, kIn, at);
    free(slot, kMid, at);
    slot.evicted_at = -1;
    evicting_.erase(evicting_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

// Prefetch, or B or W finding its stash out: a copy still going out is waited for and its
// memory given back, then the stash is allocated again.
void Replay::make_resident(Slot& slot, double at) {
  if (slot.evicted_at >= 0) {
    at = std::max(at, slot.evicted_at);
    free(slot, kIn, at);
    free(slot, kMid, at);
    slot.evicted_at = -1;
    std::erase_if(evicting_, [&](int id) { return &slots_[index(id)] == &slot; });
  }
  allocate(slot, kIn, at);
  allocate(slot, kMid, at);
}

void Replay::post_receives_through(long long through, std::size_t needed, double at) {
  const std::size_t last =
      through < 0 ? 0 : std::min(static_cast<std::size_t>(through) + 1, receives_.size());
  for (; next_to_post_ < last; ++next_to_post_) {
    const Instruction& in = list_[receives_[next_to_post_]];
    if (posted_when_reached(list_, receives_[next_to_post_]) && next_to_post_ != needed) break;
    if (in.op == Op::recv_params) continue;  // into the parameters themselves
    Slot& slot = take(in.chunk, in.mb, at);
    if (in.op == Op::recv_act) allocate(slot, kIn, at);
    if (in.op == Op::recv_grad) allocate(slot, kOutGrad, at);
    if (in.op == Op::recv_stash) {
      allocate(slot, kIn, at);
      allocate(slot, kMid, at);
    }
  }
}

void Replay::run() {
  for (std::size_t i = 0; i < list_.size(); ++i)
    if (is_recv(list_[i].op)) receives_.push_back(i);
  const long long lookahead = c_.memory.receive_lookahead;
  post_receives_through(lookahead - 1, receives_.size(), 0);
  std::size_t receive = 0;
  for (std::size_t i = 0; i < list_.size(); ++i) {
    const Instruction& in = list_[i];
    const double at = r_.reached[i], after = r_.after[i];
    if (is_recv(in.op)) {
      post_receives_through(static_cast<long long>(receive) + lookahead, receive, at);
      ++receive;
      continue;  // the executor tests nothing after a receive
    }
    if (in.op == Op::reduce_grads) continue;
    const int stage = in.chunk >= 0 ? chunks_[index(in.chunk)].stage : -1;
    switch (in.op) {
      case Op::forward: {
        if (!chunks_[index(in.chunk)].backward) wait_for_stashes_taken(in.chunk, at);
        Slot& slot = take(in.chunk, in.mb, at);
        for (Part part : {kIn, kMid, kOut}) allocate(slot, part, at);
        // With the next stage on this rank the output is copied into its input at once.
        if (stage + 1 < s_.stages() && s_.forward_rank_of(stage + 1) == rank_) {
          const int next = s_.chunk_of(stage + 1, Direction::forward);
          allocate(take(next, in.mb, after), kIn, after);
        }
        break;
      }
      case Op::backward_input: {
        Slot& slot = slots_[index(active(in.chunk, in.mb))];
        make_resident(slot, at);
        for (Part part : {kOutGrad, kInGrad, kRest}) allocate(slot, part, at);
        if (stage > 0 && s_.backward_rank_of(stage - 1) == rank_) {
          const int previous = s_.chunk_of(stage - 1, Direction::backward);
          allocate(slots_[index(active(previous, in.mb))], kOutGrad, after);
        }
        break;
      }
      case Op::backward_weight: {
        Slot& slot = slots_[index(active(in.chunk, in.mb))];
        make_resident(slot, at);
        slot.weight_done = true;
        retire_if_done(in.chunk, in.mb, after);
        break;
      }
      case Op::send_act:
      case Op::send_grad:
      case Op::send_stash: {
        Slot& slot = slots_[index(active(in.chunk, in.mb))];
        slot.taken.push_back(r_.taken[i]);
        if (in.op == Op::send_grad) slot.grad_sent = true;
        if (in.op == Op::send_stash) slot.stash_sent = true;
        if (in.op != Op::send_act) retire_if_done(in.chunk, in.mb, at);
        break;
      }
      case Op::drop_stash: {
        Slot& slot = slots_[index(active(in.chunk, in.mb))];
        slot.dropped = true;
        retire_if_done(in.chunk, in.mb, after);
        break;
      }
      case Op::offload: {
        Slot& slot = slots_[index(active(in.chunk, in.mb))];
        slot.evicted_at = r_.end[i];
        evicting_.push_back(active(in.chunk, in.mb));
        break;
      }
      case Op::prefetch:
        make_resident(slots_[index(active(in.chunk, in.mb))], std::max(at, r_.begin[i]));
        break;
      default:
        break;
    }
    // progress(): finished evictions give their memory back, retired slots are tested.
    if (c_.memory.offloading) {
      settle_evictions(after);
      test_retiring(after);
    }
  }
}

std::int64_t Replay::peak() const {
  std::int64_t level = 0, scratch = 0;
  for (const Chunk& k : chunks_) {
    const StageCost& sc = cost(k.stage);
    level += sc.parameter_bytes;
    if (k.backward)
      level += sc.gradient_bytes + sc.optimizer_state_bytes + sc.workspace_bytes;
    scratch = std::max(scratch, sc.scratch_bytes);
  }
  level += scratch;
  // A forward-only chunk's count follows its backward rank's pace: a margin, up to m and up
  // to the stashes it may keep waiting and the one it computes.
  for (const Chunk& k : chunks_)
    if (!k.backward) {
      const int most = k.pooled ? k.made : k.most_in_use;
      const int limit = std::min(s_.microbatches, kForwardStashesWaiting + 1);
      const int margin = std::min(c_.memory.forward_slot_margin, limit - most);
      level += std::max(margin, 0) * k.full;
    }
  for (const Chunk& k : chunks_)
    if (k.pooled) level += k.made * k.full;
  if (!any_unpooled_) return level;
  std::vector<std::pair<double, std::int64_t>> events = events_;
  // Frees sort before allocations at the same instant.
  std::sort(events.begin(), events.end());
  std::int64_t peak = level;
  for (const auto& [at, delta] : events) peak = std::max(peak, level += delta);
  return peak;
}

}  // namespace

SlotMemory replay_slot_memory(const Schedule& schedule, const CostModel& costs,
                              const std::vector<RankReplay>& ranks) {
  SlotMemory out;
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    Replay replay(schedule, costs, rank, ranks[index(rank)]);
    replay.run();
    out.peak_bytes.push_back(replay.peak());
    out.max_slots.push_back(replay.max_slots());
  }
  return out;
}

}  // namespace spw::sched
