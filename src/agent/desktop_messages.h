// The desktop's messages between node and agent (agent/protocol.h): input steps as JSON and
// back, strictly parsed on both sides. Shared by the node's wire to other nodes too.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "agent/display.h"
#include "base/status.h"

namespace warren::agent {

// Limits of one input message, whoever sends it.
constexpr size_t kMaxInputSteps = 4096;
constexpr size_t kMaxTypedChars = 16384;
constexpr uint32_t kMaxWaitMs = 5000;
// All the waits of one message together: the agent serves its sandbox's other requests only
// between messages.
constexpr uint32_t kMaxTotalWaitMs = 10000;

// UTF-8 to code points; false on a malformed sequence.
bool DecodeUtf8(const std::string& in, std::u32string* out);

// [{"k": "move", "x", "y"} | {"k": "button", "b", "down"} | {"k": "keys", "ks": [keysym...]}
//  | {"k": "text", "t": UTF-8} | {"k": "wait", "ms"}]
nlohmann::json InputStepsToJson(const std::vector<agent::InputStep>& steps);
Result<std::vector<agent::InputStep>> ParseInputSteps(const nlohmann::json& j);

}  // namespace warren::agent
