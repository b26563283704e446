// The languages fncall knows: how a submission is written, compiled (once) and run.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace warren::fncall {

struct Language {
  std::string name;
  std::string source;                  // the file the code is written to
  std::vector<std::string> compile;    // empty: nothing to compile
  std::vector<std::string> artifacts;  // what compile leaves for the runs ("*.class": by suffix)
  std::vector<std::string> run;        // argv; "{memory_mb}" is replaced by the call's memory
  bool in_process_python = false;      // run in the runner's warm interpreter (no exec)
  bool address_space_limit = true;     // false for VMs that reserve far more than they use
  uint64_t min_nproc = 0;              // JVMs count every thread as a process
};

// nullopt for an unknown language.
std::optional<Language> FindLanguage(const std::string& name);
// Names, for error messages and GET /v1/nodes.
std::vector<std::string> LanguageNames();

}  // namespace warren::fncall
