#include "node/local_node.h"

#include <dirent.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "agent/protocol.h"
#include "agent/setup_messages.h"
#include "base/cleanup.h"
#include "base/ids.h"
#include "image/tar_extract.h"
#include "isolation/cgroup.h"
#include "isolation/cgroup_files.h"
#include "isolation/seccomp_policy.h"
#include "node/fncall/fncall_sandboxes.h"
#include "node/microvm_snapshot.h"
#include "node/snapshot_builder.h"
#include "runtime/container/agent_binary.h"
#include "runtime/container/container_backend.h"

namespace warren::node {

LocalNode::LocalNode(const LocalNodeOptions& opts, image::LayerStore* store)
    : opts_(opts), store_(store), uids_(opts.uid_base, opts.uid_slots, "/run/warren/uid-blocks") {}

LocalNode::~LocalNode() {
  // fncall first: its execs run on the runner pool, whose runners are sandboxes of this node.
  fncall_.reset();
  calls_.reset();
  if (vm_start_.joinable()) vm_start_.join();
  warm_.reset();  // its waiting sandboxes, before the directories they live in
  DeleteAll();
  density_.reset();  // its swap device, once no sandbox's pages are in it
  // The block daemon after the sandboxes reading through it.
  if (lazy_) lazy_->Shutdown();
  // The VM backend's warm VMs (each with a cgroup and sockets of its own) go before the
  // parent directories they live in.
  microvm_.reset();
  isolation::RemoveCgroupParent(opts_.cgroup_parent);
  // Empty once every sandbox is gone (each removes its socket and runtime file).
  rmdir(("/run/warren/" + opts_.cgroup_parent).c_str());
}

Result<std::unique_ptr<LocalNode>> LocalNode::Start(const LocalNodeOptions& opts,
                                                    image::LayerStore* store) {
  std::unique_ptr<LocalNode> node(new LocalNode(opts, store));
  // What an earlier run's interrupted imports and snapshots left (a snapshot's scratch
  // tmpfs included): nothing in the store's scratch directory outlives a run.
  if (store != nullptr) store->ClearTemp();
  if (opts.container_backend) {
    node->container_ = WARREN_TRY(opts.container_backend());
  } else {
    WARREN_RETURN_IF_ERROR(node->StartContainerBackend());
  }
  WARREN_RETURN_IF_ERROR(node->StartServices());
  return node;
}

Status LocalNode::StartContainerBackend() {
  const LocalNodeOptions& opts = opts_;
  WARREN_RETURN_IF_ERROR(runtime::PrepareHostDirs());
  std::string agent = opts.agent_path.empty() ? runtime::DefaultAgentPath() : opts.agent_path;
  std::string how;
  UniqueFd agent_exe = WARREN_TRY(runtime::LoadAgent(agent, &how));
  spdlog::info("sandboxes start the agent {}", how);
  // Compiled once per daemon; every sandbox's agent installs the same program.
  std::string bpf = WARREN_TRY(isolation::CompileSeccompPolicy(isolation::BuiltinSeccompPolicy()));
  std::string runner_bpf = WARREN_TRY(isolation::CompileSeccompPolicy(
      isolation::BuiltinSeccompPolicy(), isolation::kRunnerProfile));
  if (opts.unsafe_no_seccomp_landlock) bpf.clear(), runner_bpf.clear();
  auto container = std::make_unique<runtime::ContainerBackend>(
      std::move(agent_exe), &mounts_, &uids_, opts.cgroup_parent, std::move(bpf),
      std::move(runner_bpf));
  container->SetFaults(opts.create_faults);
  container_ = std::move(container);
  return Status::Ok();
}

// Networking, the agent mux, the warm pool and the VM backend's start, over whichever
// container backend the node has.
Status LocalNode::StartServices() {
  const LocalNodeOptions& opts = opts_;
  const std::string agent = opts.agent_path.empty() ? runtime::DefaultAgentPath() : opts.agent_path;
  // Where network records live, also read by ReapUnadopted when networking is off now.
  if (opts_.net.state_dir.empty())
    opts_.net.state_dir = "/run/warren/" + opts.cgroup_parent + "-net";
  if (opts.network) {
    auto n = net::Network::Start(opts_.net);
    if (n.ok()) {
      net_ = std::move(*n);
    } else {
      net_error_ = n.status().ToString();
      spdlog::warn("sandbox networking is off (egress will be refused): {}", net_error_);
    }
  } else {
    net_error_ = "sandbox networking is disabled on this node";
  }
  // Without networking (off, or failed to start) sandboxes still get a namespace of the
  // node's with lo only, from a pool of its own, and give it back as Network's do; a fake
  // backend (opts.container_backend) makes none.
  if (!net_ && !opts.container_backend)
    own_bare_netns_ = std::make_unique<net::BareNetnsPool>(net::BareNetnsOptions{
        .ipv6 = false, .target = opts_.net.pool_bare, .keep = 2 * opts_.net.pool_bare});
  WARREN_RETURN_IF_ERROR(mux_.Start());
  {
    density::DensityOptions d = opts.density;
    d.cgroup_parent = opts.cgroup_parent;
    // A fake backend's sandboxes have no cgroups: count requests, touch nothing of the host.
    if (opts.container_backend) d.enabled = false, d.enforce_budget = false;
    density_ = WARREN_TRY(density::DensityManager::Start(d));
  }
  LocalNode* self = this;
  WarmPoolOptions wo;
  wo.initial = opts.warm_pool;
  wo.max = std::min<size_t>(wo.total_max, 16 * opts.warm_pool);
  warm_ = std::make_unique<WarmPool>(
      wo, [self](const runtime::SandboxConfig& tmpl) { return self->MakeWarm(tmpl); },
      [self](WarmSandbox& w) { self->DiscardWarm(w); });
  if (opts.microvm) {
    runtime::vm::MicrovmOptions vo = opts.vm;
    if (vo.agent_path.empty()) vo.agent_path = agent;
    if (vo.cgroup_parent.empty()) vo.cgroup_parent = opts.cgroup_parent;
    vm_start_ = std::thread([self, vo] {
      auto b = runtime::vm::MicrovmBackend::Start(vo, &self->uids_);
      MutexLock lock(&self->vm_mu_);
      if (b.ok())
        self->microvm_ = std::move(*b);
      else
        self->vm_error_ = b.status().ToString();
      if (!b.ok()) spdlog::warn("microvm backend unavailable: {}", self->vm_error_);
      self->vm_done_ = true;
      self->vm_cv_.notify_all();
    });
  } else {
    MutexLock lock(&vm_mu_);
    vm_error_ = "microVMs are disabled on this node";
    vm_done_ = true;
  }
  mux_.SetOnClosed([self](const std::string& id) {
    SandboxLostFn fn;
    std::string reason;
    {
      MutexLock lock(&self->mu_);
      fn = self->on_lost_;
      if (auto it = self->lost_reasons_.find(id); it != self->lost_reasons_.end()) {
        reason = it->second;
        self->lost_reasons_.erase(it);
      }
    }
    if (fn) fn(id, reason);
  });
  if (!opts.lazy.source.empty()) {
    auto lazy = LazyLayers::Start(
        opts.lazy,
        [self](const std::string& layer, const std::string& reason) {
          self->FailLazy(layer, reason);
        },
        [self](const std::string& layer) {
          if (self->store_->IsPromoted(layer)) return;
          Status st = self->store_->Promote(layer);
          if (st.ok())
            spdlog::info("layer {}: every chunk is on this node; later mounts read a local file",
                         layer);
          else if (st.code() != Code::kNotFound)
            spdlog::warn("promote layer {}: {}", layer, st.ToString());
        });
    if (lazy.ok()) {
      lazy_ = std::move(*lazy);
    } else {
      lazy_error_ = lazy.status().ToString();
      spdlog::warn("chunked layers cannot be used on this node: {}", lazy_error_);
    }
  } else {
    lazy_error_ = "this node has no shared layer store (--layer-store)";
  }
  return Status::Ok();
}

Result<uint16_t> LocalNode::ServeMirrorPeers(const std::string& host, uint16_t port,
                                             const net::MirrorPeers* peers) {
  if (!net_)
    return Status(Code::kUnavailable, "serve package mirror peers", opts_.name,
                  "this node has no sandbox networking");
  return net_->ServeMirrorPeers(host, port, peers);
}

Status LocalNode::StartFncall(fncall::ImageResolver resolve, fncall::PoolOptions opts) {
  if (calls_) return Status(Code::kConflict, "start fncall", opts_.name, "started already");
  calls_ = std::make_unique<fncall::CallService>(this, std::move(resolve), std::move(opts));
  fncall_ = std::make_unique<fncall::FncallSandboxes>(calls_.get(), opts_.spill_dir);
  return Status::Ok();
}

Result<nlohmann::json> LocalNode::RunCall(const nlohmann::json& request, bool batch) {
  if (!calls_) return NodeApi::RunCall(request, batch);
  return batch ? calls_->CallBatch(request) : calls_->Call(request);
}

bool LocalNode::Fncall(const std::string& id) { return fncall_ && fncall_->Has(id); }

void LocalNode::SetOnSandboxLost(SandboxLostFn fn) {
  MutexLock lock(&mu_);
  on_lost_ = std::move(fn);
}

Result<runtime::vm::MicrovmBackend*> LocalNode::Microvm() {
  MutexLock lock(&vm_mu_);
  while (!vm_done_) lock.Wait(vm_cv_);
  if (!microvm_)
    return Status(Code::kUnavailable, "create sandbox", "microvm",
                  "no microVMs on this node: " + vm_error_);
  return microvm_.get();
}

Result<runtime::Backend*> LocalNode::BackendFor(runtime::BackendKind kind) {
  switch (kind) {
    case runtime::BackendKind::kContainer:
      return container_.get();
    // microvm and vm (a full OS) are both QEMU guests of the one VM backend.
    case runtime::BackendKind::kMicrovm:
    case runtime::BackendKind::kVm:
      return WARREN_TRY(Microvm());
    case runtime::BackendKind::kFncall:
      break;  // no backend: the node's fncall service (node/fncall/fncall_sandboxes.h)
  }
  return Status(Code::kInvalid, "create sandbox", runtime::BackendName(kind),
                "this backend is not available on this node");
}

Result<SandboxRuntime> LocalNode::CreateSandbox(const NodeSandboxSpec& spec) {
  const std::string id = spec.config.id;
  if (spec.backend != runtime::BackendKind::kFncall) {
    MutexLock lock(&mu_);
    if (sandboxes_.count(id) || !creating_.insert(id).second)
      return Status(Code::kConflict, "create sandbox", id, "exists");
  }
  auto made = CreateSandboxNow(spec);
  if (spec.backend == runtime::BackendKind::kFncall) return made;
  bool doomed;
  {
    MutexLock lock(&mu_);
    creating_.erase(id);
    doomed = doomed_.erase(id) > 0;
  }
  if (!doomed || !made.ok()) return made;
  (void)DeleteSandbox(id);
  return Status(Code::kConflict, "create sandbox", id, "deleted while it was being created");
}

Result<SandboxRuntime> LocalNode::CreateSandboxNow(const NodeSandboxSpec& spec) {
  if (spec.backend == runtime::BackendKind::kFncall) {
    if (!fncall_)
      return Status(Code::kUnavailable, "create sandbox", "fncall", "not enabled on this node");
    return fncall_->Create(spec);
  }
  runtime::Backend* backend = WARREN_TRY(BackendFor(spec.backend));
  const runtime::BackendTraits traits = runtime::TraitsOf(spec.backend);
  const bool is_vm = traits.is_vm;
  runtime::SandboxConfig cfg = spec.config;
  std::shared_ptr<const MemoryForks::Fork> fork;
  if (!spec.fork.empty()) {
    // A memory fork's child: the parent's RAM and processes, restored here.
    if (spec.backend != runtime::BackendKind::kMicrovm)
      return Invalid("a memory fork's child must be a microVM", cfg.id);
    fork = WARREN_TRY(memory_forks_.Find(spec.fork));
    cfg.memory = fork->image;
  }
  // Runners belong to the fncall pool, which sizes itself; every other sandbox is admitted
  // against the node's budget times its overcommit ratios.
  const bool tracked = !cfg.fncall_runner;
  if (tracked) WARREN_RETURN_IF_ERROR(density_->Admit(cfg.id, cfg.memory_bytes, cfg.cpus));
  Cleanup unadmit([&] {
    if (tracked) density_->Forget(cfg.id);
  });
  cfg.full_os = traits.full_os;
  for (auto& l : cfg.layers) {
    // The tenant named an image that exists; its blob missing is the node's fault. A cluster
    // node fetches it from the shared store first.
    // A chunked layer's metadata is fetched while blobfsd opens the layer (decodes its manifest,
    // starts its prefetch), rather than before: ~25 ms off a cold start.
    auto open_ahead = [&] {
      if (lazy_ && !is_vm) lazy_->OpenAhead(l.digest);
    };
    if (Status st = store_->Ensure(l.digest, open_ahead); !st.ok())
      return Internal("create sandbox", cfg.id,
                      "layer blob " + l.digest + " is not in the node's store: " + st.ToString());
    l.blob_path = store_->BlobPath(l.digest);
  }
  const std::vector<std::string> lazy = WARREN_TRY(PrepareLazyLayers(cfg, is_vm));
  // Noted before the sandbox runs: a failure of its layers from its first read on fails it.
  if (!lazy.empty()) NoteLazyLayers(cfg.id, lazy);
  Cleanup forget_lazy([&] {
    if (!lazy.empty()) NoteLazyLayers(cfg.id, {});
  });
  if (spec.network.egress && !net_)
    return Status(Code::kUnavailable, "create sandbox", cfg.id, "no egress here: " + net_error_);
  if (net_ && !cfg.fncall_runner) {
    // The usual proxy variables, set whatever the mode: a sandbox switched to egress later
    // finds its proxy without a restart of anything; in mode none they fail fast.
    const std::string proxy = net_->proxy_url();
    for (const char* k : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                          "npm_config_proxy", "npm_config_https_proxy"})
      cfg.env.emplace(k, proxy);
    cfg.env.emplace("no_proxy", "localhost,127.0.0.1,::1");
    cfg.env.emplace("NO_PROXY", "localhost,127.0.0.1,::1");
    // (A fork's child has its parent's: they are in the memory it restores.)
    if (spec.network.egress && !cfg.memory) cfg.files = EgressFiles();
  }
  // Served from the warm pool where the request allows: network none (an egress sandbox's
  // address and files are its own from the start), not a runner.
  // Not over chunked layers yet: a warm sandbox would outlive a blobfsd restart unnoticed.
  const bool poolable = backend == container_.get() && !spec.network.egress && !cfg.fncall_runner &&
                        cfg.files.empty() && lazy.empty() && !cfg.display;
  if (poolable && warm_) {
    std::string key = std::to_string(cfg.disk_bytes);
    for (const auto& l : cfg.layers) key += (l.tool ? "|tool:" : "|") + l.digest;
    if (auto w = warm_->Take(key, cfg)) {
      Status st = ClaimWarm(*w, cfg);
      if (st.ok()) {
        SandboxRuntime rt{w->instance->host_pid(), w->instance->host_uid()};
        auto conn = std::make_shared<AgentConn>(cfg.id, std::move(w->control));
        runtime::Instance* inst = w->instance.get();
        Register(cfg.id, std::move(w->instance), std::move(conn));
        Track(cfg.id, inst, false, cfg.memory_bytes, cfg.cpus);
        unadmit.Cancel();
        forget_lazy.Cancel();
        return rt;
      }
      // Whatever went wrong stays with that sandbox: make a fresh one instead.
      ++warm_claim_failures_;
      spdlog::warn("create {}: a warm sandbox could not be claimed ({}); making one", cfg.id,
                   st.ToString());
      DiscardWarm(*w);
    }
  }
  // A VM without egress needs no namespace of ours: its QEMU gets a new one with only the
  // VM's unattached NIC, and it can never be switched to egress (no link to bridge).
  const bool attach = net_ && !cfg.fncall_runner && !(is_vm && !spec.network.egress);
  auto inst = WARREN_TRY(CreateAttached(backend, cfg, attach ? &spec.network : nullptr, is_vm));
  SandboxRuntime rt{inst->host_pid(), inst->host_uid()};
  auto conn = std::make_shared<AgentConn>(cfg.id, inst->TakeControlSocket());
  const std::shared_ptr<AgentConn> agent = conn;
  runtime::Instance* made = inst.get();
  Register(cfg.id, std::move(inst), std::move(conn), is_vm, cfg.net_ip != 0);
  if (tracked) Track(cfg.id, made, is_vm, cfg.memory_bytes, cfg.cpus);
  unadmit.Cancel();
  forget_lazy.Cancel();
  if (fork) {
    // The parent's commands run on in the child: it follows them from the output the parent's
    // records held when the parent stopped (the agent sends again what came after, from its
    // ring). No spill: a node restart loses these copies.
    std::vector<std::shared_ptr<ExecRecord>> recs;
    for (const auto& c : fork->execs)
      recs.push_back(ExecRecord::Restore(ExecSpill::Loaded{c.meta, c.frames, nullptr}, cfg.id,
                                         agent->budget()));
    agent->AdoptExecs(std::move(recs));
    // The agent took over its parent's session: it sends nothing until the node says what it
    // holds.
    if (Status st = agent->Resume(); !st.ok()) {
      (void)DeleteSandbox(cfg.id);
      return st.Context("create " + cfg.id);
    }
    return rt;  // its CA files and screen are the parent's, running already
  }
  if (net_ && spec.network.egress) WriteCaBundle(cfg.id);
  if (cfg.display) {
    // Ready means its screen takes input: a create whose X server cannot start fails whole.
    if (Status st = agent->StartDisplay(*cfg.display, made->has_machine_screen()); !st.ok()) {
      (void)DeleteSandbox(cfg.id);
      return st;
    }
  }
  return rt;
}

