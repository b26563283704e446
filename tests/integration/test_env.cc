#include "test_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "image/tar_create.h"
#include "image/tar_extract.h"

namespace fs = std::filesystem;

namespace warren::testing {

std::string MakeScratchDir(const std::string& tag) {
  std::string tmpl = "/var/tmp/warren-test-" + tag + "-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  EXPECT_NE(p, nullptr);
  return tmpl;
}

void RemoveDir(const std::string& dir) { (void)image::RemoveTree(dir); }

void MakeBusyboxRoot(const std::string& root) {
  for (const char* d : {"bin", "sbin", "etc", "tmp", "root", "proc", "dev", "sys", "usr/bin"})
    fs::create_directories(root + "/" + d);
  chmod((root + "/tmp").c_str(), 01777);
  fs::copy_file("/bin/busybox", root + "/bin/busybox", fs::copy_options::overwrite_existing);
  auto list = RunProgram({"/bin/busybox", "--list"});
  ASSERT_TRUE(list.ok());
  std::istringstream in(list->output);
  std::string applet;
  while (std::getline(in, applet)) {
    if (applet.empty() || applet == "busybox") continue;
    symlink("busybox", (root + "/bin/" + applet).c_str());
  }
  std::ofstream(root + "/etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(root + "/etc/group") << "root:x:0:\n";
}

void TarDir(const std::string& root, const std::string& tar_path) {
  UniqueFd out(open(tar_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(out.valid());
  Status st = image::WriteTarOfDir(root, [&](const void* buf, size_t n) -> Status {
    if (write(out.get(), buf, n) != static_cast<ssize_t>(n)) return ErrnoStatus("write", tar_path);
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

int CountMountinfo(const std::string& needle) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}

int CountCgroupDirs(const std::string& needle) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(
           "/sys/fs/cgroup", fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_directory(ec) && it->path().filename().string().find(needle) != std::string::npos)
      ++n;
  }
  return n;
}

int CountProcessesOfUid(unsigned uid) {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        unsigned r = 0;
        sscanf(line.c_str(), "Uid:\t%u", &r);
        n += r == uid;
        break;
      }
    }
  }
  return n;
}

std::vector<int> ChildrenNamed(int ppid, const std::string& name) {
  std::vector<int> out;
  for (auto& e : fs::directory_iterator("/proc")) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "status");
    std::string line;
    bool named = false;
    while (std::getline(in, line)) {
      if (line.rfind("Name:", 0) == 0) {
        const auto v = line.find_first_not_of(" \t", 5);
        named = v != std::string::npos && line.compare(v, std::string::npos, name) == 0;
      }
      if (line.rfind("PPid:", 0) == 0) {
        if (named && atoi(line.c_str() + 5) == ppid) out.push_back(std::stoi(pid));
        break;
      }
    }
  }
  return out;
}

}  // namespace warren::testing
