/* Pages a process's clones will write, copied at the clone instead of at their first write.
 *
 * A clone shares every anonymous page with its parent, write-protected in both, and the first
 * write to one in either process takes a fault that copies it. On a guest whose page tables
 * the hypervisor shadows (PVM) that fault is dear: the copy is cheap, but clearing the old
 * entry flushes the TLB through the hypervisor, ~14 us a page here against ~4 us for a page
 * the child only had to map. The kernel copies a page at the clone itself when the parent has
 * it pinned for DMA (it could not otherwise keep the device's view and the parent's the same),
 * and leaves the parent's entry writable. So a process that clones many short-lived children
 * (the fncall zygote) learns which of its pages a child writes, once, from a child of its own
 * running a sample of the work, and pins those with io_uring's registered buffers: every later
 * clone gets its own copies of them, made in one pass, with no fault in either process.
 *
 * Only the pinning process uses io_uring, and only io_uring_setup and io_uring_register (no
 * operation is ever submitted); the ring's fd is close-on-exec and children close it. Where
 * io_uring is refused (seccomp, `kernel.io_uring_disabled`, RLIMIT_MEMLOCK) nothing changes:
 * the pages stay shared and copied at the first write, as before. libc only, C: it is built
 * into warren-zygote.so too. */
#ifndef WARREN_SYS_COPY_AT_CLONE_H_
#define WARREN_SYS_COPY_AT_CLONE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* In the child that ran the sample: the addresses of the pages it has written, as far as the
 * kernel tells (present and mapped by this process alone, in its private writable mappings),
 * at most `cap` of them into `out`. Returns how many, or -1 with errno. */
long warren_written_pages(uintptr_t* out, size_t cap);

/* In the parent: pins those of `pages` it has present itself (a page the child made fresh is
 * not the parent's to copy), so that every later clone copies them at once. `pages` are
 * addresses in any order, each taken as its page, a page given twice pinned once. Returns how
 * many were pinned, or -1 with errno (nothing pinned). Once per process: a second call fails
 * with EBUSY. */
long warren_copy_at_clone(const uintptr_t* pages, size_t n);

/* In the child that ran the sample, at its end: makes itself dumpable again (its uid change
 * made its /proc/self files root's; nothing of any call is in it), lists the pages it wrote
 * into a mapping of its own (never the parent's, so not among them) and writes the list on
 * `fd`: a u64 count, then that many u64 addresses. 0, or -1 with errno. */
int warren_send_written_pages(int fd);

/* In the parent: pins the pages of such a list (`len` bytes, as warren_send_written_pages
 * wrote them) with warren_copy_at_clone, and with them `own`: pages the parent itself writes
 * after each clone (its loop's variables, its stack frame), which would otherwise take a fault
 * in the parent at every clone, with the TLB flush that clears the page's shared entry. A
 * page in both is pinned once (as warren_copy_at_clone pins any page once). Returns how many were
 * pinned, or -1 with `*why` saying why none were. */
long warren_copy_at_clone_from_list(const void* list, size_t len, const uintptr_t* own, size_t nown,
                                    const char** why);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_SYS_COPY_AT_CLONE_H_ */
