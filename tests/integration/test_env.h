// Helpers for root integration tests: a busybox rootfs, a scratch data dir on a real disk.
#pragma once

#include <string>
#include <vector>

namespace warren::testing {

// A fresh directory under /var/tmp (a real filesystem: EROFS backing files cannot live on
// tmpfs). Removed by RemoveDir.
std::string MakeScratchDir(const std::string& tag);
void RemoveDir(const std::string& dir);
// Fills `root` with a busybox-static userland: /bin/busybox plus applet symlinks.
void MakeBusyboxRoot(const std::string& root);
// Writes `root` as a tar file at `tar_path`.
void TarDir(const std::string& root, const std::string& tar_path);
// Lines of /proc/self/mountinfo containing `needle`.
int CountMountinfo(const std::string& needle);
// Paths under /sys/fs/cgroup whose name contains `needle`.
int CountCgroupDirs(const std::string& needle);
// Processes on the host whose real uid is `uid`.
int CountProcessesOfUid(unsigned uid);
// Pids of the children of process `ppid` whose name (comm) is `name`.
std::vector<int> ChildrenNamed(int ppid, const std::string& name);

}  // namespace warren::testing
