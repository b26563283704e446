#include "cluster/node_record.h"

#include "base/json_fields.h"
#include "node/node_selector.h"

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

// A node's name is its `warren.node` label's value: the same shape as any label.
bool ValidNodeName(const std::string& name) { return node::ValidLabelPart(name); }

namespace {

Status ReadResources(JsonFields& parent, const char* key, Resources* out) {
  const json* v = nullptr;
  WARREN_RETURN_IF_ERROR(parent.Value(key, &v));
  JsonFields f(*v, parent.what() + "." + key);
  WARREN_RETURN_IF_ERROR(f.Object());
  WARREN_RETURN_IF_ERROR(f.Int("cpu_milli", &out->cpu_milli));
  WARREN_RETURN_IF_ERROR(f.Int("memory_mb", &out->memory_mb));
  WARREN_RETURN_IF_ERROR(f.Int("disk_mb", &out->disk_mb));
  return f.NoOthers();
}

json ResourcesJson(const Resources& r) {
  return {{"cpu_milli", r.cpu_milli}, {"memory_mb", r.memory_mb}, {"disk_mb", r.disk_mb}};
}

}  // namespace

Result<NodeRecord> ParseNodeRecord(const json& j) {
  JsonFields f(j, "node record");
  WARREN_RETURN_IF_ERROR(f.Object());
  NodeRecord n;
  WARREN_RETURN_IF_ERROR(f.String("name", &n.name));
  if (!ValidNodeName(n.name)) return Invalid("node record: `name` is not a valid node name");
  WARREN_RETURN_IF_ERROR(f.String("address", &n.address));
  WARREN_RETURN_IF_ERROR(ReadResources(f, "capacity", &n.capacity));
  WARREN_RETURN_IF_ERROR(ReadResources(f, "used", &n.used));
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
  WARREN_RETURN_IF_ERROR(f.Double("memory_overcommit", &n.memory_overcommit, false));
  WARREN_RETURN_IF_ERROR(f.Double("cpu_overcommit", &n.cpu_overcommit, false));
  WARREN_RETURN_IF_ERROR(f.String("mirror", &n.mirror, false));
  if (n.memory_overcommit < 0 || n.cpu_overcommit < 0)
    return Invalid("node record: overcommit ratios are 0 (not set) or more");
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
          {"started_at", n.started_at},
          {"memory_overcommit", n.memory_overcommit},
          {"cpu_overcommit", n.cpu_overcommit},
          {"mirror", n.mirror}};
}

Result<NodeAdmin> ParseNodeAdmin(const json& j) {
  JsonFields f(j, "node admin record");
  WARREN_RETURN_IF_ERROR(f.Object());
  NodeAdmin a;
  WARREN_RETURN_IF_ERROR(f.Bool("cordoned", &a.cordoned));
  WARREN_RETURN_IF_ERROR(f.Bool("draining", &a.draining));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return a;
}

json ToJson(const NodeAdmin& a) { return {{"cordoned", a.cordoned}, {"draining", a.draining}}; }

Result<Allocation> ParseAllocation(const json& j) {
  JsonFields f(j, "allocation");
  WARREN_RETURN_IF_ERROR(f.Object());
  Allocation a;
  WARREN_RETURN_IF_ERROR(ReadResources(f, "reserved", &a.reserved));
  WARREN_RETURN_IF_ERROR(f.Int("sandboxes", &a.sandboxes));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return a;
}

json ToJson(const Allocation& a) {
  return {{"reserved", ResourcesJson(a.reserved)}, {"sandboxes", a.sandboxes}};
}

Result<CreateClaim> ParseCreateClaim(const json& j) {
  JsonFields f(j, "create claim");
  WARREN_RETURN_IF_ERROR(f.Object());
  CreateClaim c;
  WARREN_RETURN_IF_ERROR(f.String("api_server", &c.api_server));
  WARREN_RETURN_IF_ERROR(f.String("node", &c.node));
  WARREN_RETURN_IF_ERROR(ReadResources(f, "each", &c.each));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return c;
}

json ToJson(const CreateClaim& c) {
  return {{"api_server", c.api_server}, {"node", c.node}, {"each", ResourcesJson(c.each)}};
}

}  // namespace warren::cluster
