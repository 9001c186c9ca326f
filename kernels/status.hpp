// Status: how every fallible spillway call reports failure. The library never throws across
// its API, never exits and never aborts: callers (the CLI, drivers, the C ABI) decide.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace spw {

enum class StatusCode {
  ok = 0,
  invalid_argument,  // a value out of range or an inconsistent combination
  shape_mismatch,    // tensor shapes that do not fit the operation
  out_of_memory,     // the operating system refused an allocation
  memory_cap,        // the rank's memory cap would be exceeded
  io_error,          // a file could not be read or written
  not_found,         // a file, key or dataset that does not exist
  unsupported,       // asked for something this machine or build cannot do
  config_error,      // a job file or option that is malformed
  communication,     // MPI or another rank failed
  internal,          // a broken invariant inside spillway: a bug
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status success() { return {}; }
  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Fix of "what went wrong" and "where": "loading x.h5: dataset y not found".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status error(StatusCode code, std::string message) { return {code, std::move(message)}; }

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status success;
    return ok() ? success : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace spw

// Returns early with the Status of a failed call.
#define SPW_TRY(expr)                         \
  do {                                        \
    ::spw::Status spw_try_status_ = (expr);   \
    if (!spw_try_status_.ok()) return spw_try_status_; \
  } while (0)

#define SPW_CONCAT_INNER(a, b) a##b
#define SPW_CONCAT(a, b) SPW_CONCAT_INNER(a, b)
#define SPW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
// Declares or assigns lhs from a Result, returning its Status on failure.
#define SPW_ASSIGN_OR_RETURN(lhs, expr) \
  SPW_ASSIGN_OR_RETURN_IMPL(SPW_CONCAT(spw_result_, __LINE__), lhs, expr)
