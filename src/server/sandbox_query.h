// GET /v1/sandboxes as a typed query: the filters (state, labels, backend, image, a fork's
// parent) and a page of the matches in creation order. A dashboard over 100,000 sandboxes
// asks for one page at a time and the number that match, never the whole list.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/backend_kind.h"
#include "server/sandbox_record.h"

namespace warren::server {

struct SandboxQuery {
  static constexpr size_t kMaxLimit = 1000;

  bool matches_none = false;  // state=deleted: the contract's state no record is in
  std::optional<SandboxState> state;
  std::optional<std::string> parent;  // a fork's children (their lineage.parent)
  std::optional<runtime::BackendKind> backend;
  std::optional<std::string> image;  // the image asked for, as the spec names it
  std::vector<std::pair<std::string, std::string>> labels;  // all must match
  // Paging: none (limit 0) answers every match, as before paging existed.
  size_t limit = 0;
  // Where the page starts: after this (created_at, id), from the previous page's token.
  std::optional<std::pair<std::string, std::string>> after;

  bool Matches(const SandboxRecord& sb) const;
};

// Parses the query string's parameters; an unknown one, a bad value or a page token this
// server did not make is kInvalid naming it.
Result<SandboxQuery> ParseSandboxQuery(const std::map<std::string, std::string>& params);

struct SandboxPage {
  std::vector<const SandboxRecord*> items;  // creation order, at most limit
  size_t total = 0;                         // every match, across all pages
  std::string next_page_token;              // "" on the last page
};

// The page of `candidates` (the ones the caller may see) that `q` asks for.
SandboxPage SelectPage(const std::vector<const SandboxRecord*>& candidates, const SandboxQuery& q);

// The opaque token that resumes a listing after `sb`.
std::string PageTokenAfter(const SandboxRecord& sb);

}  // namespace warren::server
