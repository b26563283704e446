// Status and Result<T>: the one error type of Warren.
//
// A Status names what failed (the operation), what it failed on (the object) and why (an
// errno and/or a message), plus an API-level code that maps onto the HTTP contract's error
// codes. Library code returns these; nothing throws across module boundaries.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace warren {

enum class Code {
  kOk,
  kInvalid,       // the request is malformed or refers to something impossible
  kNotFound,      // the named object does not exist (or is invisible to the caller)
  kConflict,      // the object exists or is in a state that forbids the operation
  kQuota,         // a limit was reached
  kUnauthorized,  // no or a wrong credential
  kForbidden,     // a credential without the right scope
  kUnavailable,   // the service cannot do it now (retry may help)
  kInternal,      // the environment or a bug
};

// The contract's name for a code ("not_found", ...).
const char* CodeName(Code code);
// The code a name stands for (kInternal for a name no code has).
Code CodeFromName(std::string_view name);

// [[nodiscard]]: an error dropped on the floor is a bug; `(void)` says it is meant.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string op, std::string object, std::string message, int err = 0)
      : code_(code),
        err_(err),
        op_(std::move(op)),
        object_(std::move(object)),
        message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  int err() const { return err_; }  // errno, 0 when none
  const std::string& op() const { return op_; }
  const std::string& object() const { return object_; }
  const std::string& message() const { return message_; }

  // "op `object`: message: strerror(errno)" — what we log and what the API returns.
  std::string ToString() const;

  // Prefixes the operation with an outer context ("create sandbox: mount layer ...").
  Status Context(const std::string& outer) const;

  // For a quota or unavailable status: when a retry may succeed, in seconds (0: not said).
  // The API answers it as Retry-After.
  int retry_after_s() const { return retry_after_s_; }
  Status WithRetryAfter(int seconds) const {
    Status s = *this;
    s.retry_after_s_ = seconds;
    return s;
  }

 private:
  Code code_ = Code::kOk;
  int err_ = 0;
  std::string op_;
  std::string object_;
  std::string message_;
  int retry_after_s_ = 0;
};

// A failed system call: captures errno at the call site. The code is derived from errno
// (ENOENT -> not_found, EEXIST/EBUSY -> conflict, ENOSPC/EDQUOT -> quota, else internal).
Status ErrnoStatus(std::string op, std::string object, int err = errno);
Status Invalid(std::string message, std::string object = "");
Status NotFound(std::string what, std::string object);
Status Internal(std::string op, std::string object, std::string message);

template <typename T>
class [[nodiscard]] Result {
 public:
  // Default-constructed results are an internal error: needed by coroutine plumbing that
  // default-constructs values before filling them.
  Result() : v_(Status(Code::kInternal, "result", "", "unset")) {}
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) {}

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace warren

// Returns early with the status of an expression that failed.
#define WARREN_RETURN_IF_ERROR(expr) \
  do {                               \
    ::warren::Status _st = (expr);   \
    if (!_st.ok()) return _st;       \
  } while (0)

#define WARREN_CONCAT_INNER(a, b) a##b
#define WARREN_CONCAT(a, b) WARREN_CONCAT_INNER(a, b)
// auto x = WARREN_TRY(ResultExpr);  — GNU statement expression, g++ and clang support it.
#define WARREN_TRY(expr)                  \
  ({                                      \
    auto _res = (expr);                   \
    if (!_res.ok()) return _res.status(); \
    std::move(_res).value();              \
  })
