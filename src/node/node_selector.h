// Node selectors: the labels a sandbox asks its node to carry (`node_selector` in a spec), as
// Kubernetes' nodeSelector. Every node also carries `warren.node=NAME` without being told, so
// that a sandbox can be sent to the node another one runs on (a grader beside its rollout, a
// second install that should hit the first one's package cache). Header-only: the API's spec
// parser, `warren serve`'s one-node fleet and the cluster's placement all use it.
#pragma once

#include <cctype>
#include <map>
#include <string>

namespace warren::node {

using Labels = std::map<std::string, std::string>;

// The label every node carries, with its name as the value.
inline constexpr char kNodeNameLabel[] = "warren.node";
// Labels a node's operator may not set (`warren.` is Warren's own).
inline constexpr char kReservedLabelPrefix[] = "warren.";

// Why placement found no node for a selector (warren serve's one node says the same).
inline constexpr char kNoNodeCarriesSelector[] =
    "no ready node carries the labels of `node_selector`";

// A label key or value: 1-63 of [A-Za-z0-9._-] (a node name has the same shape).
inline bool ValidLabelPart(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

// True if node `name` with `labels` carries every label of `selector`.
inline bool SelectorMatches(const std::string& name, const Labels& labels, const Labels& selector) {
  for (const auto& [k, v] : selector) {
    if (k == kNodeNameLabel) {
      if (v != name) return false;
      continue;
    }
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace warren::node
