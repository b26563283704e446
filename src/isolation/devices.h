// A minimal /dev: null, zero, full, random, urandom, tty bind-mounted from the host, a
// private devpts instance, /dev/shm. No other device node is reachable. Child half.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

// `scratch`: a writable directory outside the sandbox's tree (the staging tmpfs) that /dev and
// /dev/shm are bind-mounted from, rather than two tmpfs instances of their own. Every
// superblock costs a shrinker id, and every memory cgroup on the host carries a bit and a
// counter for every shrinker id (about 1 KiB per 64): at thousands of sandboxes that product
// is the largest memory cost there is. /dev/shm then shares the sandbox's disk quota.
Status MountMinimalDev(const std::string& root, const std::string& scratch);

}  // namespace warren::isolation
