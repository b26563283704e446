// A desktop sandbox's screen, kept by its agent: the image's own Xvfb on display :0 and its
// window manager (Debian's x-window-manager), screenshots as PNG, and input through XTEST.
// Everything runs inside the sandbox like a command (its cgroup, capabilities, seccomp and
// Landlock), so a desktop costs what its X server and programs cost, nothing on the host.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "agent/display.h"
#include "agent/exec_child.h"
#include "agent/x11_client.h"
#include "base/status.h"

namespace warren::agent {

class Desktop {
 public:
  // Starts Xvfb :0 at width x height x 24 (with `device`, a whole VM's display device: Xorg
  // on it, agent/xorg_config.h) and, once it takes connections (within 15 s; Xorg 60 s), the
  // window manager. `base` is how the agent starts a command (environment, limits, cgroup);
  // its stdio is replaced by the display's log, /tmp/.warren-display.log.
  Status Start(const ChildSpec& base, uint16_t width, uint16_t height, bool device = false);
  bool started() const { return xvfb_pid_ > 0; }
  // Called for every child the agent reaps: the X server's end is remembered for errors.
  void Reaped(pid_t pid, int status);

  Result<std::string> ScreenshotPng();
  Status Perform(const std::vector<agent::InputStep>& steps);

 private:
  Result<X11Connection*> Connection();
  std::string LogTail() const;

  pid_t xvfb_pid_ = -1;
  std::optional<int> xvfb_status_;  // set once it ended
  std::optional<X11Connection> x_;
};

}  // namespace warren::agent