Result<std::vector<std::string>> LocalNode::PrepareLazyLayers(runtime::SandboxConfig& cfg,
                                                              bool is_vm) {
  std::vector<std::string> lazy;
  for (auto& l : cfg.layers) {
    if (!store_->IsChunked(l.digest)) continue;
    if (is_vm)
      return Invalid("layer " + l.digest +
                     " is chunked (loaded on demand): microVMs and VMs need whole layers");
    auto m = store_->Manifest(l.digest);
    if (!m.ok()) return Internal("create sandbox", cfg.id, m.status().ToString());
    l.blob_path = store_->MetaPath((*m)->meta_sha256);
    if (store_->IsPromoted(l.digest)) {
      // Every chunk was on this node: a plain local file, read without blobfsd.
      l.device_path = store_->PromotedPath(l.digest);
      continue;
    }
    if (!lazy_)
      return Status(Code::kUnavailable, "create sandbox", cfg.id,
                    "layer " + l.digest + " is chunked and cannot be loaded here: " + lazy_error_);
    l.device_path = WARREN_TRY(lazy_->DevicePath(l.digest));
    l.readahead_kb = opts_.lazy.readahead_kb;
    lazy.push_back(l.digest);
  }
  return lazy;
}

void LocalNode::NoteLazyLayers(const std::string& id, const std::vector<std::string>& layers) {
  {
    MutexLock lock(&mu_);
    if (layers.empty()) {
      if (!lazy_of_.erase(id)) return;
    } else {
      lazy_of_[id] = layers;
    }
  }
  const std::string path = LazyRecordPath(id);
  if (layers.empty()) {
    unlink(path.c_str());
    return;
  }
  mkdir((opts_.lazy.run_dir + "/sandboxes").c_str(), 0700);
  std::ofstream out(path, std::ios::trunc);
  for (const auto& d : layers) out << d << "\n";
}

