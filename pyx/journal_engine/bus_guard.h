/* A guard against SIGBUS around reads and writes of mapped files.
 *
 * Why: a mapped file that another process truncates leaves the pages past its new end unbacked;
 * the next access to one of them raises SIGBUS, which kills the interpreter. A journal file or the
 * delivery-count shadow cut by another process must give a JournalError naming the file instead.
 *
 * How: a SIGBUS handler installed once per module that includes this header (at its import, with
 * the GIL). A thread about to touch a mapping calls je_bus_guarded(fn, arg): it records a jump
 * buffer in a thread-local slot and calls fn(arg); a SIGBUS on that thread while the slot is set
 * jumps back and je_bus_guarded returns JE_BUS_FAULT, with the faulting address in
 * je_bus_fault_address(). A SIGBUS anywhere else goes to the handler that was there before (Python's
 * faulthandler, or the default action), so a real bug still crashes loudly.
 *
 * The rules for fn: it touches no Python object, takes no lock and frees nothing it allocated
 * inside the guard (a jump out of it skips whatever it had left to do; what it allocated is owned by
 * its caller's structures, which the caller frees or leaks on a fault).
 * SA_NODEFER keeps SIGBUS unblocked after the jump, so sigsetjmp need not save the signal mask
 * (which would cost a system call per guarded call).
 *
 * Two modules that include this header install two handlers: the later one passes a SIGBUS it
 * does not own to the earlier, whose guard may own it. They are installed once each, never again,
 * so the chain has no loop.
 */
#ifndef JOURNAL_ENGINE_BUS_GUARD_H
#define JOURNAL_ENGINE_BUS_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define JE_BUS_FAULT (-2)

/* volatile, and fenced in je_bus_guarded: the compiler must not drop or move the store that arms the
 * guard (it sees the slot cleared again after fn, and a memcpy that never reads it) */
static __thread sigjmp_buf *volatile je_bus_jump = NULL;
static __thread void *je_bus_address = NULL;
static struct sigaction je_bus_previous;
static int je_bus_installed = 0;

/* Patched mappings: regions whose lost pages read as zeros instead of faulting, each with a flag the
 * handler sets when it patched one (the checkpoint a load took: its columns are read everywhere a
 * record is made, where a guard per read would cost more than the read). A SIGBUS whose address lies
 * in a registered region -- guarded or not -- is answered by mapping an anonymous zero page over the
 * faulting page (MAP_FIXED) and setting the region's flag; the access then completes, reading zeros,
 * and the region's owner checks the flag after every read it hands out (je_bus_flag), so zeros are
 * never taken for data. Regions are registered and removed with the GIL held; the handler only
 * reads the table. Its size is journal_engine/limits.py's CHECKPOINTS_MAPPED_MAX (a test holds the two
 * to the same number). */
#define JE_PATCHED_MAX 64
struct je_patched_region { uintptr_t start; size_t length; int *cut; int fd; };
static struct je_patched_region je_patched[JE_PATCHED_MAX];

/* Registers [start, start + length), the mapping of `fd` from its first byte, with its flag; the
 * slot, or -1 when the table is full. */
__attribute__((unused)) static int je_bus_patch_register(const void *start, size_t length, int *cut, int fd) {
    for (int slot = 0; slot < JE_PATCHED_MAX; slot++) {
        if (__atomic_load_n(&je_patched[slot].start, __ATOMIC_ACQUIRE) == 0) {
            je_patched[slot].length = length;
            je_patched[slot].cut = cut;
            je_patched[slot].fd = fd;
            __atomic_store_n(&je_patched[slot].start, (uintptr_t)start, __ATOMIC_RELEASE);
            return slot;
        }
    }
    return -1;
}

__attribute__((unused)) static void je_bus_patch_remove(int slot) {
    if (slot >= 0 && slot < JE_PATCHED_MAX)
        __atomic_store_n(&je_patched[slot].start, (uintptr_t)0, __ATOMIC_RELEASE);
}

/* Whether a region's flag says a page of it was patched (read after the read it vouches for). */
__attribute__((unused)) static int je_bus_flag(const int *cut) {
    return cut != NULL && __atomic_load_n(cut, __ATOMIC_ACQUIRE) != 0;
}

