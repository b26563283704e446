#include "base/json_fields.h"

namespace warren {

using nlohmann::json;

Status JsonFields::Object() const {
  return j_.is_object() ? Status::Ok() : Invalid(what_ + " must be a JSON object");
}

Status JsonFields::Missing(const char* key) const {
  return Invalid(what_ + ": `" + key + "` is missing");
}

Status JsonFields::Wrong(const char* key, const char* want) const {
  return Invalid(what_ + ": `" + key + "` must be " + want);
}

const json* JsonFields::Find(const char* key) {
  seen_.insert(key);
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

Status JsonFields::Int(const char* key, int64_t* out, bool required, int64_t min) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_number_integer() || v->get<int64_t>() < min)
    return Wrong(key, min == 0 ? "an integer >= 0" : "an integer in range");
  *out = v->get<int64_t>();
  return Status::Ok();
}

Status JsonFields::UInt(const char* key, uint64_t* out, bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
    return Wrong(key, "an integer >= 0");
  *out = v->get<uint64_t>();
  return Status::Ok();
}

Status JsonFields::Double(const char* key, double* out, bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_number()) return Wrong(key, "a number");
  *out = v->get<double>();
  return Status::Ok();
}

Status JsonFields::Bool(const char* key, bool* out, bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_boolean()) return Wrong(key, "true or false");
  *out = v->get<bool>();
  return Status::Ok();
}

Status JsonFields::String(const char* key, std::string* out, bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_string()) return Wrong(key, "a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

Status JsonFields::Strings(const char* key, std::vector<std::string>* out, bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_array()) return Wrong(key, "an array of strings");
  std::vector<std::string> got;
  for (const json& s : *v) {
    if (!s.is_string()) return Wrong(key, "an array of strings");
    got.push_back(s.get<std::string>());
  }
  *out = std::move(got);
  return Status::Ok();
}

Status JsonFields::StringMap(const char* key, std::map<std::string, std::string>* out,
                             bool required) {
  const json* v = Find(key);
  if (!v) return required ? Missing(key) : Status::Ok();
  if (!v->is_object()) return Wrong(key, "an object of strings");
  std::map<std::string, std::string> got;
  for (const auto& [k, s] : v->items()) {
    if (!s.is_string()) return Wrong(key, "an object of strings");
    got[k] = s.get<std::string>();
  }
  *out = std::move(got);
  return Status::Ok();
}

Status JsonFields::Value(const char* key, const json** out, bool required) {
  const json* v = Find(key);
  if (!v && required) return Missing(key);
  *out = v;
  return Status::Ok();
}

Status JsonFields::NoOthers() const {
  for (const auto& [k, v] : j_.items())
    if (!seen_.count(k)) return Invalid(what_ + ": unknown field `" + k + "`");
  return Status::Ok();
}

}  // namespace warren
