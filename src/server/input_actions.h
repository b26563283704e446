// POST /v1/sandboxes/{id}/input: a client's actions (move, click, drag, scroll, key, type,
// wait) checked against the sandbox's screen and turned into the steps its agent performs.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "agent/display.h"
#include "base/status.h"

namespace warren::server {

// At most this many actions per request.
constexpr size_t kMaxInputActions = 1000;

// {"actions": [...]}: a 400 names the action (its index and type) and what is wrong with it.
Result<std::vector<agent::InputStep>> ParseInputActions(const nlohmann::json& body,
                                                        agent::DisplaySize screen);

// A key combination like "ctrl+shift+t", "Return", "alt+F4" or "a": its keysyms, modifiers
// first. Names are X keysym names or common aliases (enter, esc, pageup, ...), any case.
Result<std::vector<uint32_t>> ParseKeyCombo(const std::string& combo);

}  // namespace warren::server
