#include "runtime/pipeline_report.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/memory_ledger.hpp"
#include "offload/transfer_rate.hpp"
#include "partition/simulator.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/process_memory.hpp"

namespace spw {
namespace {

nlohmann::json by_category(const std::array<std::size_t, kMemoryCategoryCount>& bytes) {
  nlohmann::json out = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    out[std::string(memory_category_name(c))] = bytes[static_cast<std::size_t>(c)];
  }
  return out;
}

}  // namespace

double median_after_first(const std::vector<double>& values) {
  std::vector<double> v(values.begin() + (values.size() > 1 ? 1 : 0), values.end());
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// Ping-pongs between neighbours along one axis of the layout: position `index` of `count`
// talks to the rank `stride` world ranks away. Even positions pair up first, then odd
// ones, so each rank is in one pair at a time. The mean over the pairs, on every rank.
Result<LinkEstimate> measure_axis(MPI_Comm world, int w, int index, int count, int stride,
                                  long long bytes) {
  double sums[3] = {0, 0, 0};  // latency, seconds for `bytes`, pairs measured
  for (int phase = 0; phase < 2; ++phase) {
    const bool left = index % 2 == phase && index + 1 < count;
    const bool right = index >= 1 && (index - 1) % 2 == phase;
    if (!left && !right) continue;
    const int peer = left ? w + stride : w - stride;
    SPW_ASSIGN_OR_RETURN(double latency, ping_pong_seconds(world, peer, left, 8, 20));
    SPW_ASSIGN_OR_RETURN(double big, ping_pong_seconds(world, peer, left, bytes, 5));
    if (left) {
      sums[0] += latency;
      sums[1] += big;
      sums[2] += 1;
    }
  }
  double total[3] = {0, 0, 0};
  SPW_TRY(mpi_check(MPI_Allreduce(sums, total, 3, MPI_DOUBLE, MPI_SUM, world), "link probe"));
  LinkEstimate link;
  if (total[2] == 0) return link;
  link.latency_s = total[0] / total[2];
  const double transfer = std::max(total[1] / total[2] - link.latency_s, 1e-9);
  link.bandwidth_bytes_per_s = static_cast<double>(bytes) / transfer;
  return link;
}

}  // namespace

Result<LinkEstimates> measure_links(PipelineExecutor& executor, MPI_Comm world) {
  const PipelineLayout& layout = executor.layout();
  long long mine = executor.activation_bytes(0);
  long long bytes = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&mine, &bytes, 1, MPI_LONG_LONG, MPI_MAX, world), "link probe"));
  LinkEstimates links;
  SPW_ASSIGN_OR_RETURN(links.pipeline,
                       measure_axis(world, executor.world_rank(), executor.pipeline_rank(),
                                    layout.ranks_in_pipeline(), 1,
                                    std::max<long long>(bytes, kLinkProbeMinimumBytes)));
  // Replicas exchange gradients: probe with a megabyte, a typical all-reduce segment.
  SPW_ASSIGN_OR_RETURN(links.replica,
                       measure_axis(world, executor.world_rank(), executor.replica(),
                                    layout.replicas, layout.ranks_in_pipeline(),
                                    kLinkProbeMinimumBytes));
  return links;
}

