/* See code_huge_pages.h. */
#define _GNU_SOURCE
#include "sys/code_huge_pages.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_SIZE (2ul << 20)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

struct piece {
  unsigned long start, end;
  int read_only, exec;
};

/* A line of /proc/self/maps, if it maps the executable (`exe`, as /proc/self/exe reads: a
 * memfd's and a deleted file's name end in " (deleted)" in both) privately. */
static int exe_piece(const char* line, const char* exe, struct piece* p) {
  char perms[8];
  unsigned long offset, ino;
  int path_at = 0;
  if (sscanf(line, "%lx-%lx %7s %lx %*x:%*x %lu %n", &p->start, &p->end, perms, &offset, &ino,
             &path_at) != 5 ||
      path_at == 0)
    return 0;
  const char* path = line + path_at;
  size_t len = strcspn(path, "\n");
  if (len != strlen(exe) || strncmp(path, exe, len) != 0 || perms[3] != 'p') return 0;
  p->read_only = perms[1] != 'w';
  p->exec = perms[2] == 'x';
  return 1;
}

/* Replaces [at, at + HUGE_SIZE) with an anonymous huge page of the same bytes; 0 on success,
 * and the mapping untouched otherwise. */
static int stretch_to_huge_page(unsigned long at) {
  char* raw = mmap(NULL, 2 * HUGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return -1;
  char* page = (char*)(((unsigned long)raw + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1));
  if (page > raw) munmap(raw, (size_t)(page - raw));
  munmap(page + HUGE_SIZE, (size_t)(raw + 2 * HUGE_SIZE - (page + HUGE_SIZE)));
  madvise(page, HUGE_SIZE, MADV_HUGEPAGE);
  memcpy(page, (const void*)at, HUGE_SIZE); /* the first touch takes a huge page, if there is one */
  int ok =
      madvise(page, HUGE_SIZE, MADV_COLLAPSE) == 0 && /* it is one, or becomes one */
      mprotect(page, HUGE_SIZE, PROT_READ | PROT_EXEC) == 0 &&
      mremap(page, HUGE_SIZE, HUGE_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, (void*)at) != MAP_FAILED;
  if (!ok) munmap(page, HUGE_SIZE);
  return ok ? 0 : -1;
}

int warren_code_to_huge_pages(void) {
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 0;
  exe[n] = 0;
  FILE* maps = fopen("/proc/self/maps", "re");
  if (!maps) return 0;
  struct piece pieces[64];
  int np = 0;
  char line[1024];
  while (np < 64 && fgets(line, sizeof line, maps))
    if (exe_piece(line, exe, &pieces[np])) np++;
  fclose(maps);
  int done = 0;
  unsigned long next = 0; /* stretches below this were tried (pieces are in address order) */
  for (int i = 0; i < np; i++) {
    if (!pieces[i].exec) continue;
    for (unsigned long at = pieces[i].start & ~(HUGE_SIZE - 1); at < pieces[i].end;
         at += HUGE_SIZE) {
      if (at < next) continue;
      next = at + HUGE_SIZE;
      /* Only a stretch wholly made of the executable's read-only mappings, without a gap. */
      unsigned long covered = at;
      for (int k = 0; k < np; k++) {
        if (pieces[k].end <= at || pieces[k].start >= at + HUGE_SIZE) continue;
        if (pieces[k].start > covered || !pieces[k].read_only) break;
        covered = pieces[k].end;
      }
      if (covered >= at + HUGE_SIZE && stretch_to_huge_page(at) == 0) done++;
    }
  }
  return done;
}
