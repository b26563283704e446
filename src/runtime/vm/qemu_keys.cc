#include "runtime/vm/qemu_keys.h"

#include <array>
#include <utility>

namespace warren::runtime::vm {
namespace {

// Printable ASCII on the US layout: the unshifted and the shifted character of each key.
struct AsciiKey {
  char plain, shifted;
  const char* qcode;
};
constexpr std::array<AsciiKey, 21> kSymbolKeys = {{
    {'`', '~', "grave_accent"},
    {'1', '!', "1"},
    {'2', '@', "2"},
    {'3', '#', "3"},
    {'4', '$', "4"},
    {'5', '%', "5"},
    {'6', '^', "6"},
    {'7', '&', "7"},
    {'8', '*', "8"},
    {'9', '(', "9"},
    {'0', ')', "0"},
    {'-', '_', "minus"},
    {'=', '+', "equal"},
    {'[', '{', "bracket_left"},
    {']', '}', "bracket_right"},
    {'\\', '|', "backslash"},
    {';', ':', "semicolon"},
    {'\'', '"', "apostrophe"},
    {',', '<', "comma"},
    {'.', '>', "dot"},
    {'/', '?', "slash"},
}};

// The keysyms of keys that type nothing (keysymdef.h's 0xff.. range).
constexpr std::array<std::pair<uint32_t, const char*>, 34> kFunctionKeys = {{
    {0xff08, "backspace"},   {0xff09, "tab"},      {0xff0d, "ret"},      {0xff13, "pause"},
    {0xff14, "scroll_lock"}, {0xff1b, "esc"},      {0xff50, "home"},     {0xff51, "left"},
    {0xff52, "up"},          {0xff53, "right"},    {0xff54, "down"},     {0xff55, "pgup"},
    {0xff56, "pgdn"},        {0xff57, "end"},      {0xff61, "print"},    {0xff63, "insert"},
    {0xff67, "menu"},        {0xff7f, "num_lock"}, {0xff8d, "kp_enter"}, {0xffe1, "shift"},
    {0xffe2, "shift_r"},     {0xffe3, "ctrl"},     {0xffe4, "ctrl_r"},   {0xffe5, "caps_lock"},
    {0xffe7, "meta_l"},      {0xffe8, "meta_r"},   {0xffe9, "alt"},      {0xffea, "alt_r"},
    {0xffeb, "meta_l"},      {0xffec, "meta_r"},   {0xffff, "delete"},   {0xff6a, "help"},
    {0xff69, "stop"},        {0xff65, "undo"},
}};

}  // namespace

std::optional<QemuKey> KeyForChar(char32_t c) {
  if (c >= 'a' && c <= 'z') return QemuKey{std::string(1, static_cast<char>(c)), false};
  if (c >= 'A' && c <= 'Z') return QemuKey{std::string(1, static_cast<char>(c - 'A' + 'a')), true};
  if (c == ' ') return QemuKey{"spc", false};
  if (c == '\n' || c == '\r') return QemuKey{"ret", false};
  if (c == '\t') return QemuKey{"tab", false};
  for (const auto& k : kSymbolKeys) {
    if (c == static_cast<char32_t>(k.plain)) return QemuKey{k.qcode, false};
    if (c == static_cast<char32_t>(k.shifted)) return QemuKey{k.qcode, true};
  }
  return std::nullopt;
}

std::optional<QemuKey> KeyForKeysym(uint32_t keysym) {
  // Latin-1 keysyms of printable ASCII are the characters themselves.
  if (keysym >= 0x20 && keysym <= 0x7e) return KeyForChar(keysym);
  if (keysym >= 0xffbe && keysym <= 0xffc9)  // F1..F12
    return QemuKey{"f" + std::to_string(keysym - 0xffbe + 1), false};
  for (const auto& [sym, qcode] : kFunctionKeys)
    if (sym == keysym) return QemuKey{qcode, false};
  return std::nullopt;
}

}  // namespace warren::runtime::vm
