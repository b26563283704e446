// The sandbox records of this API server: typed reads and writes over the state store, every
// state change through one Transition() that refuses illegal moves, and counts by backend and
// state kept as records change (a metrics scrape costs the same at 5 sandboxes as at 5,000).
//
// Every write compares the version it read: a read-modify-write of a record (Transition,
// Update) cannot lose a concurrent change to the same record, made by another thread or by
// another API server of a cluster (it is made again on the newer record). So no lock is held
// across the store's round trips: creates of different sandboxes write at once (a lock here
// made one API server write one record at a time, ~3 etcd round trips a create).
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/sandbox_record.h"
#include "server/shares.h"

namespace warren::server {

class StateStore;

class SandboxTable {
 public:
  // Counts what `store` holds (records that do not parse are logged and left out).
  explicit SandboxTable(StateStore* store);

  // Every record that parses, in id order (none, logged, when the store cannot be read).
  std::vector<SandboxRecord> List();
  Result<std::vector<SandboxRecord>> ListOrError();
  // The same, in no particular order and shared, not copied: read from the store each time
  // (so another API server's writes show), parsing only the records whose stored text changed
  // since the last read. A list of 100,000 parsed them all on every page (47 us a record).
  using Shared = std::shared_ptr<const SandboxRecord>;
  Result<std::vector<Shared>> ListShared();
  // One record, read from the store each time; parsed again only if its stored text changed
  // since this table last parsed it (once per exec, file or get of a sandbox; 47 us a record).
  Result<SandboxRecord> Get(const std::string& id);
  // A record as this table wrote it, with the store's stamp of that version: a change made
  // next by the same writer starts from it rather than reading the record again (and reads
  // it again only if someone else wrote it since).
  struct Version {
    SandboxRecord rec;
    std::string stamp;
  };
  // A new record (its state as given, normally creating); conflict if the id exists. A store
  // that counts shares refuses it (quota) when its owner would go past `limits`. `written`:
  // the version written.
  Status Insert(const SandboxRecord& rec, const ShareLimits& limits = {},
                Version* written = nullptr);
  // Moves sandbox `id` to `to`, applying `edit` to the record in the same write (it sees the
  // state being left and must not change it). Refused
  // (conflict, "sandbox is STATE") when the sandbox is not in one of `from` (if given) or the
  // move is not legal (CanMove). Returns the record as written.
  // `known`: the version this writer last wrote (see Version).
  Result<SandboxRecord> Transition(const std::string& id, SandboxState to,
                                   std::initializer_list<SandboxState> from = {},
                                   const std::function<void(SandboxRecord&)>& edit = nullptr,
                                   const Version* known = nullptr);
  // Changes fields other than the state; `edit` may refuse (its status is returned, nothing
  // written) and must not change the state.
  Result<SandboxRecord> Update(const std::string& id,
                               const std::function<Status(SandboxRecord&)>& edit);
  // Removes the record as it is now (a change made meanwhile is read again first) and returns
  // what was removed; kNotFound when another removal came first, so exactly one caller gets
  // the record (and gives back what it held).
  Result<SandboxRecord> Remove(const std::string& id);

  // (backend, state) -> n
  using Counts = std::map<std::pair<runtime::BackendKind, SandboxState>, int64_t>;
  Counts counts() const;

 private:
  // Reads the record, applies `change` (which may refuse) and writes it if no one wrote it
  // since; otherwise again, on the newer record.
  Result<SandboxRecord> Modify(const std::string& id,
                               const std::function<Status(SandboxRecord&)>& change,
                               const Version* known = nullptr);
  void CountLocked(const SandboxRecord& rec, int64_t delta) REQUIRES(mu_);

  StateStore* const store_;
  mutable Mutex mu_;  // counts_ only
  Counts counts_ GUARDED_BY(mu_);
  // The records ListShared and Get parsed, by id, with the text each was parsed from.
  struct Parsed {
    std::string text;
    Shared rec;
  };
  Mutex parsed_mu_;
  std::unordered_map<std::string, Parsed> parsed_ GUARDED_BY(parsed_mu_);
};

}  // namespace warren::server
