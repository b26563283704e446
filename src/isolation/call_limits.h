/* A fncall call's resource limits (rlimits), set by its worker before the call's code runs: the
 * one copy, in C with libc only, for the same two callers as call_setup.h (the static agent's
 * native workers and warren-zygote.so's Python workers). */
#ifndef WARREN_ISOLATION_CALL_LIMITS_H_
#define WARREN_ISOLATION_CALL_LIMITS_H_

#ifdef __cplusplus
extern "C" {
#endif

/* 0: not limited by the call (the worker's own limits stay). */
struct warren_call_limits {
  unsigned long long cpu_s;       /* RLIMIT_CPU: SIGXCPU at cpu_s, SIGKILL a second later */
  unsigned long long as_bytes;    /* RLIMIT_AS, whole: the caller adds what its runtime maps */
  unsigned long long stack_bytes; /* RLIMIT_STACK */
  unsigned long long fsize_bytes; /* RLIMIT_FSIZE */
  unsigned long long nproc;       /* RLIMIT_NPROC */
  unsigned long long nofile;      /* RLIMIT_NOFILE */
};

/* Sets each limit asked for, soft and hard, and no core dumps. A limit never rises above the
 * hard limit the worker inherited (the runner's own): it is capped there, since a call may only
 * lower its limits. Returns NULL, or the limit that could not be set (a static string such as
 * "RLIMIT_AS") with errno saying why: the caller refuses the call then, for a call must never
 * run without a limit it asked for. */
const char* warren_call_set_limits(const struct warren_call_limits* limits);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_ISOLATION_CALL_LIMITS_H_ */
