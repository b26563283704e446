#include "server/input_actions.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "agent/desktop_messages.h"

namespace warren::server {
namespace {

using agent::InputStep;
using nlohmann::json;
using K = InputStep::Kind;

// X keysym values (X11/keysymdef.h) of the keys a client names, with the usual aliases.
const std::map<std::string, uint32_t>& KeyNames() {
  static const std::map<std::string, uint32_t> kNames = [] {
    std::map<std::string, uint32_t> m = {
        {"ctrl", 0xffe3},      {"control", 0xffe3},   {"control_l", 0xffe3}, {"control_r", 0xffe4},
        {"shift", 0xffe1},     {"shift_l", 0xffe1},   {"shift_r", 0xffe2},   {"alt", 0xffe9},
        {"alt_l", 0xffe9},     {"alt_r", 0xffea},     {"meta", 0xffeb},      {"super", 0xffeb},
        {"super_l", 0xffeb},   {"win", 0xffeb},       {"cmd", 0xffeb},       {"return", 0xff0d},
        {"enter", 0xff0d},     {"kp_enter", 0xff8d},  {"escape", 0xff1b},    {"esc", 0xff1b},
        {"tab", 0xff09},       {"backspace", 0xff08}, {"delete", 0xffff},    {"del", 0xffff},
        {"insert", 0xff63},    {"home", 0xff50},      {"end", 0xff57},       {"pageup", 0xff55},
        {"page_up", 0xff55},   {"prior", 0xff55},     {"pagedown", 0xff56},  {"page_down", 0xff56},
        {"next", 0xff56},      {"left", 0xff51},      {"up", 0xff52},        {"right", 0xff53},
        {"down", 0xff54},      {"space", 0x20},       {"menu", 0xff67},      {"print", 0xff61},
        {"caps_lock", 0xffe5}, {"minus", 0x2d},       {"plus", 0x2b},        {"equal", 0x3d},
        {"comma", 0x2c},       {"period", 0x2e},      {"slash", 0x2f},       {"semicolon", 0x3b},
    };
    for (int i = 1; i <= 12; ++i)
      m["f" + std::to_string(i)] = 0xffbe + static_cast<uint32_t>(i - 1);
    return m;
  }();
  return kNames;
}

int ButtonOf(const std::string& name) {
  if (name == "left") return 1;
  if (name == "middle") return 2;
  if (name == "right") return 3;
  return 0;
}

}  // namespace

Result<std::vector<uint32_t>> ParseKeyCombo(const std::string& combo) {
  std::vector<uint32_t> keysyms;
  if (combo.empty() || combo.size() > 128) return Invalid("a key is like `ctrl+s` or `Return`");
  size_t start = 0;
  while (start <= combo.size()) {
    size_t plus = combo.find('+', start);
    // A `+` right after a separator (or alone) is the plus key itself: "ctrl++".
    if (plus == start && start < combo.size()) plus = combo.find('+', start + 1);
    std::string part =
        combo.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    if (part.empty()) return Invalid("empty key in `" + combo + "`");
    std::string lower = part;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (auto it = KeyNames().find(lower); it != KeyNames().end()) {
      keysyms.push_back(it->second);
    } else if (lower.size() > 2 && lower.size() <= 9 && lower.rfind("0x", 0) == 0 &&
               lower.find_first_not_of("0123456789abcdef", 2) == std::string::npos) {
      // A keysym by number, as a VNC viewer sends it (cli/vnc.cc): up to Unicode's 0x110ffff.
      const unsigned long v = std::stoul(lower.substr(2), nullptr, 16);
      if (v == 0 || v > 0x110ffff) return Invalid("keysym `" + part + "` out of range");
      keysyms.push_back(static_cast<uint32_t>(v));
    } else if (part.size() == 1 && static_cast<unsigned char>(part[0]) >= 0x20 &&
               static_cast<unsigned char>(part[0]) < 0x7f) {
      keysyms.push_back(static_cast<unsigned char>(part[0]));  // Latin-1: the keysym is the byte
    } else {
      return Invalid("unknown key `" + part + "` in `" + combo + "`");
    }
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  if (keysyms.size() > 8) return Invalid("at most 8 keys at once in `" + combo + "`");
  return keysyms;
}

Result<std::vector<InputStep>> ParseInputActions(const json& body, agent::DisplaySize screen) {
  if (!body.is_object() || !body.contains("actions") || !body["actions"].is_array())
    return Invalid("an input request is {\"actions\": [...]}");
  for (auto& [k, v] : body.items())
    if (k != "actions") return Invalid("unknown field `" + k + "` in input request");
  const json& actions = body["actions"];
  if (actions.empty() || actions.size() > kMaxInputActions)
    return Invalid("`actions` has 1 to " + std::to_string(kMaxInputActions) + " actions");
  std::vector<InputStep> steps;
  size_t typed = 0;
  uint32_t waited = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const json& a = actions[i];
    std::string type = a.is_object() && a.contains("type") && a["type"].is_string()
                           ? a["type"].get<std::string>()
                           : "";
    const std::string where =
        "action " + std::to_string(i) + (type.empty() ? "" : " (" + type + ")");
    auto bad = [&](const std::string& why) { return Invalid(where + ": " + why); };
    if (type.empty()) return bad("each action is an object with a `type`");
    auto allowed = [&](std::initializer_list<const char*> keys) -> Status {
      for (auto& [k, v] : a.items()) {
        bool ok = k == "type";
        for (const char* key : keys) ok = ok || k == key;
        if (!ok) return bad("unknown field `" + k + "`");
      }
      return Status::Ok();
    };
    auto integer = [&](const json& v, const char* what, int64_t lo, int64_t hi) -> Result<int> {
      if (!v.is_number_integer()) return bad("`" + std::string(what) + "` must be an integer");
      const int64_t n = v.get<int64_t>();
      if (n < lo || n > hi)
        return bad("`" + std::string(what) + "` must be " + std::to_string(lo) + " to " +
                   std::to_string(hi));
      return static_cast<int>(n);
    };
    // A point on the screen: {"x", "y"} fields, or a [x, y] pair under `key`.
    auto point = [&](const json& obj, const char* kx,
                     const char* ky) -> Result<std::pair<int, int>> {
      if (!obj.contains(kx) || !obj.contains(ky))
        return bad(std::string("needs `") + kx + "` and `" + ky + "`");
      int x = WARREN_TRY(integer(obj[kx], kx, 0, screen.width - 1));
      int y = WARREN_TRY(integer(obj[ky], ky, 0, screen.height - 1));
      return std::pair<int, int>{x, y};
    };
    auto pair = [&](const char* key) -> Result<std::pair<int, int>> {
      if (!a.contains(key) || !a[key].is_array() || a[key].size() != 2)
        return bad(std::string("`") + key + "` must be [x, y]");
      json xy = {{"x", a[key][0]}, {"y", a[key][1]}};
      return point(xy, "x", "y");
    };
    auto move_to = [&](std::pair<int, int> p) {
      InputStep s;
      s.kind = K::kMove;
      s.x = p.first;
      s.y = p.second;
      steps.push_back(s);
    };
    auto button = [&](int b, bool down) {
      InputStep s;
      s.kind = K::kButton;
      s.button = b;
      s.down = down;
      steps.push_back(s);
    };
    auto button_of = [&]() -> Result<int> {
      if (!a.contains("button")) return 1;
      if (!a["button"].is_string() || ButtonOf(a["button"].get<std::string>()) == 0)
        return bad("`button` must be left, middle or right");
      return ButtonOf(a["button"].get<std::string>());
    };
    auto maybe_move = [&]() -> Status {
      if (!a.contains("x") && !a.contains("y")) return Status::Ok();  // where the pointer is
      move_to(WARREN_TRY(point(a, "x", "y")));
      return Status::Ok();
    };
    if (type == "move") {
      WARREN_RETURN_IF_ERROR(allowed({"x", "y"}));
      move_to(WARREN_TRY(point(a, "x", "y")));
    } else if (type == "click") {
      WARREN_RETURN_IF_ERROR(allowed({"x", "y", "button", "count"}));
      WARREN_RETURN_IF_ERROR(maybe_move());
      const int b = WARREN_TRY(button_of());
      const int count = a.contains("count") ? WARREN_TRY(integer(a["count"], "count", 1, 3)) : 1;
      for (int c = 0; c < count; ++c) button(b, true), button(b, false);
    } else if (type == "mouse_down" || type == "mouse_up") {
      WARREN_RETURN_IF_ERROR(allowed({"x", "y", "button"}));
      WARREN_RETURN_IF_ERROR(maybe_move());
      button(WARREN_TRY(button_of()), type == "mouse_down");
    } else if (type == "drag") {
      WARREN_RETURN_IF_ERROR(allowed({"from", "to", "button"}));
      const auto from = WARREN_TRY(pair("from")), to = WARREN_TRY(pair("to"));
      const int b = WARREN_TRY(button_of());
      move_to(from);
      button(b, true);
      // Through a midpoint: some programs start a drag only on motion while pressed.
      move_to({(from.first + to.first) / 2, (from.second + to.second) / 2});
      move_to(to);
      button(b, false);
    } else if (type == "scroll") {
      WARREN_RETURN_IF_ERROR(allowed({"x", "y", "dx", "dy"}));
      WARREN_RETURN_IF_ERROR(maybe_move());
      const int dx = a.contains("dx") ? WARREN_TRY(integer(a["dx"], "dx", -100, 100)) : 0;
      const int dy = a.contains("dy") ? WARREN_TRY(integer(a["dy"], "dy", -100, 100)) : 0;
      if (dx == 0 && dy == 0) return bad("needs `dx` or `dy` (wheel steps, not 0)");
      // X's wheel is buttons: 4 up, 5 down, 6 left, 7 right.
      for (int n = 0; n < std::abs(dy); ++n)
        button(dy < 0 ? 4 : 5, true), button(dy < 0 ? 4 : 5, false);
      for (int n = 0; n < std::abs(dx); ++n)
        button(dx < 0 ? 6 : 7, true), button(dx < 0 ? 6 : 7, false);
    } else if (type == "key") {
      WARREN_RETURN_IF_ERROR(allowed({"keys", "repeat"}));
      if (!a.contains("keys") || !a["keys"].is_string()) return bad("`keys` is like \"ctrl+s\"");
      auto ks = ParseKeyCombo(a["keys"].get<std::string>());
      if (!ks.ok()) return bad(ks.status().message());
      const int repeat =
          a.contains("repeat") ? WARREN_TRY(integer(a["repeat"], "repeat", 1, 100)) : 1;
      for (int r = 0; r < repeat; ++r) {
        InputStep s;
        s.kind = K::kKeys;
        s.keysyms = *ks;
        steps.push_back(s);
      }
    } else if (type == "type") {
      WARREN_RETURN_IF_ERROR(allowed({"text"}));
      if (!a.contains("text") || !a["text"].is_string()) return bad("`text` must be a string");
      InputStep s;
      s.kind = K::kText;
      if (!agent::DecodeUtf8(a["text"].get<std::string>(), &s.text))
        return bad("`text` is not UTF-8");
      typed += s.text.size();
      if (typed > agent::kMaxTypedChars)
        return bad("more than " + std::to_string(agent::kMaxTypedChars) +
                   " characters typed in one request");
      steps.push_back(std::move(s));
    } else if (type == "wait") {
      WARREN_RETURN_IF_ERROR(allowed({"ms"}));
      if (!a.contains("ms")) return bad("needs `ms`");
      InputStep s;
      s.kind = K::kWait;
      s.ms = static_cast<uint32_t>(WARREN_TRY(integer(a["ms"], "ms", 0, agent::kMaxWaitMs)));
      waited += s.ms;
      if (waited > agent::kMaxTotalWaitMs)
        return bad("more than " + std::to_string(agent::kMaxTotalWaitMs) +
                   " ms of waits in one request");
      steps.push_back(s);
    } else {
      return bad("unknown type (move, click, mouse_down, mouse_up, drag, scroll, key, type, wait)");
    }
  }
  if (steps.size() > agent::kMaxInputSteps) return Invalid("the actions make too many input steps");
  return steps;
}

}  // namespace warren::server
