// LocalNode: the node agent running inside `warren serve`. Thread-safe: creates and deletes
// of different sandboxes run in parallel.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "base/thread_annotations.h"
#include "image/erofs_mount_cache.h"
#include "image/layer_store.h"
#include "isolation/uid_allocator.h"
#include "net/network.h"
#include "node/agent_mux.h"
#include "node/density/density_manager.h"
#include "node/fncall/call_pool.h"
#include "node/lazy_layers.h"
#include "node/memory_forks.h"
#include "node/node_api.h"
#include "node/warm_pool.h"
#include "runtime/create_faults.h"
#include "runtime/vm/microvm_backend.h"

namespace warren::fncall {
class FncallSandboxes;
}

namespace warren::node {

struct LocalNodeOptions {
  std::string name = "local";
  std::string agent_path;                // default: next to the executable
  uint32_t uid_base = 1u << 20;          // first host uid handed to sandboxes
  uint32_t uid_slots = 16384;            // ranges of 65536 ids
  std::string cgroup_parent = "warren";  // this node's cgroup parent directory name
  // Benchmarks only (`warren serve --unsafe-no-seccomp-landlock`): sandboxes without seccomp
  // and Landlock, to measure what those layers cost. Never for real workloads.
  bool unsafe_no_seccomp_landlock = false;
  // Where exec records are spilled (DATA_DIR/execs) so a restarted node can rebuild them;
  // empty: not spilled.
  std::string spill_dir;
  // Sandbox networking (egress mode, the namespace pool); off: every sandbox gets a
  // namespace of its own with only lo, and egress is refused.
  bool network = true;
  net::NetworkOptions net;
  // microVMs (backend microvm): off, or where QEMU or a guest kernel is missing, creates
  // with that backend are refused with the reason.
  bool microvm = true;
  runtime::vm::MicrovmOptions vm;
  // Chunked layers (loaded on demand by a blobfsd of this node); `lazy.source` empty: none,
  // and a create naming a chunked layer is refused.
  LazyLayersOptions lazy;
  // Ready container sandboxes kept per template in use, for creates with network none (see
  // node/warm_pool.h); 0: none.
  size_t warm_pool = 2;
  // Overcommit, idle reclaim, hibernation and the node's swap (node/density). With a fake
  // container backend the node touches no host memory settings: admission only.
  density::DensityOptions density;
  // Failure injection (tests only): asked before each step of a create (runtime/create_faults.h).
  runtime::CreateFaults* create_faults = nullptr;
  // Unit tests only: the container backend to use instead of the real one (a fake, see
  // tests/unit/fake_backend.h). The node then prepares nothing on the host for it.
  std::function<Result<std::unique_ptr<runtime::Backend>>()> container_backend;
};

class LocalNode : public NodeApi {
 public:
  static Result<std::unique_ptr<LocalNode>> Start(const LocalNodeOptions& opts,
                                                  image::LayerStore* store);
  ~LocalNode() override;