void LocalNode::FailLazy(const std::string& layer, const std::string& reason) {
  std::vector<std::pair<std::string, int>> victims;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, layers] : lazy_of_) {
      if (!layer.empty() && std::find(layers.begin(), layers.end(), layer) == layers.end())
        continue;
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) continue;
      if (lost_reasons_.count(id)) continue;  // failed already
      lost_reasons_[id] = reason;
      victims.emplace_back(id, it->second->instance->host_pid());
    }
    // New creates mount afresh on the new daemon's files.
    if (layer.empty())
      for (const auto& [id, layers] : lazy_of_)
        for (const auto& d : layers) mounts_.Forget(d);
  }
  for (const auto& [id, pid] : victims) {
    spdlog::error("sandbox {}: failed: {}", id, reason);
    // Its init's death ends every process of it and closes its agent's connection, which
    // reports it lost with this reason (mux_'s OnClosed).
    if (pid > 0) kill(pid, SIGKILL);
  }
}

Result<std::unique_ptr<runtime::Instance>> LocalNode::CreateAttached(runtime::Backend* backend,
                                                                     runtime::SandboxConfig& cfg,
                                                                     const net::Policy* policy,
                                                                     bool keep_link) {
  Cleanup detach([&] {
    if (policy) net_->Detach(cfg.id);
  });
  // No network here: a namespace of the node's all the same (its root then holds no
  // capability over it, as with networking on). Its fds are the node's only until the
  // sandbox holds them.
  net::BareNetns bare;
  if (!policy && own_bare_netns_ && backend == container_.get() && !cfg.fncall_runner) {
    auto taken = own_bare_netns_->Take();
    if (!taken.ok()) return taken.status().Context("create " + cfg.id);
    bare = std::move(*taken);
    cfg.netns_fd = bare.netns.get();
    cfg.sysfs_fd = bare.sysfs.get();
  }
  if (policy) {
    WARREN_RETURN_IF_ERROR(
        runtime::CheckFault(opts_.create_faults, runtime::CreateStep::kNetwork, cfg.id));
    net::Attachment a = WARREN_TRY(net_->Attach(cfg.id, *policy, keep_link));
    cfg.netns_fd = a.netns_fd;
    cfg.sysfs_fd = a.sysfs_fd;
    if (a.ip) cfg.net_ip = a.ip, cfg.net_gateway = net_->gateway();
    if (a.ip && a.ipv6) {
      cfg.net_ip6 = net::Ip6String(net::SandboxAddress6(a.ip));
      cfg.net_gateway6 = net::Ip6String(net_->gateway6());
    }
  }
  auto inst = WARREN_TRY(backend->Create(cfg));
  if (policy) {
    Status st =
        runtime::CheckFault(opts_.create_faults, runtime::CreateStep::kNetworkReady, cfg.id);
    if (st.ok()) st = net_->Ready(cfg.id);
    if (!st.ok()) {
      (void)inst->Destroy();
      return st;
    }
    net_->Started(cfg.id, inst->host_pid());
  }
  detach.Cancel();
  return inst;
}

