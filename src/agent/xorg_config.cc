#include "agent/xorg_config.h"

#include <dirent.h>
#include <time.h>

#include <fstream>

namespace warren::agent {

Result<std::string> FindInputDevice(const std::string& name_part, int wait_ms) {
  for (int waited = 0;; waited += 50) {
    if (DIR* d = opendir("/sys/class/input")) {
      std::string found;
      while (dirent* e = readdir(d)) {
        const std::string node = e->d_name;
        if (node.rfind("event", 0) != 0) continue;
        std::ifstream name_file("/sys/class/input/" + node + "/device/name");
        std::string name;
        if (std::getline(name_file, name) && name.find(name_part) != std::string::npos)
          found = "/dev/input/" + node;
      }
      closedir(d);
      if (!found.empty()) return found;
    }
    if (waited >= wait_ms)
      return Status(Code::kUnavailable, "find input device", name_part,
                    "the machine has no such input device (is it a vm with a display?)");
    timespec fifty_ms{0, 50 * 1000 * 1000};
    nanosleep(&fifty_ms, nullptr);
  }
}

std::string XorgConfig(DisplaySize size, const std::string& tablet, const std::string& keyboard) {
  const std::string mode = std::to_string(size.width) + "x" + std::to_string(size.height);
  // AutoAddDevices off: the two devices below and nothing udev would add (there may be no
  // udev: the agent may be init). The evdev driver, not libinput: libinput takes only devices
  // udev has initialized, even when named by path. AccelMethod none: glamor would render through
  // llvmpipe on a VM without a GPU.
  return "Section \"ServerFlags\"\n"
         "  Option \"AutoAddDevices\" \"false\"\n"
         "  Option \"AutoAddGPU\" \"false\"\n"
         "  Option \"DontVTSwitch\" \"true\"\n"
         "  Option \"BlankTime\" \"0\"\n"
         "  Option \"StandbyTime\" \"0\"\n"
         "  Option \"SuspendTime\" \"0\"\n"
         "  Option \"OffTime\" \"0\"\n"
         "EndSection\n"
         "Section \"Device\"\n"
         "  Identifier \"card\"\n"
         "  Driver \"modesetting\"\n"
         "  Option \"kmsdev\" \"/dev/dri/card0\"\n"
         "  Option \"AccelMethod\" \"none\"\n"
         "EndSection\n"
         "Section \"Monitor\"\n"
         "  Identifier \"monitor\"\n"
         "  Option \"PreferredMode\" \"" +
         mode +
         "\"\n"
         "EndSection\n"
         "Section \"Screen\"\n"
         "  Identifier \"screen\"\n"
         "  Device \"card\"\n"
         "  Monitor \"monitor\"\n"
         "  DefaultDepth 24\n"
         "  SubSection \"Display\"\n"
         "    Depth 24\n"
         "    Modes \"" +
         mode +
         "\"\n"
         "  EndSubSection\n"
         "EndSection\n"
         "Section \"InputDevice\"\n"
         "  Identifier \"tablet\"\n"
         "  Driver \"evdev\"\n"
         "  Option \"Device\" \"" +
         tablet +
         "\"\n"
         "EndSection\n"
         "Section \"InputDevice\"\n"
         "  Identifier \"keyboard\"\n"
         "  Driver \"evdev\"\n"
         "  Option \"Device\" \"" +
         keyboard +
         "\"\n"
         "  Option \"XkbLayout\" \"us\"\n"
         "EndSection\n"
         "Section \"ServerLayout\"\n"
         "  Identifier \"layout\"\n"
         "  Screen \"screen\"\n"
         "  InputDevice \"tablet\" \"CorePointer\"\n"
         "  InputDevice \"keyboard\" \"CoreKeyboard\"\n"
         "EndSection\n";
}

}  // namespace warren::agent