  std::string name() const override { return opts_.name; }
  // fncall, a service of this node: the runner pool (POST /v1/calls) and `backend: fncall`
  // sandboxes, whose execs run on it. Started once the node is (its runners are sandboxes of
  // this node); until then fncall creates are refused.
  Status StartFncall(fncall::ImageResolver resolve, fncall::PoolOptions opts);
  fncall::CallService* calls() { return calls_.get(); }
  // In a cluster: this node's egress proxy serves the package mirror's peers on HOST:PORT
  // (net/mirror_peers.h) and asks `peers` for what it misses; the port taken. `peers`
  // outlives the node. Unavailable without sandbox networking.
  Result<uint16_t> ServeMirrorPeers(const std::string& host, uint16_t port,
                                    const net::MirrorPeers* peers);
  Result<nlohmann::json> RunCall(const nlohmann::json& request, bool batch) override;
  Result<SandboxRuntime> CreateSandbox(const NodeSandboxSpec& spec) override;
  Status DeleteSandbox(const std::string& id) override;
  Status AdoptSandbox(const std::string& id) override;
  int RunningExecs(const std::string& id) override;
  int ReapUnadopted(const std::set<std::string>& also_keep = {}) override;
  Status SetNetwork(const std::string& id, const net::Policy& policy) override;
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) override;
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string& under,
                                          size_t limit) override;
  Result<SnapshotLayer> Snapshot(const std::string& id, const SnapshotSpec& spec) override;
  Result<MemoryFork> PrepareFork(const std::string& id) override;
  Status EndFork(const std::string& token) override;
  Status PauseSandbox(const std::string& id) override;
  Status ResumeSandbox(const std::string& id) override;
  Result<std::shared_ptr<ExecRecord>> StartExec(const std::string& id, const std::string& exec_id,
                                                const ExecSpec& spec) override;
  Result<std::shared_ptr<ExecRecord>> GetExec(const std::string& id,
                                              const std::string& exec_id) override;
  Status SignalExec(const std::string& id, const std::string& exec_id, int sig) override;
  Result<std::vector<ExecSummary>> ExecHistory(const std::string& id) override;
  Status ResizeExec(const std::string& id, const std::string& exec_id, TerminalSize size) override;
  Result<std::string> Screenshot(const std::string& id) override;
  Status DesktopInput(const std::string& id, const std::vector<InputStep>& steps) override;
  Status WriteExecStdin(const std::string& id, const std::string& exec_id, std::string_view data,
                        bool eof) override;
  Status WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                   std::string_view data) override;
  Result<std::string> ReadFile(const std::string& id, const std::string& path,
                               uint64_t max) override;
  nlohmann::json Info() override;
  Result<density::SandboxDensity> Density(const std::string& id) override;
  void SetOnSandboxLost(SandboxLostFn fn) override;

  size_t live_sandboxes() const;
  // The sandboxes this node holds (made, adopted), by id; not fncall ones (records only).
  std::vector<std::string> SandboxIds() const;
  // Deletes every sandbox (daemon shutdown).
  void DeleteAll();

 private:
  struct Entry {
    std::unique_ptr<runtime::Instance> instance;
    std::shared_ptr<AgentConn> conn;
    std::shared_ptr<ExecJournal> journal;  // its exec records on disk (exec_spill.h)
    // A frozen agent answers nothing: egress files for a paused sandbox wait for its resume.
    Mutex mu;
    bool paused GUARDED_BY(mu) = false;
    bool egress_files_pending GUARDED_BY(mu) = false;
    bool microvm = false;
    bool wired = false;  // has an egress link (a microVM without one cannot switch to egress)
    // Its kCaBundleFile: -1 not written by this daemon yet, 0 without the image's roots (none
    // found, or the write failed), 1 the image's roots and the node CA.
    std::atomic<int> ca_bundle{-1};
  };
  LocalNode(const LocalNodeOptions& opts, image::LayerStore* store);
  // Start's two halves: the real container backend (host directories, the sealed agent, the
  // seccomp programs), then everything over whichever container backend the node has.
  Status StartContainerBackend();
  Status StartServices();
  Result<std::shared_ptr<Entry>> Find(const std::string& id);
  Result<std::shared_ptr<AgentConn>> Conn(const std::string& id);
  std::string JournalPath(const std::string& id) const {
    return opts_.spill_dir + "/" + id + ".journal";
  }
  // Points an egress sandbox's resolver and package tools at the node (best effort: an
  // image without /etc/apt simply has no apt to configure).
  void ConfigureEgress(const std::string& id);
  // The egress proxy's HTTPS cache: the node CA in the sandbox (kEgressCaFile, with the
  // other egress files) and its roots plus the CA in one file (kCaBundleFile), and the
  // variables pointing tools at them, added to each exec of a sandbox in egress mode.
  static constexpr const char* kEgressCaFile = "/etc/warren-egress-ca.pem";
  static constexpr const char* kCaBundleFile = "/etc/warren-ca-certificates.pem";
  void WriteCaBundle(const std::string& id);
  // Where images keep their roots in one file: Debian/Ubuntu/Alpine, Fedora/RHEL, SUSE, others.
  static constexpr const char* kRootBundles[] = {"/etc/ssl/certs/ca-certificates.crt",
                                                 "/etc/pki/tls/certs/ca-bundle.crt",
                                                 "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"};
  std::map<std::string, std::string> EgressEnvDefaults(const std::string& id);
  std::vector<std::pair<std::string, std::string>> EgressFiles() const;
  void Register(const std::string& id, std::unique_ptr<runtime::Instance> inst,
                std::shared_ptr<AgentConn> conn, bool microvm = false, bool wired = false,
                std::shared_ptr<ExecJournal> journal = nullptr);
  // Hands a registered sandbox to density, with its request (0: read its limit, adopted).
  void Track(const std::string& id, runtime::Instance* inst, bool microvm, uint64_t memory_bytes,
             double cpus);
  // An operation is about to reach sandbox `id`'s processes: it wakes if hibernated.
  Status Touch(const std::string& id);
  nlohmann::json DensityInfo();
  std::unique_ptr<density::DensityManager> density_;
  MemoryForks memory_forks_;
  // backend->Create in a namespace of the node's network under `policy` (none: no namespace of
  // ours), which the sandbox then keeps; a failure leaves nothing attached.
  Result<std::unique_ptr<runtime::Instance>> CreateAttached(runtime::Backend* backend,
                                                            runtime::SandboxConfig& cfg,
                                                            const net::Policy* policy,
                                                            bool keep_link);
  // The warm pool's two halves: making a sandbox ahead of demand, and giving one back.
  Result<WarmSandbox> MakeWarm(const runtime::SandboxConfig& tmpl);
  void DiscardWarm(WarmSandbox& w);
  // A create served from the pool: the waiting sandbox becomes `cfg.id`.
  Status ClaimWarm(WarmSandbox& w, const runtime::SandboxConfig& cfg);

  LocalNodeOptions opts_;
  image::LayerStore* store_;
  image::ErofsMountCache mounts_;
  isolation::UidAllocator uids_;
  std::unique_ptr<runtime::Backend> container_;
  // The microvm backend starts in the background (it probes KVM and may extract the guest
  // kernel): creates wait for it, /v1/nodes says "starting" meanwhile.
  Result<runtime::vm::MicrovmBackend*> Microvm();
  // The backend that makes sandboxes of `kind` (waits for the VM backend's start).
  Result<runtime::Backend*> BackendFor(runtime::BackendKind kind);
  std::thread vm_start_;
  Mutex vm_mu_;
  std::condition_variable_any vm_cv_;
  bool vm_done_ GUARDED_BY(vm_mu_) = false;
  std::unique_ptr<runtime::vm::MicrovmBackend> microvm_ GUARDED_BY(vm_mu_);
  std::string vm_error_ GUARDED_BY(vm_mu_);
  std::unique_ptr<net::Network> net_;
  std::string net_error_;  // why there is no sandbox networking, if there is none
  // Without net_: the bare namespaces sandboxes get instead (net/bare_netns_pool.h).
  std::unique_ptr<net::BareNetnsPool> own_bare_netns_;
  // Network's pool or our own (null: neither, as with a fake backend).
  net::BareNetnsPool* bare_netns();
  // The namespace of a sandbox about to be destroyed, to give back after (empty: none).
  UniqueFd KeepNetns(runtime::Instance& inst);
  void GiveBackNetns(UniqueFd netns);
  AgentMux mux_;
  std::unique_ptr<WarmPool> warm_;
  std::atomic<uint64_t> warm_claim_failures_{0};
  nlohmann::json WarmInfo();
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> sandboxes_ GUARDED_BY(mu_);
  std::set<std::string> adopted_ GUARDED_BY(mu_);
  // Creates under way, and those of them deleted meanwhile (a cluster API server that died
  // mid-create is cleaned up by another, whose delete can overtake the create): a doomed one
  // is destroyed as soon as it is made, never left running without a record.
  std::set<std::string> creating_ GUARDED_BY(mu_);
  std::set<std::string> doomed_ GUARDED_BY(mu_);
  Result<SandboxRuntime> CreateSandboxNow(const NodeSandboxSpec& spec);
  SandboxLostFn on_lost_ GUARDED_BY(mu_);
  // Whether `id` is a fncall sandbox, which the fncall service answers for.
  bool Fncall(const std::string& id);
  // Chunked layers: the metadata image and blob file of each in `cfg` (refused for VMs),
  // and the digests of those that are chunked.
  Result<std::vector<std::string>> PrepareLazyLayers(runtime::SandboxConfig& cfg, bool is_vm);
  // Remembers which chunked layers sandbox `id` uses (in memory and beside the daemon, for
  // a restarted node's adoption); empty `layers` forgets it.
  void NoteLazyLayers(const std::string& id, const std::vector<std::string>& layers);
  // blobfsd's verdict: `layer` ("" every chunked layer) cannot be read; its sandboxes are
  // killed and reported lost with `reason`.
  void FailLazy(const std::string& layer, const std::string& reason);
  std::string LazyRecordPath(const std::string& id) const {
    return opts_.lazy.run_dir + "/sandboxes/" + id;
  }
  // What blobfsd reports, for Info (/v1/nodes, /metrics, image inspect).
  nlohmann::json LazyInfo();
  std::unique_ptr<LazyLayers> lazy_;
  std::string lazy_error_;  // why chunked layers cannot be used here, if they cannot
  std::map<std::string, std::vector<std::string>> lazy_of_ GUARDED_BY(mu_);
  std::map<std::string, std::string> lost_reasons_ GUARDED_BY(mu_);
  std::unique_ptr<fncall::CallService> calls_;
  std::unique_ptr<fncall::FncallSandboxes> fncall_;
};

}  // namespace warren::node