// One request and its answer on a warm sandbox's control socket (nothing else reads it yet).
static Result<agent::Message> AgentRoundTrip(int fd, const agent::Message& m,
                                             const std::string& what) {
  WARREN_RETURN_IF_ERROR(agent::Send(fd, m).Context(what));
  return agent::RecvWithin(fd, 5000, what);
}

nlohmann::json LocalNode::WarmInfo() {
  nlohmann::json j = warm_ ? warm_->Info() : nlohmann::json::object();
  j["claim_failures"] = warm_claim_failures_.load();
  return j;
}

Result<WarmSandbox> LocalNode::MakeWarm(const runtime::SandboxConfig& tmpl) {
  runtime::SandboxConfig cfg = tmpl;
  cfg.id = "warm-" + RandomHex(8);
  cfg.hostname = cfg.id;
  cfg.background = true;
  const net::Policy none;
  auto inst = WARREN_TRY(CreateAttached(container_.get(), cfg, net_ ? &none : nullptr, false));
  WarmSandbox w{cfg.id, std::move(inst), UniqueFd()};
  w.control = w.instance->TakeControlSocket();
  // No command is rehearsed here ahead of the first one: measured (bench/cycle.py, five
  // interleaved pairs), exec'ing one first made the first real exec no faster and cost 10-20%
  // of the node's throughput.
  return w;
}

void LocalNode::DiscardWarm(WarmSandbox& w) {
  UniqueFd netns = w.instance ? KeepNetns(*w.instance) : UniqueFd();
  if (w.instance) (void)w.instance->Destroy();
  w.instance.reset();
  w.control.Reset();
  if (net_) net_->Detach(w.name);
  GiveBackNetns(std::move(netns));
}

net::BareNetnsPool* LocalNode::bare_netns() {
  return net_ ? net_->bare_pool() : own_bare_netns_.get();
}

UniqueFd LocalNode::KeepNetns(runtime::Instance& inst) {
  if (!bare_netns()) return UniqueFd();
  auto netns = inst.OpenNetns();
  return netns.ok() ? std::move(*netns) : UniqueFd();
}

void LocalNode::GiveBackNetns(UniqueFd netns) {
  if (netns && bare_netns()) bare_netns()->GiveBack(std::move(netns));
}

