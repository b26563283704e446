#include "runtime/vm/qmp_screen.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/vm/qemu_keys.h"

namespace warren::runtime::vm {

using nlohmann::json;

namespace {

// QEMU's absolute axes run 0..0x7fff; the guest's X server maps value v to v * size / 0x8000
// (libinput's transformed coordinates), so the smallest v giving pixel p is ceil(p * 0x8000
// / size).
int AbsValue(int pixel, int size) {
  const long v = (static_cast<long>(pixel) * 0x8000 + size - 1) / size;
  return static_cast<int>(std::clamp(v, 0L, 0x7fffL));
}

json KeyEvent(const std::string& qcode, bool down) {
  return {{"type", "key"},
          {"data", {{"down", down}, {"key", {{"type", "qcode"}, {"data", qcode}}}}}};
}

const char* ButtonName(int button) {
  switch (button) {
    case 1:
      return "left";
    case 2:
      return "middle";
    case 3:
      return "right";
    case 4:
      return "wheel-up";
    case 5:
      return "wheel-down";
    case 6:
      return "wheel-left";
    case 7:
      return "wheel-right";
    default:
      return nullptr;
  }
}

std::string Hex(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

std::string CodePoint(char32_t c) {
  char buf[16];
  snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

}  // namespace

std::vector<std::string> QmpScreen::Devices(agent::DisplaySize size) {
  // Video memory for two frames of the largest mode, a power of two of at least 16 MiB.
  const uint64_t frame = uint64_t{size.width} * size.height * 4;
  uint64_t vram = 16u << 20;
  while (vram < 2 * frame) vram *= 2;
  // The screen's EDID names the size as the preferred mode: the guest starts at it.
  return {"bochs-display,romfile=,vgamem=" + std::to_string(vram) +
              ",xres=" + std::to_string(size.width) + ",yres=" + std::to_string(size.height),
          "virtio-tablet-pci,romfile=", "virtio-keyboard-pci,romfile="};
}

Status QmpScreen::OpenSink(QmpClient& qmp) {
  if (fdset_ >= 0) return Status::Ok();
  UniqueFd png(memfd_create("warren-screen", MFD_CLOEXEC));
  if (!png) return ErrnoStatus("memfd_create", "screen");
  // QEMU opens the fd set write-only, and takes an fd from it only if its mode matches.
  const std::string self = "/proc/self/fd/" + std::to_string(png.get());
  UniqueFd sink(open(self.c_str(), O_WRONLY | O_CLOEXEC));
  if (!sink) return ErrnoStatus("open", "screen memfd");
  auto r = qmp.Execute("add-fd", json{{"opaque", "warren-screen"}}, 10000, sink.get());
  if (!r.ok()) return r.status().Context("hand QEMU the screenshot file");
  fdset_ = r->value("fdset-id", -1);
  if (fdset_ < 0) return Internal("add-fd", "screen", "QEMU named no fd set: " + r->dump());
  png_ = std::move(png);
  sink_ = std::move(sink);
  return Status::Ok();
}

Result<std::string> QmpScreen::Screenshot(QmpClient& qmp) {
  WARREN_RETURN_IF_ERROR(OpenSink(qmp));
  // QEMU truncates when it opens; the offset is shared with its copy, so it starts at 0 too.
  if (lseek(sink_.get(), 0, SEEK_SET) != 0) return ErrnoStatus("lseek", "screen memfd");
  if (ftruncate(png_.get(), 0) != 0) return ErrnoStatus("ftruncate", "screen memfd");
  auto r = qmp.Execute(
      "screendump", json{{"filename", "/dev/fdset/" + std::to_string(fdset_)}, {"format", "png"}},
      10000);
  if (!r.ok()) return r.status().Context("take a screenshot");
  struct stat st;
  if (fstat(png_.get(), &st) != 0) return ErrnoStatus("fstat", "screen memfd");
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        pread(png_.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("read", "screen memfd");
    got += static_cast<size_t>(n);
  }
  if (out.size() < 8 || out.compare(1, 3, "PNG") != 0)
    return Internal("take a screenshot", "screen", "QEMU wrote no PNG");
  return out;
}

Status QmpScreen::Input(QmpClient& qmp, const std::vector<agent::InputStep>& steps) {
  using Kind = agent::InputStep::Kind;
  // Every step as its events first: nothing is sent if one cannot be typed.
  std::vector<json> batches;  // one input-send-event each; null: a wait
  std::vector<uint32_t> waits;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    json events = json::array();
    switch (s.kind) {
      case Kind::kMove:
        events.push_back(
            {{"type", "abs"}, {"data", {{"axis", "x"}, {"value", AbsValue(s.x, size_.width)}}}});
        events.push_back(
            {{"type", "abs"}, {"data", {{"axis", "y"}, {"value", AbsValue(s.y, size_.height)}}}});
        break;
      case Kind::kButton: {
        const char* name = ButtonName(s.button);
        if (!name)
          return Invalid("button " + std::to_string(s.button) + " is not on a VM's tablet");
        events.push_back({{"type", "btn"}, {"data", {{"down", s.down}, {"button", name}}}});
        break;
      }
      case Kind::kKeys: {
        std::vector<std::string> codes;
        for (uint32_t sym : s.keysyms) {
          auto k = KeyForKeysym(sym);
          if (!k) return Invalid("key: keysym " + Hex(sym) + " has no key on a VM's US keyboard");
          if (k->shift) codes.push_back("shift");
          codes.push_back(k->qcode);
        }
        for (const auto& c : codes) events.push_back(KeyEvent(c, true));
        for (auto c = codes.rbegin(); c != codes.rend(); ++c) events.push_back(KeyEvent(*c, false));
        break;
      }
      case Kind::kText:
        for (char32_t ch : s.text) {
          auto k = KeyForChar(ch);
          if (!k)
            return Invalid("type: character " + CodePoint(ch) +
                           " has no key on a VM's US keyboard");
          // A key per call: the guest sees each press and release apart, as from a person.
          json one = json::array();
          if (k->shift) one.push_back(KeyEvent("shift", true));
          one.push_back(KeyEvent(k->qcode, true));
          one.push_back(KeyEvent(k->qcode, false));
          if (k->shift) one.push_back(KeyEvent("shift", false));
          batches.push_back(std::move(one));
          waits.push_back(0);
        }
        continue;
      case Kind::kWait:
        batches.push_back(nullptr);
        waits.push_back(s.ms);
        continue;
    }
    batches.push_back(std::move(events));
    waits.push_back(0);
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    if (batches[i].is_null()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(waits[i]));
      continue;
    }
    auto r = qmp.Execute("input-send-event", json{{"events", batches[i]}}, 10000);
    if (!r.ok()) {
      // QEMU refuses what its version has no name for (wheel-left before 8.1): the caller's.
      if (r.status().message().find("does not accept value") != std::string::npos)
        return Invalid("input: " + r.status().message());
      return r.status().Context("send input");
    }
  }
  return Status::Ok();
}

}  // namespace warren::runtime::vm
