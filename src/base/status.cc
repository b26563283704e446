#include "base/status.h"

#include <cstring>

namespace warren {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalid:
      return "invalid";
    case Code::kNotFound:
      return "not_found";
    case Code::kConflict:
      return "conflict";
    case Code::kQuota:
      return "quota";
    case Code::kUnauthorized:
      return "unauthorized";
    case Code::kForbidden:
      return "forbidden";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kInternal:
      return "internal";
  }
  return "internal";
}

Code CodeFromName(std::string_view name) {
  for (Code c : {Code::kInvalid, Code::kNotFound, Code::kConflict, Code::kQuota,
                 Code::kUnauthorized, Code::kForbidden, Code::kUnavailable, Code::kInternal})
    if (name == CodeName(c)) return c;
  return Code::kInternal;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s = op_;
  if (!object_.empty()) s += (s.empty() ? "`" : " `") + object_ + "`";
  if (!message_.empty()) s += (s.empty() ? "" : ": ") + message_;
  if (err_ != 0) s += std::string(s.empty() ? "" : ": ") + std::strerror(err_);
  return s;
}

Status Status::Context(const std::string& outer) const {
  if (ok()) return *this;
  Status s = *this;
  s.op_ = op_.empty() ? outer : outer + ": " + op_;
  return s;
}

Status ErrnoStatus(std::string op, std::string object, int err) {
  Code code = Code::kInternal;
  switch (err) {
    case ENOENT:
      code = Code::kNotFound;
      break;
    case EEXIST:
    case EBUSY:
      code = Code::kConflict;
      break;
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
      code = Code::kQuota;
      break;
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR:
    case ENOTDIR:
    case ELOOP:
      code = Code::kInvalid;
      break;
    case EACCES:
    case EPERM:
      code = Code::kForbidden;
      break;
    default:
      break;
  }
  return Status(code, std::move(op), std::move(object), "", err);
}

Status Invalid(std::string message, std::string object) {
  return Status(Code::kInvalid, "", std::move(object), std::move(message));
}

Status NotFound(std::string what, std::string object) {
  return Status(Code::kNotFound, std::move(what), std::move(object), "not found");
}

Status Internal(std::string op, std::string object, std::string message) {
  return Status(Code::kInternal, std::move(op), std::move(object), std::move(message));
}

}  // namespace warren