Status LocalNode::ClaimWarm(WarmSandbox& w, const runtime::SandboxConfig& cfg) {
  // Its limits, normal priority (before we wait on its agent: at the lowest priority it would
  // answer only when the CPUs have nothing else to do) and its files under the new name.
  WARREN_RETURN_IF_ERROR(w.instance->Claim({cfg.id, cfg.memory_bytes, cfg.pids, cfg.cpus}));
  agent::Message assign{agent::ToJson(agent::AssignMessage{cfg.hostname, cfg.env, cfg.open_files}),
                        ""};
  auto reply = WARREN_TRY(AgentRoundTrip(w.control.get(), assign, "claim " + cfg.id));
  if (reply.header.value("t", "") != "assigned")
    return Internal("claim", cfg.id,
                    "agent: " + reply.header.value("error", reply.header.value("t", "")));
  if (net_) WARREN_RETURN_IF_ERROR(net_->Rename(w.name, cfg.id));
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> LocalNode::EgressFiles() const {
  const std::string gw = net::Ip4String(net_->gateway()), proxy = net_->proxy_url();
  std::vector<std::pair<std::string, std::string>> files = {
      {"/etc/resolv.conf", "nameserver " + gw + "\noptions timeout:2 attempts:2\n"},
      {"/etc/apt/apt.conf.d/90warren-proxy",
       "Acquire::http::Proxy \"" + proxy + "\";\nAcquire::https::Proxy \"" + proxy + "\";\n"}};
  if (std::string ca = net_->ca_pem(); !ca.empty()) files.emplace_back(kEgressCaFile, ca);
  return files;
}

void LocalNode::ConfigureEgress(const std::string& id) {
  for (const auto& [path, data] : EgressFiles()) (void)WriteFile(id, path, 0644, data);
  WriteCaBundle(id);
}

void LocalNode::WriteCaBundle(const std::string& id) {
  const std::string ca = net_->ca_pem();
  auto e = Find(id);
  if (ca.empty() || !e.ok()) return;
  // The image's own roots and the node CA.
  std::string bundle;
  for (const char* path : kRootBundles) {
    auto roots = ReadFile(id, path, 16 << 20);
    if (roots.ok() && roots->find("-----BEGIN CERTIFICATE-----") != std::string::npos) {
      bundle = std::move(*roots);
      break;
    }
  }
  const bool with_roots = !bundle.empty();
  if (with_roots && bundle.back() != '\n') bundle += '\n';
  bundle += ca;
  Status st = WriteFile(id, kCaBundleFile, 0644, bundle);
  if (!st.ok()) spdlog::warn("sandbox {}: CA bundle for the egress proxy: {}", id, st.ToString());
  (*e)->ca_bundle = st.ok() && with_roots ? 1 : 0;
}

std::map<std::string, std::string> LocalNode::EgressEnvDefaults(const std::string& id) {
  // On every exec: no copy of the PEM, and the egress lookup only where there is a CA.
  if (!net_ || !net_->has_ca() || !net_->Egress(id)) return {};
  auto e = Find(id);
  if (!e.ok()) return {};
  if ((*e)->ca_bundle < 0) WriteCaBundle(id);  // a sandbox this daemon adopted after a restart
  // Node.js adds the CA to its own roots. Tools that take one file of roots get the image's
  // plus the CA, but only where the image's were found: a file with the CA alone would cut
  // them off from every other host. A variable the create or the exec sets wins.
  if ((*e)->ca_bundle == 0) return {{"NODE_EXTRA_CA_CERTS", kEgressCaFile}};
  return {{"SSL_CERT_FILE", kCaBundleFile},  {"REQUESTS_CA_BUNDLE", kCaBundleFile},
          {"PIP_CERT", kCaBundleFile},       {"CURL_CA_BUNDLE", kCaBundleFile},
          {"GIT_SSL_CAINFO", kCaBundleFile}, {"NODE_EXTRA_CA_CERTS", kEgressCaFile}};
}

Status LocalNode::SetNetwork(const std::string& id, const net::Policy& policy) {
  if (Fncall(id)) return fncall_->SetNetwork(id, policy);
  auto e = WARREN_TRY(Find(id));
  // A microVM's NIC is bridged to its namespace's link when it is made; one made without
  // egress has no link to bridge (and no hotplug on -M microvm).
  if (e->microvm && policy.egress && !e->wired)
    return Status(Code::kUnavailable, "set network", id,
                  "this VM was created with network none; create it with egress to change its "
                  "allowlist later");
  if (e->microvm && !e->wired) return Status::Ok();  // none stays none: nothing to change
  if (!net_) {
    if (policy.egress)
      return Status(Code::kUnavailable, "set network", id, "no egress here: " + net_error_);
    return Status::Ok();
  }
  WARREN_RETURN_IF_ERROR(net_->SetPolicy(id, policy));
  if (policy.egress) {
    bool paused;
    {
      MutexLock lock(&e->mu);
      paused = e->egress_files_pending = e->paused;
    }
    if (!paused) ConfigureEgress(id);
  }
  return Status::Ok();
}

void LocalNode::Register(const std::string& id, std::unique_ptr<runtime::Instance> inst,
                         std::shared_ptr<AgentConn> conn, bool microvm, bool wired,
                         std::shared_ptr<ExecJournal> journal) {
  auto entry = std::make_shared<Entry>();
  entry->journal = journal ? std::move(journal) : std::make_shared<ExecJournal>(JournalPath(id));
  entry->microvm = microvm;
  entry->wired = wired;
  entry->instance = std::move(inst);
  entry->conn = std::move(conn);
  {
    MutexLock lock(&mu_);
    sandboxes_[id] = entry;
  }
  mux_.Add(entry->conn);
}

void LocalNode::Track(const std::string& id, runtime::Instance* inst, bool microvm,
                      uint64_t memory_bytes, double cpus) {
  density::TrackedSandbox t;
  t.id = id;
  t.paths = inst->cgroup_paths();
  if (t.paths.empty()) return;
  // A container's init is its agent, which must outlive any command; a microVM's is QEMU,
  // the whole sandbox, ranked like the rest of it.
  t.protected_pid = microvm ? 0 : inst->host_pid();
  if (memory_bytes == 0)
    if (auto use = isolation::ReadMemoryUse(t.paths); use.ok()) memory_bytes = use->limit_bytes;
  t.memory_bytes = memory_bytes;
  t.cpus = cpus;
  t.quiet_cpus = inst->quiet_cpus();
  t.freeze = [inst](bool frozen) { return frozen ? inst->Pause() : inst->Resume(); };
  t.awaited = [this, id] {
    auto conn = Conn(id);
    return conn.ok() && (*conn)->AnyExecAwaited();
  };
  // Frozen by an earlier run that hibernated it (a user's pause is the API's to restore).
  t.frozen_now = !t.paths.v2_dir.empty() &&
                 isolation::ReadCgroupNumber(t.paths.v2_dir + "/cgroup.freeze").value_or(0) == 1;
  density_->Add(std::move(t));
}

Status LocalNode::Touch(const std::string& id) { return density_->Touch(id); }

Result<density::SandboxDensity> LocalNode::Density(const std::string& id) {
  if (auto d = density_->Sandbox(id)) return *d;
  if (Fncall(id)) return Status(Code::kUnavailable, "read density", id, "a fncall sandbox");
  WARREN_TRY(Find(id));
  return Status(Code::kUnavailable, "read density", id, "not tracked (no cgroup)");
}

nlohmann::json LocalNode::DensityInfo() { return density::NodeDensityJson(density_->Node()); }

Status LocalNode::AdoptSandbox(const std::string& id) {
  if (Fncall(id)) return Status::Ok();  // made again from its record: nothing runs to adopt
  {
    MutexLock lock(&mu_);
    if (sandboxes_.count(id)) return Status(Code::kConflict, "adopt", id, "already running here");
  }
  // A microVM leaves a record of its own; waiting for the backend's start is fine here (it
  // runs once, at the daemon's start).
  bool microvm = false, wired = false;
  std::unique_ptr<runtime::Instance> inst;
  runtime::vm::MicrovmBackend* vm = nullptr;
  {
    MutexLock lock(&vm_mu_);
    while (!vm_done_) lock.Wait(vm_cv_);
    vm = microvm_.get();  // set once, before vm_done_, and kept until the node goes
  }
  if (vm && vm->Owns(id)) {
    microvm = true;
    if (auto rec = vm->ReadRecord(id); rec.ok()) wired = rec->value("wired", false);
    inst = WARREN_TRY(vm->Adopt(id));
  } else {
    inst = WARREN_TRY(container_->Adopt(id));
  }
  if (net_) {
    // A sandbox made without a node namespace (fncall runners) has no network record.
    Status st = net_->Adopt(id, inst->host_pid());
    if (!st.ok() && st.code() != Code::kNotFound)
      spdlog::warn("adopt network of {}: {}", id, st.ToString());
  }
  auto conn = std::make_shared<AgentConn>(id, inst->TakeControlSocket());
  std::vector<std::shared_ptr<ExecRecord>> recs;
  std::shared_ptr<ExecJournal> journal;
  if (!opts_.spill_dir.empty()) {
    std::vector<ExecSpill::Loaded> loaded;
    journal = ExecJournal::Load(JournalPath(id), &loaded);
    // Daemons before the journal kept a directory of files per exec; those records are lost.
    (void)image::RemoveTree(opts_.spill_dir + "/" + id);
    for (auto& l : loaded) recs.push_back(ExecRecord::Restore(std::move(l), id, conn->budget()));
  }
  conn->AdoptExecs(std::move(recs));
  runtime::Instance* adopted = inst.get();
  Register(id, std::move(inst), conn, microvm, wired, std::move(journal));
  Track(id, adopted, microvm, 0, 0);
  // The chunked layers it reads through blobfsd, as its create noted them.
  if (std::ifstream in(LazyRecordPath(id)); in) {
    std::vector<std::string> layers;
    for (std::string d; std::getline(in, d);)
      if (!d.empty()) layers.push_back(d);
    MutexLock lock(&mu_);
    if (!layers.empty()) lazy_of_[id] = std::move(layers);
  }
  // The agent answers with what it still has: output we lack, exits we missed.
  Status st = conn->Resume();
  if (!st.ok()) {
    (void)DeleteSandbox(id);
    return st.Context("adopt " + id);
  }
  MutexLock lock(&mu_);
  adopted_.insert(id);
  return Status::Ok();
}

int LocalNode::RunningExecs(const std::string& id) {
  if (Fncall(id)) return fncall_->RunningExecs(id);
  auto conn = Conn(id);
  return conn.ok() ? (*conn)->Running() : 0;
}

int LocalNode::ReapUnadopted(const std::set<std::string>& also_keep_spills) {
  std::set<std::string> also_keep = also_keep_spills;
  if (fncall_) fncall_->AddIds(&also_keep);  // their exec journals stay
  std::set<std::string> keep;
  {
    MutexLock lock(&mu_);
    for (auto& [id, e] : sandboxes_) {
      keep.insert(id);
      // A sandbox from the warm pool lives in the cgroup of its pool name.
      if (e->instance) {
        const std::string cg = e->instance->cgroup_name();
        if (!cg.empty()) keep.insert(cg);
      }
    }
  }
  int n = isolation::ReapStaleCgroups(opts_.cgroup_parent, keep);
  // Their leftovers: agent sockets and runtime files, network records, exec spills.
  for (const std::string& dir :
       {std::string("/run/warren/") + opts_.cgroup_parent, opts_.net.state_dir, opts_.spill_dir}) {
    if (dir.empty()) continue;
    if (DIR* d = opendir(dir.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        std::string id = name.substr(0, name.find('.'));
        if (!keep.count(id) && !(dir == opts_.spill_dir && also_keep.count(id)))
          names.push_back(dir + "/" + name);
      }
      closedir(d);
      for (auto& p : names) (void)image::RemoveTree(p);
    }
  }
  return n;
}

Status LocalNode::DeleteSandbox(const std::string& id) {
  if (Fncall(id)) return fncall_->Delete(id);
  std::shared_ptr<Entry> e;
  {
    MutexLock lock(&mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) {
      if (!creating_.count(id)) return NotFound("sandbox", id);
      doomed_.insert(id);  // its create destroys it when done
      return Status::Ok();
    }
    e = it->second;
    sandboxes_.erase(it);
  }
  density_->Forget(id);
  mux_.Remove(e->conn);
  e->conn->OnClosed("sandbox deleted");
  // Its namespace, held across its end: lent to a later sandbox if it comes back as new.
  UniqueFd netns = e->microvm ? UniqueFd() : KeepNetns(*e->instance);
  Status st = e->instance->Destroy().Context("delete " + id);
  NoteLazyLayers(id, {});
  if (net_) net_->Detach(id);
  GiveBackNetns(std::move(netns));
  if (!opts_.spill_dir.empty()) e->journal->Discard();
  return st;
}

std::vector<std::string> LocalNode::SandboxIds() const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, e] : sandboxes_) out.push_back(id);
  return out;
}

