/* A fncall call's rlimits (see call_limits.h). libc only. */
#define _GNU_SOURCE
#include "isolation/call_limits.h"

#include <errno.h>
#include <stddef.h>
#include <sys/resource.h>

/* Soft `soft` and hard `hard`, neither above the hard limit there is now. Set first and read
 * back in one call (prlimit returns the old limits): on this kind of guest each system call
 * costs microseconds of its own, and the wanted limit is nearly always below the inherited
 * one. Where it is not, an unprivileged set fails (EPERM) and one with CAP_SYS_RESOURCE of the
 * host went through: either way the limit is then read and set again, capped. */
static int cap_and_set(int resource, rlim_t soft, rlim_t hard) {
  const struct rlimit want = {soft, hard};
  struct rlimit was;
  if (prlimit(0, resource, &want, &was) == 0) {
    if (was.rlim_max == RLIM_INFINITY || hard <= was.rlim_max) return 0;
  } else if (errno != EPERM || getrlimit(resource, &was) != 0) {
    return -1;
  }
  if (hard > was.rlim_max) hard = was.rlim_max;
  if (soft > hard) soft = hard;
  const struct rlimit capped = {soft, hard};
  return setrlimit(resource, &capped);
}

const char* warren_call_set_limits(const struct warren_call_limits* l) {
  /* SIGXCPU at the limit, SIGKILL a second later (where the hard limit leaves room for it). */
  if (l->cpu_s && cap_and_set(RLIMIT_CPU, l->cpu_s, l->cpu_s + 1) != 0) return "RLIMIT_CPU";
  const struct {
    int resource;
    unsigned long long value;
    const char* name;
  } each[] = {
      {RLIMIT_AS, l->as_bytes, "RLIMIT_AS"},
      {RLIMIT_STACK, l->stack_bytes, "RLIMIT_STACK"},
      {RLIMIT_FSIZE, l->fsize_bytes, "RLIMIT_FSIZE"},
      {RLIMIT_NPROC, l->nproc, "RLIMIT_NPROC"},
      {RLIMIT_NOFILE, l->nofile, "RLIMIT_NOFILE"},
  };
  for (unsigned i = 0; i < sizeof each / sizeof each[0]; i++)
    if (each[i].value && cap_and_set(each[i].resource, each[i].value, each[i].value) != 0)
      return each[i].name;
  const struct rlimit none = {0, 0};
  if (setrlimit(RLIMIT_CORE, &none) != 0) return "RLIMIT_CORE";
  return NULL;
}