namespace {

// Per node, the capacity tier's rate over its ranks' copies together (offload/transfer_rate.hpp):
// with a file tier the node's ranks share one device, and this is the rate to set beside its
// sequential bandwidth. Collective over `world`; the array (empty without offload) on rank 0.
Result<nlohmann::json> offload_rate_by_node(const OffloadTotals& offload, MPI_Comm world,
                                            int world_rank, const std::vector<int>& node_of) {
  std::vector<double> mine;
  for (const offload::EngineTransfer& t : offload.transfers) {
    mine.insert(mine.end(), {t.start_s, t.end_s, static_cast<double>(t.bytes)});
  }
  int size = 0;
  SPW_TRY(mpi_check(MPI_Comm_size(world, &size), "sizing the world"));
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world_rank == 0 ? size : 0));
  SPW_TRY(mpi_check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world),
                    "gathering offload copy counts"));
  std::vector<int> displs(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<double> all(world_rank == 0 && size > 0
                              ? static_cast<std::size_t>(displs.back() + counts.back())
                              : 0);
  SPW_TRY(mpi_check(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                                displs.data(), MPI_DOUBLE, 0, world),
                    "gathering offload copies"));
  nlohmann::json out = nlohmann::json::array();
  if (world_rank != 0 || offload.tier.empty()) return out;
  const int node_count =
      node_of.empty() ? 0 : *std::max_element(node_of.begin(), node_of.end()) + 1;
  for (int node = 0; node < node_count; ++node) {
    std::vector<offload::EngineTransfer> copies;
    nlohmann::json members = nlohmann::json::array();
    for (int r = 0; r < size; ++r) {
      if (node_of[static_cast<std::size_t>(r)] != node) continue;
      members.push_back(r);
      const auto first = static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]);
      for (int k = 0; k < counts[static_cast<std::size_t>(r)]; k += 3) {
        const std::size_t i = first + static_cast<std::size_t>(k);
        copies.push_back({all[i], all[i + 1], static_cast<std::uint64_t>(all[i + 2])});
      }
    }
    const offload::CombinedRate rate = offload::combined_rate(std::move(copies));
    out.push_back({{"node", node},
                   {"ranks", members},
                   {"bytes", rate.bytes},
                   {"busy_seconds", rate.busy_s},
                   {"gb_per_s", rate.gb_per_s()}});
  }
  return out;
}

}  // namespace