Result<std::shared_ptr<LocalNode::Entry>> LocalNode::Find(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return NotFound("sandbox", id);
  return it->second;
}

Status LocalNode::SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) {
  // Every run of a fncall sandbox sees its image as built: `/` is read-only to it, root or not,
  // and the one place it may write, its own /tmp, is gone when it ends. So any policy holds
  // already, and nothing ever changes.
  if (Fncall(id)) return Status::Ok();
  auto e = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  MutexLock lock(&e->mu);
  // A microVM's agent is the guest's root and does it itself; a paused one answers nothing.
  if (e->microvm && e->paused)
    return Status(Code::kConflict, "set filesystem policy", id,
                  "a paused microVM cannot change it; resume it first");
  return e->microvm ? e->conn->SetFsPolicy(policy) : e->instance->SetFilesystemPolicy(policy);
}

Result<isolation::ChangeReport> LocalNode::Changes(const std::string& id, const std::string& under,
                                                   size_t limit) {
  if (Fncall(id)) return isolation::ChangeReport{};
  auto e = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  MutexLock lock(&e->mu);  // not paused meanwhile
  if (e->microvm && e->paused)
    return Status(Code::kConflict, "read changes", id,
                  "a paused microVM cannot answer; resume it first");
  return e->microvm ? e->conn->ReadChanges(under, limit) : e->instance->ReadChanges(under, limit);
}