/* 1 when the fault lay in a patched region and zero pages now stand where its file lost its pages.
 * With the faulting address (`known`), the page there; without it (a SIGBUS raised again by a handler
 * that ran before this one, Python's faulthandler say, carries none), every page of a region past its
 * file's end now (fstat). */
static int je_bus_patch(void *address, int known) {
    uintptr_t at = (uintptr_t)address;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int patched = 0;
    for (int slot = 0; slot < JE_PATCHED_MAX; slot++) {
        uintptr_t start = __atomic_load_n(&je_patched[slot].start, __ATOMIC_ACQUIRE);
        size_t length = je_patched[slot].length;
        uintptr_t from, to;
        struct stat status;
        if (start == 0)
            continue;
        if (known) {
            if (at < start || at - start >= length)
                continue;
            from = at & ~(page - 1);
            to = from + page;
        } else {
            if (fstat(je_patched[slot].fd, &status) != 0 || (size_t)status.st_size >= length)
                continue;
            from = start + (((uintptr_t)status.st_size + page - 1) & ~(page - 1));
            to = start + ((length + page - 1) & ~(page - 1));
            if (from >= to)
                continue;
        }
        if (mmap((void *)from, to - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            continue;
        __atomic_store_n(je_patched[slot].cut, 1, __ATOMIC_RELEASE);
        patched = 1;
        if (known)
            break;
    }
    return patched;
}

static void je_bus_handler(int signo, siginfo_t *info, void *context) {
    sigjmp_buf *jump = je_bus_jump;
    /* the kernel's SIGBUS of a lost page carries its address (si_code > 0); one raised again by
     * another handler does not */
    if (je_bus_patch(info != NULL ? info->si_addr : NULL, info != NULL && info->si_code > 0))
        return;     /* a patched region's page: the access is made again and reads zeros */
    if (jump != NULL) {
        je_bus_jump = NULL;
        je_bus_address = info != NULL ? info->si_addr : NULL;
        siglongjmp(*jump, 1);
    }
    /* not a guarded access: whoever handled SIGBUS before us decides */
    if (je_bus_previous.sa_flags & SA_SIGINFO) {
        if (je_bus_previous.sa_sigaction != NULL) {
            je_bus_previous.sa_sigaction(signo, info, context);
            return;
        }
    } else if (je_bus_previous.sa_handler != SIG_DFL && je_bus_previous.sa_handler != SIG_IGN) {
        je_bus_previous.sa_handler(signo);
        return;
    }
    /* the default action: on return the access faults again and the kernel ends the process */
    signal(signo, SIG_DFL);
}

/* Installs the handler once; 0, or -1 when sigaction failed (errno set). Call with the GIL held. */
static int je_bus_install(void) {
    struct sigaction action;
    if (je_bus_installed)
        return 0;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = je_bus_handler;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &je_bus_previous) != 0)
        return -1;
    je_bus_installed = 1;
    return 0;
}

/* fn(arg)'s result, or JE_BUS_FAULT when a SIGBUS interrupted it on this thread. */
static int je_bus_guarded(int (*fn)(void *), void *arg) {
    sigjmp_buf jump;
    int result;
    if (sigsetjmp(jump, 0) != 0)
        return JE_BUS_FAULT;
    je_bus_jump = &jump;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    result = fn(arg);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    je_bus_jump = NULL;
    return result;
}

/* memcpy that returns 0, or JE_BUS_FAULT when the source or the destination lost its pages. */
struct je_bus_copy_args { void *dst; const void *src; size_t n; };

static int je_bus_copy_call(void *arg) {
    struct je_bus_copy_args *copy = (struct je_bus_copy_args *)arg;
    memcpy(copy->dst, copy->src, copy->n);
    return 0;
}

static int je_bus_guarded_copy(void *dst, const void *src, size_t n) {
    struct je_bus_copy_args copy;
    copy.dst = dst;
    copy.src = src;
    copy.n = n;
    return je_bus_guarded(je_bus_copy_call, &copy);
}

/* The address whose access faulted last on this thread (to name the offset of the cut). */
static void *je_bus_fault_address(void) {
    return je_bus_address;
}

#endif