Result<nlohmann::json> pipeline_report(PipelineExecutor& executor, MPI_Comm world,
                                       const LinkEstimates& links,
                                       const std::vector<int>& node_of) {
  const LinkEstimate& link = links.pipeline;
  const PipelineLayout& layout = executor.layout();
  const int size = layout.world_size();
  const auto v = executor.local_chunks();
  const auto& metrics = executor.step_metrics();
  const std::size_t steps = metrics.size();

  // Per rank: per-step busy and span, then medians, memory, then per-chunk costs.
  constexpr std::size_t kChunkFields = 7;
  std::vector<double> mine;
  for (const auto& m : metrics) mine.push_back(m.busy_s);
  for (const auto& m : metrics) mine.push_back(m.span_s);
  std::vector<double> busy, span, wait, optimizer, offload_wait, sent, allocated;
  for (const auto& m : metrics) {
    busy.push_back(m.busy_s);
    span.push_back(m.span_s);
    wait.push_back(m.recv_wait_s);
    optimizer.push_back(m.optimizer_s);
    offload_wait.push_back(m.offload_wait_s);
    sent.push_back(static_cast<double>(m.sent_bytes));
    allocated.push_back(static_cast<double>(m.allocated_bytes));
  }
  mine.push_back(median_after_first(busy));
  mine.push_back(median_after_first(span));
  mine.push_back(median_after_first(wait));
  mine.push_back(median_after_first(optimizer));
  const OffloadTotals offload = executor.offload_totals();
  mine.push_back(median_after_first(offload_wait));
  mine.push_back(static_cast<double>(offload.engine.bytes_evicted));
  mine.push_back(static_cast<double>(offload.engine.bytes_prefetched));
  mine.push_back(offload.engine.evict_seconds);
  mine.push_back(offload.engine.prefetch_seconds);
  mine.push_back(static_cast<double>(offload.failed_evictions));
  mine.push_back(offload.engine.evict_cpu_seconds);
  mine.push_back(offload.engine.prefetch_cpu_seconds);
  mine.push_back(offload.engine_pu);
  mine.push_back(offload.engine_shares_core ? 1 : 0);
  mine.push_back(offload.engine.map_seconds);
  mine.push_back(offload.engine.map_cpu_seconds);
  mine.push_back(median_after_first(sent));
  mine.push_back(median_after_first(allocated));
  const LedgerSnapshot memory = MemoryLedger::process().snapshot();
  mine.push_back(static_cast<double>(memory.peak_total));
  for (MemoryCategory c : kAllMemoryCategories)
    mine.push_back(static_cast<double>(memory.peak_of(c)));
  mine.push_back(static_cast<double>(peak_resident_bytes()));
  for (std::size_t c = 0; c < v; ++c) {
    const ChunkTiming& t = executor.chunk_timings()[c];
    const double n = static_cast<double>(std::max<std::int64_t>(t.samples, 1));
    mine.push_back(t.forward_s / static_cast<double>(std::max<std::int64_t>(t.forward_samples, 1)));
    mine.push_back(t.backward_input_s / n);
    mine.push_back(t.backward_weight_s / n);
    mine.push_back(t.reduce_samples > 0 ? t.reduce_s / static_cast<double>(t.reduce_samples) : 0);
    mine.push_back(static_cast<double>(executor.stash_bytes(static_cast<int>(c))));
    mine.push_back(static_cast<double>(executor.parameter_bytes(static_cast<int>(c))));
    mine.push_back(static_cast<double>(executor.activation_bytes(static_cast<int>(c))));
  }
  const std::size_t stride = mine.size();
  std::vector<double> all(executor.world_rank() == 0 ? stride * static_cast<std::size_t>(size) : 0);
  SPW_TRY(mpi_check(MPI_Gather(mine.data(), static_cast<int>(stride), MPI_DOUBLE, all.data(),
                               static_cast<int>(stride), MPI_DOUBLE, 0, world),
                    "gathering the pipeline report"));
  SPW_ASSIGN_OR_RETURN(std::vector<std::string> engine_binding,
                       gather_strings(world, offload.engine_binding));
  SPW_ASSIGN_OR_RETURN(std::vector<std::string> first_failed_eviction,
                       gather_strings(world, offload.first_failed_eviction));
  SPW_ASSIGN_OR_RETURN(const nlohmann::json offload_by_node,
                       offload_rate_by_node(offload, world, executor.world_rank(), node_of));
  if (executor.world_rank() != 0) return nlohmann::json();

  auto at = [&](int rank, std::size_t i) {
    return all[static_cast<std::size_t>(rank) * stride + i];
  };
  const std::size_t medians = 2 * steps;
  const std::size_t offload_at = medians + 4;
  const std::size_t sent_at = offload_at + 12;
  const std::size_t memory_at = sent_at + 2;
  const std::size_t rss_at = memory_at + 1 + kMemoryCategoryCount;
  const std::size_t chunks_at = rss_at + 1;

  std::vector<double> bubble_per_step;
  std::vector<double> iteration_per_step;
  for (std::size_t k = 0; k < steps; ++k) {
    double busy_sum = 0, longest = 0;
    for (int r = 0; r < size; ++r) {
      busy_sum += at(r, k);
      longest = std::max(longest, at(r, steps + k));
    }
    iteration_per_step.push_back(longest);
    bubble_per_step.push_back(longest > 0 ? 1 - busy_sum / (size * longest) : 0);
  }

  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < size; ++r) {
    std::array<std::size_t, kMemoryCategoryCount> peak{};
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      peak[c] = static_cast<std::size_t>(at(r, memory_at + 1 + c));
    }
    // Per step, so a reader can tell the steps whose ranks ran at one pace (what closed forms
    // assume) from those where a core ran slower for a while.
    nlohmann::json busy_by_step = nlohmann::json::array();
    for (std::size_t k = 0; k < steps; ++k) busy_by_step.push_back(at(r, k));
    const std::string& first_failure = first_failed_eviction[static_cast<std::size_t>(r)];
    ranks.push_back({{"rank", r},
                     {"pipeline_rank", layout.pipeline_rank_of(r)},
                     {"replica", layout.replica_of(r)},
                     {"busy_seconds", at(r, medians)},
                     {"busy_seconds_by_step", busy_by_step},
                     {"span_seconds", at(r, medians + 1)},
                     {"receive_wait_seconds", at(r, medians + 2)},
                     {"optimizer_seconds", at(r, medians + 3)},
                     {"offload",
                      {{"wait_seconds_per_step", at(r, offload_at)},
                       {"bytes_evicted", at(r, offload_at + 1)},
                       {"bytes_prefetched", at(r, offload_at + 2)},
                       {"evict_seconds", at(r, offload_at + 3)},
                       {"prefetch_seconds", at(r, offload_at + 4)},
                       {"failed_evictions", at(r, offload_at + 5)},
                       {"first_failed_eviction", first_failure},
                       {"evict_cpu_seconds", at(r, offload_at + 6)},
                       {"prefetch_cpu_seconds", at(r, offload_at + 7)},
                       {"engine_pu", static_cast<int>(at(r, offload_at + 8))},
                       {"engine_shares_core", at(r, offload_at + 9) != 0},
                       {"prefetch_map_seconds", at(r, offload_at + 10)},
                       {"prefetch_map_cpu_seconds", at(r, offload_at + 11)},
                       {"engine_binding", engine_binding[static_cast<std::size_t>(r)]}}},
                     {"sent_bytes_per_step", at(r, sent_at)},
                     {"allocated_bytes_per_step", at(r, sent_at + 1)},
                     {"peak_bytes", static_cast<std::size_t>(at(r, memory_at))},
                     {"peak_bytes_by_category", by_category(peak)},
                     {"peak_rss_bytes", static_cast<std::size_t>(at(r, rss_at))}});
  }

  // The simulator, fed with this run's costs: stage s's figures averaged over its replicas,
  // forward figures from the rank running its forwards and backward ones from the rank
  // running its backwards (the same rank but under PipeFB).
  const int P = layout.pipeline_ranks;
  const int width = layout.ranks_in_pipeline();
  const sched::Schedule& schedule = executor.schedule();
  const int S = layout.stage_count();
  sched::CostModel costs;
  nlohmann::json stage_costs = nlohmann::json::array();
  const double state_per_parameter_byte =
      executor.settings().train.optimizer.kind == "adamw"
          ? 2.0
          : (executor.settings().train.optimizer.momentum != 0 ? 1.0 : 0.0);
  for (int s = 0; s < S; ++s) {
    sched::StageCost cost;
    const sched::StagePlacement place = schedule.placement_of(s);
    double values[kChunkFields] = {};
    for (int replica = 0; replica < layout.replicas; ++replica) {
      const int forward_rank = replica * width + place.forward_rank;
      const int backward_rank = replica * width + place.backward_rank;
      for (std::size_t f = 0; f < kChunkFields; ++f) {
        // Forward time and output activation: where forwards run; the rest where
        // backwards run; the stash as the larger of the two ends' slots.
        const bool forward_field = f == 0 || f == 6;
        const int r = forward_field ? forward_rank : backward_rank;
        const auto c = static_cast<std::size_t>(forward_field ? place.forward_chunk
                                                                : place.backward_chunk);
        double value = at(r, chunks_at + c * kChunkFields + f);
        if (f == 4) {
          value = std::max(
              value,
              at(forward_rank,
                 chunks_at + static_cast<std::size_t>(place.forward_chunk) * kChunkFields + f));
        }
        values[f] += value / layout.replicas;
      }
    }
    cost.forward_s = values[0];
    cost.backward_input_s = values[1];
    cost.backward_weight_s = values[2];
    // The measured all-reduce span includes waiting for the slowest replica, which the
    // simulator models by itself; price the transfer alone, as a ring over the replicas.
    const double R = layout.replicas;
    if (R > 1 && links.replica.bandwidth_bytes_per_s > 0) {
      cost.reduce_grads_s = 2 * (R - 1) * (links.replica.latency_s +
                                           values[5] / (R * links.replica.bandwidth_bytes_per_s));
    }
    cost.stash_bytes = static_cast<std::int64_t>(values[4]);
    cost.parameter_bytes = static_cast<std::int64_t>(values[5]);
    cost.gradient_bytes = cost.parameter_bytes;
    cost.optimizer_state_bytes =
        static_cast<std::int64_t>(state_per_parameter_byte * values[5]);
    cost.activation_bytes = static_cast<std::int64_t>(values[6]);
    costs.stages.push_back(cost);
    stage_costs.push_back({{"stage", s},
                           {"blocks", {layout.stages[static_cast<std::size_t>(s)].first,
                                       layout.stages[static_cast<std::size_t>(s)].last}},
                           {"forward_seconds", cost.forward_s},
                           {"backward_input_seconds", cost.backward_input_s},
                           {"backward_weight_seconds", cost.backward_weight_s},
                           {"reduce_seconds", cost.reduce_grads_s},
                           {"measured_reduce_span_seconds", values[3]},
                           {"slot_bytes", cost.stash_bytes},
                           {"parameter_bytes", cost.parameter_bytes}});
  }
  // The executor reports a microbatch slot's whole size, not its parts: keep the slot's
  // size (what pooled slots hold) by counting the input's gradient as the backward buffers
  // and the rest but the output and its gradient as stash. Workspace and scratch are not
  // known here, so the prediction leaves them out (the planner's has them, from a profile).
  for (int s = 0; s < S; ++s) {
    sched::StageCost& cost = costs.stages[static_cast<std::size_t>(s)];
    const std::int64_t input =
        s > 0 ? costs.stages[static_cast<std::size_t>(s - 1)].activation_bytes : 0;
    const std::int64_t output = s + 1 < S ? cost.activation_bytes : 0;
    cost.backward_bytes = input;
    cost.stash_bytes = std::max<std::int64_t>(0, cost.stash_bytes - 2 * output - input);
  }
  costs.memory.receive_lookahead = executor.settings().receive_lookahead;
  costs.memory.offloading = executor.settings().offload.tier != OffloadTier::none;
  if (link.bandwidth_bytes_per_s > 0) {
    costs.link.bandwidth_bytes_per_s = link.bandwidth_bytes_per_s;
    costs.link.latency_s = link.latency_s;
  }
  double optimizer_s = 0;
  for (int r = 0; r < size; ++r) optimizer_s = std::max(optimizer_s, at(r, medians + 3));
  costs.optimizer_step_s = optimizer_s;

  nlohmann::json predicted;
  auto simulation = sched::simulate(executor.schedule(), costs);
  if (simulation.ok()) {
    predicted = {{"iteration_seconds", simulation->iteration_s},
                 {"bubble_fraction", simulation->bubble_fraction},
                 {"busy_seconds_by_pipeline_rank", simulation->busy_s},
                 {"peak_bytes_by_pipeline_rank", simulation->peak_memory_bytes},
                 {"max_live_stashes_by_pipeline_rank", simulation->max_live_stashes},
                 {"slots_by_pipeline_rank", simulation->max_slots}};
  } else {
    predicted = {{"error", simulation.status().message()}};
  }
  // The same costs with free links between stages (a replica all-reduce keeps its price):
  // what the stages' own costs (their imbalance) add to a closed form, apart from what the
  // transfers add.
  sched::CostModel free_links = costs;
  free_links.link = {};
  free_links.links.clear();
  auto free_simulation = sched::simulate(executor.schedule(), free_links);
  if (free_simulation.ok()) {
    predicted["free_links"] = {{"iteration_seconds", free_simulation->iteration_s},
                               {"bubble_fraction", free_simulation->bubble_fraction}};
  }
  predicted["links"] = {
      {"pipeline", {{"bandwidth_bytes_per_second", link.bandwidth_bytes_per_s},
                    {"latency_seconds", link.latency_s}}},
      {"replica", {{"bandwidth_bytes_per_second", links.replica.bandwidth_bytes_per_s},
                   {"latency_seconds", links.replica.latency_s}}}};
  predicted["stage_costs"] = stage_costs;

  nlohmann::json stages = nlohmann::json::array();
  for (const StageRange& range : layout.stages) stages.push_back({range.first, range.last});
  return nlohmann::json{
      // The model as built, with the cuts and head chunks a plan chose ("auto" in the job).
      {"model", executor.settings().train.model.describe()},
      {"layout",
       {{"pipeline_ranks", P},
        {"ranks_per_stage", layout.ranks_per_stage},
        {"replicas", layout.replicas},
        {"chunks", layout.chunks},
        {"schedule", layout.schedule},
        {"microbatches_per_replica", layout.microbatches},
        {"microbatch_samples", layout.microbatch_samples},
        {"stages", stages}}},
      {"measured",
       {{"iteration_seconds", median_after_first(iteration_per_step)},
        {"bubble_fraction", median_after_first(bubble_per_step)},
        {"bubble_fraction_by_step", bubble_per_step},
        {"offload_by_node", offload_by_node},
        {"ranks", ranks}}},
      {"predicted", predicted}};
}

Result<std::vector<TraceEvent>> gather_trace(const PipelineExecutor& executor, MPI_Comm world) {
  static_assert(std::is_trivially_copyable_v<TraceEvent>, "events travel as bytes");
  const std::vector<TraceEvent>& mine = executor.trace_events();
  const int my_bytes = static_cast<int>(mine.size() * sizeof(TraceEvent));
  int size = 0;
  MPI_Comm_size(world, &size);
  std::vector<int> counts(static_cast<std::size_t>(size), 0);
  SPW_TRY(mpi_check(MPI_Gather(&my_bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world),
                    "gathering the trace"));
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  const bool root = executor.world_rank() == 0;
  std::vector<TraceEvent> all(root ? static_cast<std::size_t>(offsets.back() + counts.back()) /
                                         sizeof(TraceEvent)
                                   : 0);
  SPW_TRY(mpi_check(MPI_Gatherv(mine.data(), my_bytes, MPI_BYTE, all.data(), counts.data(),
                                offsets.data(), MPI_BYTE, 0, world),
                    "gathering the trace"));
  return all;
}

}  // namespace spw