Result<SnapshotLayer> LocalNode::Snapshot(const std::string& id, const SnapshotSpec& spec) {
  if (Fncall(id))
    return Status(Code::kConflict, "snapshot", id,
                  "a fncall sandbox keeps nothing between runs: its image is its state");
  auto e = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  // The files this node wrote for its egress are its own, not the sandbox's: a sandbox made
  // from the snapshot gets its node's.
  std::set<std::string> skip;
  if (net_ && net_->Egress(id)) {
    for (const auto& f : EgressFiles()) skip.insert(f.first);
    skip.insert(kCaBundleFile);
  }
  return BuildSnapshotLayer(
      store_, id, spec, skip,
      [&](int dst, const std::string& work, const isolation::LayerTreeOptions& opts,
          isolation::LayerTreeStats* stats) {
        MutexLock lock(&e->mu);  // not paused or deleted meanwhile
        if (!e->microvm)
          return e->instance->WriteSnapshotTree(dst, !spec.workspace.empty(), opts, stats);
        if (e->paused)
          return Status(Code::kConflict, "snapshot", id,
                        "a paused microVM cannot answer; resume it first");
        return MicrovmSnapshotTree(store_, &mounts_, *e->conn, id, spec.workspace, dst, work, opts,
                                   stats);
      });
}

Result<MemoryFork> LocalNode::PrepareFork(const std::string& id) {
  if (Fncall(id)) return Status(Code::kUnavailable, "fork memory", id, "a fncall sandbox");
  auto e = WARREN_TRY(Find(id));
  if (!e->microvm) return Status(Code::kUnavailable, "fork memory", id, "not a microVM");
  runtime::vm::MicrovmBackend* vm = WARREN_TRY(Microvm());
  WARREN_RETURN_IF_ERROR(Touch(id));  // a hibernated parent wakes: its QEMU must answer
  MutexLock lock(&e->mu);             // not paused or deleted meanwhile
  if (e->paused)
    return Status(Code::kConflict, "fork", id, "a paused microVM cannot be copied; resume it");
  std::vector<ExecSpill::Loaded> execs;
  auto image = vm->CaptureFork(*e->instance, [&] { execs = e->conn->CopyRunningExecs(); });
  if (!image.ok()) return image.status().Context("fork " + id);
  // Its guest's clock stood still while it was copied.
  if (Status st = e->conn->SetGuestClock(); !st.ok())
    spdlog::warn("fork of {}: its clock was not set again: {}", id, st.ToString());
  MemoryFork out;
  out.ram_bytes = (*image)->ram_bytes;
  out.paused_ms = (*image)->paused_ms;
  out.capture_ms = (*image)->capture_ms;
  out.token = memory_forks_.Add(std::move(*image), std::move(execs), id);
  return out;
}

Status LocalNode::EndFork(const std::string& token) {
  memory_forks_.End(token);
  return Status::Ok();
}

Status LocalNode::PauseSandbox(const std::string& id) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("pause", id);
  auto e = WARREN_TRY(Find(id));
  MutexLock lock(&e->mu);
  WARREN_RETURN_IF_ERROR(e->instance->Pause().Context("pause " + id));
  e->paused = true;
  density_->SetUserPaused(id, true);
  return Status::Ok();
}

Status LocalNode::ResumeSandbox(const std::string& id) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("resume", id);
  auto e = WARREN_TRY(Find(id));
  bool files;
  {
    MutexLock lock(&e->mu);
    WARREN_RETURN_IF_ERROR(e->instance->Resume().Context("resume " + id));
    e->paused = false;
    density_->SetUserPaused(id, false);
    files = std::exchange(e->egress_files_pending, false);
  }
  if (files) ConfigureEgress(id);
  return Status::Ok();
}

