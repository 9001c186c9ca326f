#include "memory_ledger.hpp"

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace spw {

std::optional<MemoryCategory> memory_category_from_name(std::string_view name) {
  for (MemoryCategory c : kAllMemoryCategories) {
    if (memory_category_name(c) == name) return c;
  }
  return std::nullopt;
}

MemoryLedger& MemoryLedger::process() {
  static MemoryLedger ledger;
  return ledger;
}

Status MemoryLedger::reserve(MemoryCategory category, std::size_t bytes) {
  std::unique_lock lock(mutex_);
  const bool over =
      (state_.cap && state_.current_total + bytes > *state_.cap) || over_node_budget_locked(bytes);
  if (over && pressure_handler_ && !relieving_ &&
      pressure_thread_ == std::this_thread::get_id()) {
    // A copy of the handler: it may clear or replace itself while it runs.
    const PressureHandler handler = pressure_handler_;
    relieving_ = true;
    lock.unlock();
    handler(bytes);
    lock.lock();
    relieving_ = false;
  }
  return reserve_locked(category, bytes);
}

Status MemoryLedger::reserve_locked(MemoryCategory category, std::size_t bytes) {
  const std::size_t total = state_.current_total + bytes;
  if (state_.cap && total > *state_.cap) {
    return error(StatusCode::memory_cap,
                 "memory cap exceeded: need " + std::to_string(bytes) + " bytes for " +
                     std::string(memory_category_name(category)) + ", cap " +
                     std::to_string(*state_.cap) + ", in use " +
                     std::to_string(state_.current_total));
  }
  SPW_TRY(take_from_node_budget_locked(category, bytes));
  const int i = static_cast<int>(category);
  state_.current[i] += bytes;
  state_.current_total = total;
  state_.reserved_total += bytes;
  if (state_.current[i] > state_.peak[i]) state_.peak[i] = state_.current[i];
  if (total > state_.peak_total) state_.peak_total = total;
  return Status::success();
}

bool MemoryLedger::over_node_budget_locked(std::size_t bytes) const {
  if (!node_budget_) return false;
  const std::atomic_ref<std::uint64_t> in_use(*node_budget_->shared_in_use);
  return in_use.load() + bytes > node_budget_->bytes;
}

Status MemoryLedger::take_from_node_budget_locked(MemoryCategory category, std::size_t bytes) {
  if (!node_budget_) return Status::success();
  std::atomic_ref<std::uint64_t> in_use(*node_budget_->shared_in_use);
  std::uint64_t held = in_use.load();
  // Another rank may take from the counter between the check and the update: retry then.
  while (held + bytes <= node_budget_->bytes) {
    if (in_use.compare_exchange_weak(held, held + bytes)) return Status::success();
  }
  return node_budget_exceeded_locked(
      format_bytes(bytes) + " for " + std::string(memory_category_name(category)), held);
}

Status MemoryLedger::node_budget_exceeded_locked(const std::string& what,
                                                 std::uint64_t held) const {
  const std::string holders =
      held == 0 ? ""
      : node_budget_->ranks == 1
          ? " and this rank holds "
          : " and its " + std::to_string(node_budget_->ranks) + " ranks hold ";
  return error(StatusCode::out_of_memory,
               "this node's memory exceeded: need " + what + ", the node's budget is " +
                   format_bytes(node_budget_->bytes) + " (" + node_budget_->source + ")" + holders +
                   (held == 0 ? "" : format_bytes(static_cast<std::size_t>(held))) +
                   ": spread the model over more ranks or nodes (parallel.stages), or cap each "
                   "rank (memory.cap) and offload its stashes (offload.tier)");
}

Status MemoryLedger::check_node_headroom(std::size_t bytes, const std::string& what) const {
  std::lock_guard lock(mutex_);
  if (!node_budget_) return Status::success();
  const std::uint64_t held = std::atomic_ref<std::uint64_t>(*node_budget_->shared_in_use).load();
  if (held + bytes <= node_budget_->bytes) return Status::success();
  return node_budget_exceeded_locked(what, held);
}

std::optional<std::size_t> MemoryLedger::node_headroom() const {
  std::lock_guard lock(mutex_);
  if (!node_budget_) return std::nullopt;
  const std::uint64_t held = std::atomic_ref<std::uint64_t>(*node_budget_->shared_in_use).load();
  return held < node_budget_->bytes ? node_budget_->bytes - static_cast<std::size_t>(held) : 0;
}

std::string MemoryLedger::node_budget_text() const {
  std::lock_guard lock(mutex_);
  if (!node_budget_) return "";
  return format_bytes(node_budget_->bytes) + ", " + node_budget_->source;
}

Status MemoryLedger::set_node_budget(std::optional<NodeMemoryBudget> budget) {
  std::lock_guard lock(mutex_);
  if (budget && (budget->shared_in_use == nullptr ||
                 reinterpret_cast<std::uintptr_t>(budget->shared_in_use) %
                         std::atomic_ref<std::uint64_t>::required_alignment !=
                     0)) {
    return error(StatusCode::invalid_argument,
                 "a node memory budget needs a shared counter aligned to 8 bytes");
  }
  if (node_budget_) {
    std::atomic_ref<std::uint64_t>(*node_budget_->shared_in_use).fetch_sub(state_.current_total);
  }
  node_budget_ = std::move(budget);
  if (node_budget_) {
    std::atomic_ref<std::uint64_t>(*node_budget_->shared_in_use).fetch_add(state_.current_total);
  }
  return Status::success();
}

bool MemoryLedger::has_node_budget() const {
  std::lock_guard lock(mutex_);
  return node_budget_.has_value();
}

void MemoryLedger::set_pressure_handler(const void* owner, PressureHandler handler) {
  std::lock_guard lock(mutex_);
  pressure_handler_ = std::move(handler);
  pressure_owner_ = owner;
  pressure_thread_ = std::this_thread::get_id();
}

void MemoryLedger::clear_pressure_handler(const void* owner) {
  std::lock_guard lock(mutex_);
  if (pressure_owner_ != owner) return;
  pressure_handler_ = nullptr;
  pressure_owner_ = nullptr;
  pressure_thread_ = std::thread::id();
}

void MemoryLedger::release(MemoryCategory category, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const int i = static_cast<int>(category);
  const std::size_t released = bytes < state_.current[i] ? bytes : state_.current[i];
  state_.current[i] -= released;
  state_.current_total -= released;
  if (node_budget_) {
    std::atomic_ref<std::uint64_t>(*node_budget_->shared_in_use).fetch_sub(released);
  }
}

Status MemoryLedger::set_cap(std::optional<std::size_t> cap) {
  std::lock_guard lock(mutex_);
  if (cap && state_.current_total > *cap) {
    return error(StatusCode::memory_cap,
                 "memory cap " + std::to_string(*cap) + " bytes is below the " +
                     std::to_string(state_.current_total) + " bytes already in use");
  }
  state_.cap = cap;
  return Status::success();
}

std::optional<std::size_t> MemoryLedger::cap() const {
  std::lock_guard lock(mutex_);
  return state_.cap;
}

LedgerSnapshot MemoryLedger::snapshot() const {
  std::lock_guard lock(mutex_);
  return state_;
}

std::size_t MemoryLedger::current_total() const {
  std::lock_guard lock(mutex_);
  return state_.current_total;
}

std::size_t MemoryLedger::peak_total() const {
  std::lock_guard lock(mutex_);
  return state_.peak_total;
}

std::size_t MemoryLedger::reserved_total() const {
  std::lock_guard lock(mutex_);
  return state_.reserved_total;
}

void MemoryLedger::reset_peaks() {
  std::lock_guard lock(mutex_);
  state_.peak = state_.current;
  state_.peak_total = state_.current_total;
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof text, value < 10 ? "%.2f %s" : "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

Result<std::size_t> parse_bytes(const std::string& text) {
  auto bad = [&] {
    return error(StatusCode::invalid_argument,
                 "cannot read '" + text + "' as a byte count: write e.g. 4096, 512MiB or 8GiB");
  };
  std::size_t pos = 0;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  const std::size_t number_begin = pos;
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
    ++pos;
  }
  if (pos == number_begin) return bad();
  double number = 0;
  try {
    number = std::stod(text.substr(number_begin, pos - number_begin));
  } catch (...) {
    return bad();
  }
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  std::string suffix;
  for (; pos < text.size(); ++pos) {
    if (std::isspace(static_cast<unsigned char>(text[pos]))) break;
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[pos])));
  }
  for (; pos < text.size(); ++pos) {
    if (!std::isspace(static_cast<unsigned char>(text[pos]))) return bad();
  }
  double scale = 1;
  if (suffix.empty() || suffix == "B") {
    scale = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    scale = 1024.0;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    scale = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return bad();
  }
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return bad();
  return static_cast<std::size_t>(std::llround(bytes));
}

}  // namespace spw
