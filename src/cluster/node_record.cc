#include "cluster/node_record.h"

namespace warren::cluster {

using nlohmann::json;

Resources& Resources::operator+=(const Resources& o) {
  cpu_milli += o.cpu_milli;
  memory_mb += o.memory_mb;
  disk_mb += o.disk_mb;
  return *this;
}

Resources& Resources::operator-=(const Resources& o) {
  cpu_milli -= o.cpu_milli;
  memory_mb -= o.memory_mb;
  disk_mb -= o.disk_mb;
  return *this;
}

Resources Resources::operator*(int64_t n) const {
  return {cpu_milli * n, memory_mb * n, disk_mb * n};
}

bool ValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

namespace {

// Reads the fields of one JSON object by name and, at the end, refuses any it did not read.
class Fields {
 public:
  Fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status Object() const {
    return j_.is_object() ? Status::Ok() : Invalid(what_ + " must be a JSON object");
  }
  Status Int(const char* key, int64_t* out, bool required = true) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return required ? Missing(key) : Status::Ok();
    if (!it->is_number_integer() || it->get<int64_t>() < 0) return Wrong(key, "an integer >= 0");
    *out = it->get<int64_t>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return Status::Ok();
    if (!it->is_boolean()) return Wrong(key, "true or false");
    *out = it->get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, std::string* out, bool required = true) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return required ? Missing(key) : Status::Ok();
    if (!it->is_string()) return Wrong(key, "a string");
    *out = it->get<std::string>();
    return Status::Ok();
  }
  Status Strings(const char* key, std::vector<std::string>* out) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return Status::Ok();
    if (!it->is_array()) return Wrong(key, "an array of strings");
    for (const json& s : *it) {
      if (!s.is_string()) return Wrong(key, "an array of strings");
      out->push_back(s.get<std::string>());
    }
    return Status::Ok();
  }
  Status StringMap(const char* key, std::map<std::string, std::string>* out) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return Status::Ok();
    if (!it->is_object()) return Wrong(key, "an object of strings");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return Wrong(key, "an object of strings");
      (*out)[k] = v.get<std::string>();
    }
    return Status::Ok();
  }
  Status Resources(const char* key, cluster::Resources* out) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    Fields f(*it, what_ + "." + key);
    WARREN_RETURN_IF_ERROR(f.Object());
    WARREN_RETURN_IF_ERROR(f.Int("cpu_milli", &out->cpu_milli));
    WARREN_RETURN_IF_ERROR(f.Int("memory_mb", &out->memory_mb));
    WARREN_RETURN_IF_ERROR(f.Int("disk_mb", &out->disk_mb));
    return f.NoOthers();
  }
  Status NoOthers() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.count(k)) return Invalid(what_ + ": unknown field `" + k + "`");
    return Status::Ok();
  }

 private:
  Status Missing(const char* key) const { return Invalid(what_ + ": `" + key + "` is missing"); }
  Status Wrong(const char* key, const char* want) const {
    return Invalid(what_ + ": `" + key + "` must be " + want);
  }
  const json& j_;
  const std::string what_;
  std::set<std::string> seen_;
};

json ResourcesJson(const Resources& r) {
  return {{"cpu_milli", r.cpu_milli}, {"memory_mb", r.memory_mb}, {"disk_mb", r.disk_mb}};
}

}  // namespace

Result<NodeRecord> ParseNodeRecord(const json& j) {
  Fields f(j, "node record");
  WARREN_RETURN_IF_ERROR(f.Object());
  NodeRecord n;
  WARREN_RETURN_IF_ERROR(f.String("name", &n.name));
  if (!ValidNodeName(n.name)) return Invalid("node record: `name` is not a valid node name");
  WARREN_RETURN_IF_ERROR(f.String("address", &n.address));
  WARREN_RETURN_IF_ERROR(f.Resources("capacity", &n.capacity));
  WARREN_RETURN_IF_ERROR(f.Resources("used", &n.used));
  std::vector<std::string> backends;
  WARREN_RETURN_IF_ERROR(f.Strings("backends", &backends));
  for (const auto& b : backends) {
    auto kind = runtime::ParseBackendKind(b);
    if (!kind) return Invalid("node record: unknown backend `" + b + "`");
    n.backends.insert(*kind);
  }
  WARREN_RETURN_IF_ERROR(f.StringMap("labels", &n.labels));
  WARREN_RETURN_IF_ERROR(f.Strings("layers", &n.layers));
  WARREN_RETURN_IF_ERROR(f.Int("sandboxes", &n.sandboxes));
  WARREN_RETURN_IF_ERROR(f.String("started_at", &n.started_at));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return n;
}

json ToJson(const NodeRecord& n) {
  json backends = json::array();
  for (auto b : n.backends) backends.push_back(runtime::BackendName(b));
  return {{"name", n.name},
          {"address", n.address},
          {"capacity", ResourcesJson(n.capacity)},
          {"used", ResourcesJson(n.used)},
          {"backends", backends},
          {"labels", n.labels},
          {"layers", n.layers},
          {"sandboxes", n.sandboxes},
          {"started_at", n.started_at}};
}

Result<NodeAdmin> ParseNodeAdmin(const json& j) {
  Fields f(j, "node admin record");
  WARREN_RETURN_IF_ERROR(f.Object());
  NodeAdmin a;
  WARREN_RETURN_IF_ERROR(f.Bool("cordoned", &a.cordoned));
  WARREN_RETURN_IF_ERROR(f.Bool("draining", &a.draining));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return a;
}

json ToJson(const NodeAdmin& a) { return {{"cordoned", a.cordoned}, {"draining", a.draining}}; }

Result<Allocation> ParseAllocation(const json& j) {
  Fields f(j, "allocation");
  WARREN_RETURN_IF_ERROR(f.Object());
  Allocation a;
  WARREN_RETURN_IF_ERROR(f.Resources("reserved", &a.reserved));
  WARREN_RETURN_IF_ERROR(f.Int("sandboxes", &a.sandboxes));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return a;
}

json ToJson(const Allocation& a) {
  return {{"reserved", ResourcesJson(a.reserved)}, {"sandboxes", a.sandboxes}};
}

}  // namespace warren::cluster