void LocalNode::DeleteAll() {
  memory_forks_.Clear();
  std::vector<std::string> ids;
  {
    MutexLock lock(&mu_);
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
  if (Fncall(id)) return fncall_->StartExec(id, exec_id, spec);
  auto entry = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  const std::shared_ptr<AgentConn>& conn = entry->conn;
  auto rec =
      std::make_shared<ExecRecord>(exec_id, id, spec.max_output, spec.binary, conn->budget());
  const bool tty = spec.tty.has_value();
  rec->SetInput(spec.stdin_open || spec.channel || tty, tty);
  rec->SetCommand(spec.argv);
  if (!opts_.spill_dir.empty() && !spec.channel) {
    auto spill = entry->journal->Begin({{"id", exec_id},
                                        {"argv", spec.argv},
                                        {"binary", spec.binary},
                                        {"stdin_open", spec.stdin_open || tty},
                                        {"tty", tty},
                                        {"max_output", spec.max_output},
                                        {"started_unix", UnixNow()}});
    // Without its spill the exec still runs; it just would not survive a daemon restart.
    if (spill.ok())
      rec->AttachSpill(std::move(*spill));
    else
      spdlog::warn("exec {}: {}", exec_id, spill.status().ToString());
  }
  if (spec.on_record) spec.on_record(rec);
  if (!spec.channel) {
    if (auto defaults = EgressEnvDefaults(id); !defaults.empty()) {
      ExecSpec with = spec;
      with.env_defaults.insert(defaults.begin(), defaults.end());
      WARREN_RETURN_IF_ERROR(conn->StartExec(rec, with));
      return rec;
    }
  }
  WARREN_RETURN_IF_ERROR(conn->StartExec(rec, spec));
  return rec;
}

Result<std::shared_ptr<ExecRecord>> LocalNode::GetExec(const std::string& id,
                                                       const std::string& exec_id) {
  if (Fncall(id)) return fncall_->GetExec(id, exec_id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  auto rec = conn->FindExec(exec_id);
  if (!rec) return NotFound("exec", exec_id);
  return rec;
}

Result<std::vector<ExecSummary>> LocalNode::ExecHistory(const std::string& id) {
  if (Fncall(id)) return fncall_->ExecHistory(id);
  auto conn = WARREN_TRY(Conn(id));
  return conn->ExecHistory();
}

Status LocalNode::SignalExec(const std::string& id, const std::string& exec_id, int sig) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("signal " + exec_id, id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  return conn->Signal(exec_id, sig);
}

Status LocalNode::WriteExecStdin(const std::string& id, const std::string& exec_id,
                                 std::string_view data, bool eof) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("stdin " + exec_id, id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  auto rec = conn->FindExec(exec_id);
  if (!rec) return NotFound("exec", exec_id);
  if (!rec->stdin_open())
    return Status(Code::kConflict, "write input", exec_id,
                  "the command was started without `stdin_open` or `tty`");
  if (rec->done()) return Status(Code::kConflict, "write input", exec_id, "the command has ended");
  return conn->SendStdin(exec_id, data, eof);
}

Result<std::string> LocalNode::Screenshot(const std::string& id) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("screenshot", id);
  auto e = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  if (e->instance->has_machine_screen()) {
    // QEMU's own screen: a paused VM's QEMU is frozen and would answer nothing (checked, not
    // held: a pause meanwhile makes this one time out).
    {
      MutexLock lock(&e->mu);
      if (e->paused)
        return Status(Code::kConflict, "take a screenshot", id, "the sandbox is paused");
    }
    return e->instance->MachineScreenshot();
  }
  return e->conn->Screenshot();
}

Status LocalNode::DesktopInput(const std::string& id, const std::vector<InputStep>& steps) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("input", id);
  auto e = WARREN_TRY(Find(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  if (e->instance->has_machine_screen()) {
    {
      MutexLock lock(&e->mu);
      if (e->paused) return Status(Code::kConflict, "send input", id, "the sandbox is paused");
    }
    return e->instance->MachineInput(steps);
  }
  return e->conn->DesktopInput(steps);
}

Status LocalNode::ResizeExec(const std::string& id, const std::string& exec_id, TerminalSize size) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("resize " + exec_id, id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  auto rec = conn->FindExec(exec_id);
  if (!rec) return NotFound("exec", exec_id);
  if (!rec->tty())
    return Status(Code::kConflict, "resize terminal", exec_id, "the command has no `tty`");
  if (rec->done())
    return Status(Code::kConflict, "resize terminal", exec_id, "the command has ended");
  return conn->Resize(exec_id, size);
}

Status LocalNode::WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                            std::string_view data) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("write " + path, id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  return conn->WriteFile(path, mode, data);
}

Result<std::string> LocalNode::ReadFile(const std::string& id, const std::string& path,
                                        uint64_t max) {
  if (Fncall(id)) return fncall::FncallSandboxes::NoState("read " + path, id);
  auto conn = WARREN_TRY(Conn(id));
  WARREN_RETURN_IF_ERROR(Touch(id));
  return conn->ReadFile(path, max);
}

size_t LocalNode::live_sandboxes() const {
  MutexLock lock(&mu_);
  return sandboxes_.size();
}

nlohmann::json LocalNode::LazyInfo() {
  if (!lazy_) return {{"error", lazy_error_}};
  const blobfs::BlobfsStats s = lazy_->Stats();
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : s.layers) layers.push_back(blobfs::LayerStatsJson(l));
  return {{"daemon_pid", lazy_->pid()},
          {"restarts", lazy_->restarts()},
          {"cache",
           {{"bytes", s.cache_bytes},
            {"chunks", s.cache_chunks},
            {"high_bytes", s.cache_high},
            {"low_bytes", s.cache_low},
            {"evictions", s.cache_evictions},
            {"write_errors", s.cache_write_errors},
            {"corrupt", s.cache_corrupt}}},
          {"layers", std::move(layers)}};
}

nlohmann::json LocalNode::Info() {
  nlohmann::json backends = {"container"}, vm;
  {
    MutexLock lock(&vm_mu_);
    if (microvm_)
      backends.push_back("microvm"), backends.push_back("vm"), vm = microvm_->Info();
    else
      vm = {{"error", vm_done_ ? vm_error_ : "starting"}};
  }
  if (fncall_) backends.push_back("fncall");
  nlohmann::json j = {
      {"name", opts_.name},
      {"backends", backends},
      {"microvm", vm},
      {"cgroups", isolation::CgroupLayoutName()},
      {"cgroup_parent", opts_.cgroup_parent},
      {"hardening", opts_.unsafe_no_seccomp_landlock ? "reduced (benchmark mode)" : "full"},
      {"sandboxes", live_sandboxes()},
      {"layer_mounts", mounts_.live()},
      {"uid_slots_used", uids_.used()},
      {"uid_slots", opts_.uid_slots},
      {"warm_pool", WarmInfo()},
      {"network", net_ ? net_->Info() : nlohmann::json{{"error", net_error_}}}};
  if (!net_ && own_bare_netns_) j["network"]["pool"] = own_bare_netns_->Info();
  if (fncall_) j["fncall_sandboxes"] = fncall_->size();
  if (calls_) j["fncall"] = calls_->Stats();  // its runners
  j["layers_on_demand"] = LazyInfo();
  j["density"] = DensityInfo();
  return j;
}

}  // namespace warren::node
