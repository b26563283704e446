// warren_call_setup, the one isolation recipe of every fncall worker (Python and native), on
// the real kernel: what a call finds once it has run, and that a step that fails is named.
#include "isolation/call_setup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "test_files.h"

namespace {

constexpr uid_t kCallUid = 61999;  // no one's: the recipe gives the call a uid of its own
constexpr unsigned long long kTmpBytes = 8ull << 20;

// Runs the recipe in a child that is pid 1 of fresh namespaces, as a worker is, then reports
// "key=value" lines of what it finds there.
std::map<std::string, std::string> RunInFreshWorker(const warren_call_params& params) {
  int p[2];
  if (pipe(p) != 0) return {{"error", "pipe"}};
  pid_t outer = fork();
  if (outer == 0) {
    close(p[0]);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET) != 0)
      _exit(2);
    pid_t worker = fork();
    if (worker == 0) {
      std::ostringstream out;
      auto say = [&](const std::string& k, const std::string& v) { out << k << "=" << v << "\n"; };
      const char* failed = warren_call_setup(&params);
      say("failed", failed ? failed : "");
      if (!failed) {
        say("pid", std::to_string(getpid()));
        say("uid", std::to_string(getuid()) + "," + std::to_string(geteuid()));
        say("no_new_privs", std::to_string(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)));
        char host[64] = {};
        gethostname(host, sizeof host - 1);
        say("hostname", host);
        char cwd[256] = {};
        say("cwd", getcwd(cwd, sizeof cwd) ? cwd : "?");
        struct stat st {};
        say("kallsyms_is_null",
            std::to_string(stat("/proc/kallsyms", &st) == 0 && S_ISCHR(st.st_mode)));
        say("interrupts_is_null",
            std::to_string(stat("/proc/interrupts", &st) == 0 && S_ISCHR(st.st_mode)));
        struct statfs fs {};
        statfs("/tmp", &fs);
        say("tmp_bytes", std::to_string(static_cast<unsigned long long>(fs.f_blocks) * fs.f_bsize));
        say("tmp_files", std::to_string(fs.f_files));
        int fd = open("/tmp/mine", O_WRONLY | O_CREAT | O_EXCL, 0600);
        say("tmp_write", fd >= 0 ? "ok" : strerror(errno));
        if (fd >= 0) close(fd);
        // Outside its tmpfs nothing is writable: / is read-only, and Landlock says so first.
        fd = open("/var/tmp/warren-call-setup-test", O_WRONLY | O_CREAT | O_EXCL, 0600);
        say("var_tmp_write", fd >= 0 ? "ok" : "refused");
        if (fd >= 0) {
          close(fd);
          unlink("/var/tmp/warren-call-setup-test");
        }
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        ifreq ifr{};
        strcpy(ifr.ifr_name, "lo");
        say("lo_up", std::to_string(s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
                                    (ifr.ifr_flags & IFF_UP) != 0));
        // Every capability went with root: a mount is refused.
        say("umount_proc", umount2("/proc", MNT_DETACH) == 0 ? "ok" : strerror(errno));
      } else {
        say("errno", strerror(errno));
      }
      const std::string text = out.str();
      (void)!write(p[1], text.data(), text.size());
      _exit(0);
    }
    int status = 0;
    waitpid(worker, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 3);
  }
  close(p[1]);
  const std::string text = warren::testing::ReadToEndAndClose(p[0]);
  int status = 0;
  waitpid(outer, &status, 0);
  std::map<std::string, std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) found[line.substr(0, eq)] = line.substr(eq + 1);
  }
  found["exit"] = std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return found;
}

TEST(CallSetupTest, AWorkerEndsUpInItsOwnReadOnlyCorner) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  warren_call_params params{kCallUid, kTmpBytes, WARREN_CALL_MAKE_PRIVATE, 0, nullptr, 0};
  auto found = RunInFreshWorker(params);
  EXPECT_EQ(found["exit"], "0");
  ASSERT_EQ(found["failed"], "") << found["errno"];
  EXPECT_EQ(found["pid"], "1");
  EXPECT_EQ(found["uid"], "61999,61999");
  EXPECT_EQ(found["no_new_privs"], "1");
  EXPECT_EQ(found["hostname"], "sandbox");
  EXPECT_EQ(found["cwd"], "/tmp");
  EXPECT_EQ(found["kallsyms_is_null"], "1");
  EXPECT_EQ(found["interrupts_is_null"], "1");
  EXPECT_EQ(found["tmp_bytes"], std::to_string(kTmpBytes));
  EXPECT_EQ(found["tmp_files"], std::to_string(WARREN_CALL_TMP_INODES));
  EXPECT_EQ(found["tmp_write"], "ok");
  EXPECT_EQ(found["var_tmp_write"], "refused");
  EXPECT_EQ(found["lo_up"], "1");
  EXPECT_EQ(found["umount_proc"], strerror(EPERM));
}

// The masks this kernel has no file for are learnt once, where the workers are cloned from,
// and skipped by each worker; the others are still bound over.
TEST(CallSetupTest, MasksTheKernelLacksAreLearntOnceAndSkipped) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pid_t child = fork();
  if (child == 0) {  // prepare_root makes the caller a mount namespace of its own
    const unsigned flags = warren_call_prepare_root(WARREN_CALL_MAKE_PRIVATE, 0);
    (void)!write(p[1], &flags, sizeof flags);
    _exit(0);
  }
  close(p[1]);
  unsigned flags = 0;
  ASSERT_EQ(read(p[0], &flags, sizeof flags), static_cast<ssize_t>(sizeof flags));
  close(p[0]);
  waitpid(child, nullptr, 0);
  EXPECT_NE(flags & WARREN_CALL_PROC_MASKS_KNOWN, 0u);
  for (size_t i = 0; i < warren_call_proc_masks_count; ++i) {
    const bool absent = access(warren_call_proc_masks[i], F_OK) != 0 && errno == ENOENT;
    EXPECT_EQ((flags & WARREN_CALL_PROC_MASK_ABSENT(i)) != 0, absent) << warren_call_proc_masks[i];
  }
  warren_call_params params{kCallUid, kTmpBytes, flags & ~WARREN_CALL_ROOT_DONE, 0, nullptr, 0};
  auto found = RunInFreshWorker(params);
  ASSERT_EQ(found["failed"], "") << found["errno"];
  EXPECT_EQ(found["kallsyms_is_null"], "1");
  EXPECT_EQ(found["interrupts_is_null"], "1");
}

TEST(CallSetupTest, AFilterTheKernelRefusesIsNamedAndNothingRuns) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  // One instruction of an opcode that does not exist: the kernel's check refuses the program.
  const unsigned char bad[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
  warren_call_params params{kCallUid, kTmpBytes, WARREN_CALL_MAKE_PRIVATE, 0, bad, sizeof bad};
  auto found = RunInFreshWorker(params);
  EXPECT_EQ(found["failed"], "seccomp");
  EXPECT_EQ(found["errno"], strerror(EINVAL));
  EXPECT_EQ(found.count("uid"), 0u) << "a worker whose set-up failed must report, not go on";
}

}  // namespace
