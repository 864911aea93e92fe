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
#include <string.h>

#define JE_BUS_FAULT (-2)

/* volatile, and fenced in je_bus_guarded: the compiler must not drop or move the store that arms the
 * guard (it sees the slot cleared again after fn, and a memcpy that never reads it) */
static __thread sigjmp_buf *volatile je_bus_jump = NULL;
static __thread void *je_bus_address = NULL;
static struct sigaction je_bus_previous;
static int je_bus_installed = 0;

static void je_bus_handler(int signo, siginfo_t *info, void *context) {
    sigjmp_buf *jump = je_bus_jump;
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
