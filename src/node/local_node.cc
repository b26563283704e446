#include "node/local_node.h"

#include "isolation/cgroup.h"
#include "isolation/seccomp_policy.h"
#include "runtime/container/agent_binary.h"
#include "runtime/container/container_backend.h"

namespace warren::node {

LocalNode::LocalNode(const LocalNodeOptions& opts, image::LayerStore* store)
    : opts_(opts), store_(store), uids_(opts.uid_base, opts.uid_slots, "/run/warren/uid-blocks") {}

LocalNode::~LocalNode() {
  DeleteAll();
  isolation::RemoveCgroupParent(opts_.cgroup_parent);
}

Result<std::unique_ptr<LocalNode>> LocalNode::Start(const LocalNodeOptions& opts,
                                                    image::LayerStore* store) {
  std::unique_ptr<LocalNode> node(new LocalNode(opts, store));
  WARREN_RETURN_IF_ERROR(runtime::PrepareHostDirs());
  std::string agent = opts.agent_path.empty() ? runtime::DefaultAgentPath() : opts.agent_path;
  UniqueFd memfd = WARREN_TRY(runtime::LoadSealedAgent(agent));
  // Compiled once per daemon; every sandbox's agent installs the same program.
  std::string bpf = WARREN_TRY(isolation::CompileSeccompPolicy(isolation::BuiltinSeccompPolicy())
                                   .status().ok()
                               ? isolation::CompileSeccompPolicy(isolation::BuiltinSeccompPolicy())
                               : isolation::CompileSeccompPolicy(isolation::BuiltinSeccompPolicy()));
  if (opts.unsafe_no_seccomp_landlock) bpf.clear();
  node->container_ = std::make_unique<runtime::ContainerBackend>(
      std::move(memfd), &node->mounts_, &node->uids_, opts.cgroup_parent, std::move(bpf));
  WARREN_RETURN_IF_ERROR(node->mux_.Start());
  LocalNode* self = node.get();
  node->mux_.SetOnClosed([self](const std::string& id) {
    std::function<void(const std::string&)> fn;
    {
      std::lock_guard lock(self->mu_);
      fn = self->on_lost_;
    }
    if (fn) fn(id);
  });
  return node;
}

void LocalNode::SetOnSandboxLost(std::function<void(const std::string& id)> fn) {
  std::lock_guard lock(mu_);
  on_lost_ = std::move(fn);
}

Result<SandboxRuntime> LocalNode::CreateSandbox(const NodeSandboxSpec& spec) {
  if (spec.backend != "container")
    return Status(Code::kInvalid, "create sandbox", spec.config.id,
                  "backend `" + spec.backend + "` is not available on this node (yet)");
  runtime::SandboxConfig cfg = spec.config;
  for (auto& l : cfg.layers) {
    if (!store_->Has(l.digest)) return NotFound("layer blob", l.digest);
    l.blob_path = store_->BlobPath(l.digest);
  }
  {
    std::lock_guard lock(mu_);
    if (sandboxes_.count(cfg.id)) return Status(Code::kConflict, "create sandbox", cfg.id, "exists");
  }
  auto inst = WARREN_TRY(container_->Create(cfg));
  auto entry = std::make_shared<Entry>();
  entry->conn = std::make_shared<AgentConn>(cfg.id, inst->TakeControlSocket());
  SandboxRuntime rt{inst->host_pid(), inst->host_uid()};
  entry->instance = std::move(inst);
  {
    std::lock_guard lock(mu_);
    sandboxes_[cfg.id] = entry;
  }
  mux_.Add(entry->conn);
  return rt;
}

Status LocalNode::DeleteSandbox(const std::string& id) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return NotFound("sandbox", id);
    e = it->second;
    sandboxes_.erase(it);
  }
  mux_.Remove(e->conn);
  e->conn->OnClosed("sandbox deleted");
  return e->instance->Destroy().Context("delete " + id);
}

Result<std::shared_ptr<LocalNode::Entry>> LocalNode::Find(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound("sandbox", id);
  return it->second;
}

Status LocalNode::PauseSandbox(const std::string& id) {
  auto e = WARREN_TRY(Find(id));
  return e->instance->Pause().Context("pause " + id);
}

Status LocalNode::ResumeSandbox(const std::string& id) {
  auto e = WARREN_TRY(Find(id));
  return e->instance->Resume().Context("resume " + id);
}

void LocalNode::DeleteAll() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, e] : sandboxes_) ids.push_back(id);
  }
  for (auto& id : ids) (void)DeleteSandbox(id);
}

Result<std::shared_ptr<AgentConn>> LocalNode::Conn(const std::string& id) {
  auto e = WARREN_TRY(Find(id));
  return e->conn;
}

Result<std::shared_ptr<ExecRecord>> LocalNode::StartExec(const std::string& id,
                                                         const std::string& exec_id,
                                                         const ExecSpec& spec) {
  auto conn = WARREN_TRY(Conn(id));
  auto rec = std::make_shared<ExecRecord>(exec_id, id, spec.max_output, spec.binary, conn->budget());
  if (spec.on_record) spec.on_record(rec);
  WARREN_RETURN_IF_ERROR(conn->StartExec(rec, spec));
  return rec;
}

Result<std::shared_ptr<ExecRecord>> LocalNode::GetExec(const std::string& id,
                                                       const std::string& exec_id) {
  auto conn = WARREN_TRY(Conn(id));
  auto rec = conn->FindExec(exec_id);
  if (!rec) return NotFound("exec", exec_id);
  return rec;
}

Status LocalNode::SignalExec(const std::string& id, const std::string& exec_id, int sig) {
  auto conn = WARREN_TRY(Conn(id));
  return conn->Signal(exec_id, sig);
}

Status LocalNode::WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                            std::string_view data) {
  auto conn = WARREN_TRY(Conn(id));
  return conn->WriteFile(path, mode, data);
}

Result<std::string> LocalNode::ReadFile(const std::string& id, const std::string& path,
                                        uint64_t max) {
  auto conn = WARREN_TRY(Conn(id));
  return conn->ReadFile(path, max);
}

size_t LocalNode::live_sandboxes() const {
  std::lock_guard lock(mu_);
  return sandboxes_.size();
}

nlohmann::json LocalNode::Info() {
  return {{"name", opts_.name},
          {"backends", {"container"}},
          {"cgroups", isolation::CgroupLayoutName()},
          {"cgroup_parent", opts_.cgroup_parent},
          {"hardening", opts_.unsafe_no_seccomp_landlock ? "reduced (benchmark mode)" : "full"},
          {"sandboxes", live_sandboxes()},
          {"layer_mounts", mounts_.live()},
          {"uid_slots_used", uids_.used()},
          {"uid_slots", opts_.uid_slots}};
}

}  // namespace warren::node
