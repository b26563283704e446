#include "cluster/simulated_node.h"

namespace warren::cluster {

SimulatedNode::SimulatedNode(std::string name, std::set<runtime::BackendKind> backends)
    : name_(std::move(name)), backends_(std::move(backends)) {}

Result<node::SandboxRuntime> SimulatedNode::CreateSandbox(const node::NodeSandboxSpec& spec) {
  const std::string& id = spec.config.id;
  if (!backends_.count(spec.backend))
    return Status(Code::kInvalid, "create sandbox", id,
                  std::string("backend `") + runtime::BackendName(spec.backend) +
                      "` is not offered by simulated node " + name_);
  MutexLock lock(&mu_);
  if (!sandboxes_.insert(id).second)
    return Status(Code::kConflict, "create sandbox", id, "exists on node " + name_);
  for (const auto& layer : spec.config.layers) layers_.insert(layer.digest);
  return node::SandboxRuntime{};
}

Status SimulatedNode::DeleteSandbox(const std::string& id) {
  MutexLock lock(&mu_);
  paused_.erase(id);
  if (sandboxes_.erase(id) == 0) return NotFound("sandbox", id);
  return Status::Ok();
}

Status SimulatedNode::AdoptSandbox(const std::string& id) {
  // Nothing outlives a simulated node's process: there is never anything to take over.
  return NotFound("sandbox", id);
}

Status SimulatedNode::Known(const std::string& id, const char* op) const {
  MutexLock lock(&mu_);
  if (!sandboxes_.count(id)) return Status(Code::kNotFound, op, id, "no such sandbox");
  return Status::Ok();
}

Status SimulatedNode::NothingRunsIn(const std::string& id, const char* op) const {
  WARREN_RETURN_IF_ERROR(Known(id, op));
  return Status(Code::kInvalid, op, id,
                "the sandbox is on simulated node " + name_ +
                    " (warren node --simulate): nothing runs in it");
}

Status SimulatedNode::SetNetwork(const std::string& id, const net::Policy&) {
  return Known(id, "set network");
}

Status SimulatedNode::SetFilesystem(const std::string& id, const isolation::FsPolicy&) {
  return Known(id, "set filesystem");
}

Result<isolation::ChangeReport> SimulatedNode::Changes(const std::string& id, const std::string&,
                                                       size_t) {
  // Nothing ran, so nothing changed: an empty report is the true answer here.
  WARREN_RETURN_IF_ERROR(Known(id, "list changes"));
  return isolation::ChangeReport{};
}

Status SimulatedNode::PauseSandbox(const std::string& id) {
  WARREN_RETURN_IF_ERROR(Known(id, "pause sandbox"));
  MutexLock lock(&mu_);
  paused_.insert(id);
  return Status::Ok();
}

Status SimulatedNode::ResumeSandbox(const std::string& id) {
  WARREN_RETURN_IF_ERROR(Known(id, "resume sandbox"));
  MutexLock lock(&mu_);
  paused_.erase(id);
  return Status::Ok();
}

Result<std::shared_ptr<node::ExecRecord>> SimulatedNode::StartExec(const std::string& id,
                                                                   const std::string&,
                                                                   const node::ExecSpec&) {
  return NothingRunsIn(id, "exec");
}

Result<std::shared_ptr<node::ExecRecord>> SimulatedNode::GetExec(const std::string& id,
                                                                 const std::string& exec_id) {
  WARREN_RETURN_IF_ERROR(Known(id, "get exec"));
  return NotFound("exec", exec_id);
}

// Nothing runs in a simulated sandbox: its history is empty.
Result<std::vector<node::ExecSummary>> SimulatedNode::ExecHistory(const std::string& id) {
  WARREN_RETURN_IF_ERROR(Known(id, "list execs"));
  return std::vector<node::ExecSummary>{};
}

Status SimulatedNode::SignalExec(const std::string& id, const std::string& exec_id, int) {
  WARREN_RETURN_IF_ERROR(Known(id, "signal exec"));
  return NotFound("exec", exec_id);
}

Status SimulatedNode::WriteExecStdin(const std::string& id, const std::string& exec_id,
                                     std::string_view, bool) {
  WARREN_RETURN_IF_ERROR(Known(id, "write stdin"));
  return NotFound("exec", exec_id);
}

Status SimulatedNode::ResizeExec(const std::string& id, const std::string& exec_id,
                                 node::TerminalSize) {
  WARREN_RETURN_IF_ERROR(Known(id, "resize exec"));
  return NotFound("exec", exec_id);
}

Result<std::string> SimulatedNode::Screenshot(const std::string& id) {
  return NothingRunsIn(id, "take a screenshot");
}

Status SimulatedNode::DesktopInput(const std::string& id, const std::vector<agent::InputStep>&) {
  return NothingRunsIn(id, "send input");
}

Status SimulatedNode::WriteFile(const std::string& id, const std::string&, uint32_t,
                                std::string_view) {
  return NothingRunsIn(id, "write file");
}

Result<std::string> SimulatedNode::ReadFile(const std::string& id, const std::string&, uint64_t) {
  return NothingRunsIn(id, "read file");
}

nlohmann::json SimulatedNode::Info() {
  nlohmann::json backends = nlohmann::json::array();
  for (auto b : backends_) backends.push_back(runtime::BackendName(b));
  return {{"name", name_}, {"simulated", true}, {"backends", backends}, {"sandboxes", size()}};
}

size_t SimulatedNode::size() const {
  MutexLock lock(&mu_);
  return sandboxes_.size();
}

std::vector<std::string> SimulatedNode::Layers() const {
  MutexLock lock(&mu_);
  return {layers_.begin(), layers_.end()};
}

std::vector<std::string> SimulatedNode::SandboxIds() const {
  MutexLock lock(&mu_);
  return {sandboxes_.begin(), sandboxes_.end()};
}

}  // namespace warren::cluster
