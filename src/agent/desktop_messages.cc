#include "agent/desktop_messages.h"

#include <string>

namespace warren::agent {
namespace {

using nlohmann::json;
using K = agent::InputStep::Kind;

std::string Utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

}  // namespace

bool DecodeUtf8(const std::string& in, std::u32string* out) {
  out->clear();
  for (size_t i = 0; i < in.size();) {
    const auto b = static_cast<unsigned char>(in[i]);
    int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= in.size() + (n == 0 ? 1 : 0)) return false;
    char32_t c = n == 0 ? b : b & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const auto cb = static_cast<unsigned char>(in[i + static_cast<size_t>(k)]);
      if ((cb & 0xc0) != 0x80) return false;
      c = (c << 6) | (cb & 0x3f);
    }
    if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return false;
    out->push_back(c);
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

json InputStepsToJson(const std::vector<agent::InputStep>& steps) {
  json out = json::array();
  for (const auto& s : steps) {
    switch (s.kind) {
      case K::kMove:
        out.push_back({{"k", "move"}, {"x", s.x}, {"y", s.y}});
        break;
      case K::kButton:
        out.push_back({{"k", "button"}, {"b", s.button}, {"down", s.down}});
        break;
      case K::kKeys:
        out.push_back({{"k", "keys"}, {"ks", s.keysyms}});
        break;
      case K::kText:
        out.push_back({{"k", "text"}, {"t", Utf8(s.text)}});
        break;
      case K::kWait:
        out.push_back({{"k", "wait"}, {"ms", s.ms}});
        break;
    }
  }
  return out;
}

Result<std::vector<agent::InputStep>> ParseInputSteps(const json& j) {
  if (!j.is_array() || j.size() > kMaxInputSteps)
    return Invalid("input steps: an array of at most " + std::to_string(kMaxInputSteps));
  std::vector<agent::InputStep> steps;
  size_t typed = 0;
  uint32_t waited = 0;
  for (const json& e : j) {
    if (!e.is_object() || !e.contains("k") || !e["k"].is_string())
      return Invalid("input steps: each is an object with `k`");
    const std::string k = e["k"].get<std::string>();
    agent::InputStep s;
    auto num = [&](const char* f, int lo, int hi, int* out) -> Status {
      if (!e.contains(f) || !e[f].is_number_integer())
        return Invalid("input step " + k + ": `" + f + "`");
      const int64_t v = e[f].get<int64_t>();
      if (v < lo || v > hi) return Invalid("input step " + k + ": `" + f + "` out of range");
      *out = static_cast<int>(v);
      return Status::Ok();
    };
    if (k == "move") {
      s.kind = K::kMove;
      WARREN_RETURN_IF_ERROR(num("x", 0, agent::DisplaySize::kMaxWidth, &s.x));
      WARREN_RETURN_IF_ERROR(num("y", 0, agent::DisplaySize::kMaxHeight, &s.y));
    } else if (k == "button") {
      s.kind = K::kButton;
      WARREN_RETURN_IF_ERROR(num("b", 1, 7, &s.button));
      if (!e.contains("down") || !e["down"].is_boolean())
        return Invalid("input step button: `down`");
      s.down = e["down"].get<bool>();
    } else if (k == "keys") {
      s.kind = K::kKeys;
      if (!e.contains("ks") || !e["ks"].is_array() || e["ks"].empty() || e["ks"].size() > 8)
        return Invalid("input step keys: `ks` is 1 to 8 keysyms");
      for (const json& ks : e["ks"]) {
        if (!ks.is_number_unsigned() || ks.get<uint64_t>() > 0x1ffffff)
          return Invalid("input step keys: a keysym is a number");
        s.keysyms.push_back(ks.get<uint32_t>());
      }
    } else if (k == "text") {
      s.kind = K::kText;
      if (!e.contains("t") || !e["t"].is_string() ||
          !DecodeUtf8(e["t"].get<std::string>(), &s.text))
        return Invalid("input step text: `t` is UTF-8 text");
      typed += s.text.size();
      if (typed > kMaxTypedChars)
        return Invalid("input steps: more than " + std::to_string(kMaxTypedChars) + " characters");
    } else if (k == "wait") {
      s.kind = K::kWait;
      int ms = 0;
      WARREN_RETURN_IF_ERROR(num("ms", 0, static_cast<int>(kMaxWaitMs), &ms));
      s.ms = static_cast<uint32_t>(ms);
      waited += s.ms;
      if (waited > kMaxTotalWaitMs)
        return Invalid("input steps: more than " + std::to_string(kMaxTotalWaitMs) +
                       " ms of waits");
    } else {
      return Invalid("input steps: unknown step `" + k + "`");
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

}  // namespace warren::agent
