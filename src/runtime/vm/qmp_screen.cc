#include "runtime/vm/qmp_screen.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "agent/png_writer.h"
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

uint64_t QmpScreen::VideoMemoryBytes(agent::DisplaySize size) {
  // Two frames of the screen, a power of two of at least 16 MiB.
  const uint64_t frame = uint64_t{size.width} * size.height * 4;
  uint64_t vram = 16u << 20;
  while (vram < 2 * frame) vram *= 2;
  return vram;
}

std::vector<std::string> QmpScreen::Devices(agent::DisplaySize size) {
  const uint64_t vram = VideoMemoryBytes(size);
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
  // PPM, encoded here: QEMU 7.2's PNG path swaps red and blue (fixed in 8.0) and closes its
  // copy of the fd without telling the fd set, which then grows by one entry a screenshot.
  auto r = qmp.Execute(
      "screendump", json{{"filename", "/dev/fdset/" + std::to_string(fdset_)}, {"format", "ppm"}},
      10000);
  if (!r.ok()) return r.status().Context("take a screenshot");
  struct stat st;
  if (fstat(png_.get(), &st) != 0) return ErrnoStatus("fstat", "screen memfd");
  // No bigger than the largest screen: QEMU is not trusted with the node's memory.
  constexpr off_t kMax = off_t{4096} * 4096 * 3 + 64;
  if (st.st_size <= 0 || st.st_size > kMax)
    return Internal("take a screenshot", "screen",
                    "QEMU wrote " + std::to_string(st.st_size) + " bytes");
  std::string ppm(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < ppm.size()) {
    const ssize_t n =
        pread(png_.get(), ppm.data() + got, ppm.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("read", "screen memfd");
    got += static_cast<size_t>(n);
  }
  // "P6 <width> <height> 255" and single whitespace, then the RGB rows.
  unsigned w = 0, h = 0, max = 0;
  int header = 0;
  if (sscanf(ppm.c_str(), "P6 %u %u %u%n", &w, &h, &max, &header) != 3 || max != 255 || w == 0 ||
      h == 0 || w > 4096 || h > 4096 ||
      ppm.size() != static_cast<size_t>(header) + 1 + size_t{w} * h * 3)
    return Internal("take a screenshot", "screen", "QEMU wrote no PPM of the screen");
  // The guest may have set another mode: input follows what is on the screen.
  size_.width = static_cast<uint16_t>(w);
  size_.height = static_cast<uint16_t>(h);
  agent::PngWriter png(w, h);
  WARREN_RETURN_IF_ERROR(png.AddRows(ppm.substr(static_cast<size_t>(header) + 1), h));
  return png.Finish();
}

Result<std::vector<QmpScreen::Batch>> QmpScreen::Plan(
    const std::vector<agent::InputStep>& steps) const {
  using Kind = agent::InputStep::Kind;
  std::vector<Batch> out;
  auto add = [&](json events) { out.push_back(Batch{std::move(events), 0}); };
  for (const auto& s : steps) {
    switch (s.kind) {
      case Kind::kMove:
        add(json::array(
            {{{"type", "abs"}, {"data", {{"axis", "x"}, {"value", AbsValue(s.x, size_.width)}}}},
             {{"type", "abs"},
              {"data", {{"axis", "y"}, {"value", AbsValue(s.y, size_.height)}}}}}));
        break;
      case Kind::kButton: {
        const char* name = ButtonName(s.button);
        if (!name)
          return Invalid("button " + std::to_string(s.button) + " is not on a VM's tablet");
        add(json::array({{{"type", "btn"}, {"data", {{"down", s.down}, {"button", name}}}}}));
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
        // Pressed, then released in reverse: two deliveries, so the guest sees the chord held.
        json down = json::array(), up = json::array();
        for (const auto& c : codes) down.push_back(KeyEvent(c, true));
        for (auto c = codes.rbegin(); c != codes.rend(); ++c) up.push_back(KeyEvent(*c, false));
        add(std::move(down));
        add(std::move(up));
        break;
      }
      case Kind::kText:
        for (char32_t ch : s.text) {
          auto k = KeyForChar(ch);
          if (!k)
            return Invalid("type: character " + CodePoint(ch) +
                           " has no key on a VM's US keyboard");
          // A press and a release apart, as from a person (a batch is one sync for the guest).
          json down = json::array(), up = json::array();
          if (k->shift) down.push_back(KeyEvent("shift", true));
          down.push_back(KeyEvent(k->qcode, true));
          up.push_back(KeyEvent(k->qcode, false));
          if (k->shift) up.push_back(KeyEvent("shift", false));
          add(std::move(down));
          add(std::move(up));
        }
        break;
      case Kind::kWait:
        out.push_back(Batch{nullptr, s.ms});
        break;
    }
  }
  return out;
}

Status QmpScreen::Send(QmpClient& qmp, const Batch& batch) {
  auto r = qmp.Execute("input-send-event", json{{"events", batch.events}}, 10000);
  if (r.ok()) return Status::Ok();
  // QEMU refuses what its version has no name for (wheel-left before 8.1): the caller's.
  if (r.status().message().find("does not accept value") != std::string::npos)
    return Invalid("input: " + r.status().message());
  return r.status().Context("send input");
}

}  // namespace warren::runtime::vm
