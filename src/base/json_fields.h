// JsonFields: reads the fields of one JSON object by name, type-checked, and at the end
// refuses any field it was not asked for. Records and wire messages that cross a process
// boundary are parsed with it, so that a field this version does not know, a missing one or a
// wrong type is an error naming the field, never a silent default.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren {

class JsonFields {
 public:
  // `what` names the object in errors ("node record", "exec request").
  JsonFields(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status Object() const;
  // Each reads `key` into *out. Absent: an error if `required`, else *out is left as it is.
  Status Int(const char* key, int64_t* out, bool required = true, int64_t min = 0);
  Status UInt(const char* key, uint64_t* out, bool required = true);
  Status Double(const char* key, double* out, bool required = true);
  Status Bool(const char* key, bool* out, bool required = false);
  Status String(const char* key, std::string* out, bool required = true);
  Status Strings(const char* key, std::vector<std::string>* out, bool required = false);
  Status StringMap(const char* key, std::map<std::string, std::string>* out, bool required = false);
  // A nested value (any type) for the caller to read; null when absent and not required.
  Status Value(const char* key, const nlohmann::json** out, bool required = true);
  // Every field of the object was read.
  Status NoOthers() const;

  const std::string& what() const { return what_; }

 private:
  Status Missing(const char* key) const;
  Status Wrong(const char* key, const char* want) const;
  // The field, or null (absent); marks it read.
  const nlohmann::json* Find(const char* key);

  const nlohmann::json& j_;
  const std::string what_;
  std::set<std::string> seen_;
};

}  // namespace warren
