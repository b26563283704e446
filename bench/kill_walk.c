/* What ending "every other process" of a pid namespace costs its init, against the number of
 * processes on the host: kill(-1) walks every process of the host (for_each_process, under the
 * task-list lock) to find its own namespace's few; a waitpid(-1, WNOHANG) that finds no child
 * asks only about the caller's. A call's pid 1 (agent/call_worker.cc) and a Python worker
 * (zygote_lib.c) used to kill(-1) at every call's end.
 *
 *   gcc -O2 -o /tmp/kill_walk bench/kill_walk.c && sudo /tmp/kill_walk 0 1000 4000
 *
 * For each N: forks N processes that pause, makes a pid namespace whose init times 20,000 of
 * each call (nothing else in its namespace, as after most calls), ends the N. Root. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int one(int n) {
  pid_t* kids = calloc((size_t)n + 1, sizeof *kids);
  int made = 0;
  for (; made < n; made++) {
    kids[made] = fork();
    if (kids[made] == 0) {
      pause();
      _exit(0);
    }
    if (kids[made] < 0) break;
  }
  pid_t init = fork();
  if (init == 0) {
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    pid_t p = fork(); /* pid 1 of the new namespace */
    if (p == 0) {
      const int iters = 20000;
      double t0 = now();
      for (int i = 0; i < iters; i++) kill(-1, SIGKILL);
      double t1 = now();
      for (int i = 0; i < iters; i++) waitpid(-1, NULL, WNOHANG | __WALL);
      double t2 = now();
      printf("%5d more processes on the host: kill(-1) %7.2f us, waitpid(-1, WNOHANG) %5.2f us\n",
             made, (t1 - t0) / iters * 1e6, (t2 - t1) / iters * 1e6);
      fflush(stdout);
      _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    _exit(p > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 3);
  }
  int st = 0;
  waitpid(init, &st, 0);
  for (int i = 0; i < made; i++) kill(kids[i], SIGKILL);
  for (int i = 0; i < made; i++) waitpid(kids[i], NULL, 0);
  free(kids);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char** argv) {
  int rc = 0;
  for (int i = 1; i < argc; i++) rc |= one(atoi(argv[i]));
  return rc;
}
