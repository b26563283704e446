/* The calling executable's code in anonymous huge pages, for a process that clones many
 * short-lived children (the fncall zygote, the native forker).
 *
 * A clone copies no page-table entries of a file mapping, so every child faults the
 * executable's code in again (fault-around, 16 pages at a time), and its exit unmaps each page
 * it mapped: for the zygote ~8% of all CPU at 2 clients. An anonymous huge page is copied at
 * clone as one entry, never faulted, and unmapped as one. So each 2 MiB-aligned stretch of the
 * executable's read-only mappings that holds code (and the headers and read-only data sharing
 * it) is replaced, by one mremap, with an anonymous huge page holding the same bytes, readable
 * and executable: the code keeps running through the swap, even the code doing it. A stretch
 * no huge page can be had for stays the file's: 512 small anonymous pages would cost each clone
 * more to copy than the faults they save. libc only, C: it is built into warren-zygote.so too. */
#ifndef WARREN_SYS_CODE_HUGE_PAGES_H_
#define WARREN_SYS_CODE_HUGE_PAGES_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Returns how many huge pages the code is now in (0 where none could be had). */
int warren_code_to_huge_pages(void);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_SYS_CODE_HUGE_PAGES_H_ */
