/* The crash harness's recorder of file-system calls: an LD_PRELOAD library.
 *
 * Loaded into a workload process, it records, in the order they happen, every call that changes
 * what a power loss could leave of one directory: open (with its flags: a write to a descriptor
 * opened with O_DSYNC / O_SYNC is durable when it returns), write, pwrite, writev and pwritev with
 * their bytes, ftruncate, fsync / fdatasync (their start and their return, so a write made by
 * another thread while a sync runs is not taken as covered by it), rename, unlink, close, and each
 * shared writable mmap of a recorded file (whose writes no log can see).
 * Writes to one more descriptor (the workload's oracle on stdout) are recorded as marks, which puts
 * the oracle's "durable up to call N" lines in the same order as the system calls.
 * journal_engine/crashtest/power_loss.py reads the log and rebuilds crash states from it.
 *
 * The compiled core writes with pwrite/fdatasync from C and the Python twin through os.*: both land
 * here, and so does any library of another store that calls the C library (LMDB writes its pages
 * with pwrite and writev, syncs with fdatasync and writes its meta page through an O_DSYNC
 * descriptor). Writes through a shared mapping are not seen, only the mapping (the journal maps no
 * file so; LMDB maps its lock file, which holds no data, and with MDB_WRITEMAP its data file).
 *
 * Environment (read once, at load):
 *   JOURNAL_ENGINE_IOLOG        the log file to write (nothing is recorded without it)
 *   JOURNAL_ENGINE_IOLOG_DIR    the directory whose files are recorded (an absolute, resolved path)
 *   JOURNAL_ENGINE_IOLOG_MARK_FD  a descriptor whose writes are recorded as marks (the oracle)
 *   JOURNAL_ENGINE_IOLOG_SKIP   "file-sync" (fsync/fdatasync of a file) or "dir-sync" (of a directory):
 *                               that sync returns success without syncing
 *                               or being recorded -- a build with the step left out, for showing
 *                               that the harness catches it
 *
 * Log entry: a 32-byte head {u32 op, i32 fd, u64 a, u64 b, u32 len1, u32 len2} then len1 + len2
 * bytes (paths or data), little-endian as the machine is. The layout is read by power_loss.py.
 * Built by setup.py as journal_engine/crashtest/_iorecord*.so (no Python API in it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_OPEN = 1, OP_CLOSE = 2, OP_WRITE = 3, OP_SYNC_BEGIN = 4, OP_SYNC_END = 5, OP_RENAME = 6,
       OP_UNLINK = 7, OP_TRUNCATE = 8, OP_MARK = 9, OP_MAP = 10 };

struct entry_head { uint32_t op; int32_t fd; uint64_t a; uint64_t b; uint32_t len1; uint32_t len2; };

#define MAX_FD 65536
static unsigned char watched[MAX_FD];     /* 1: a descriptor of a file in the directory; 2: with O_APPEND */
static int log_fd = -1;
static int mark_fd = -1;
static int skip_fdatasync = 0, skip_dirsync = 0;
static char watched_dir[PATH_MAX];
static size_t watched_dir_len = 0;
static uint64_t sync_serial = 0;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);

#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)

__attribute__((constructor)) static void iorecord_init(void) {
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64); RESOLVE(close); RESOLVE(write);
    RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(rename);
    RESOLVE(renameat); RESOLVE(unlink); RESOLVE(unlinkat); RESOLVE(ftruncate); RESOLVE(ftruncate64);
    RESOLVE(writev); RESOLVE(pwritev); RESOLVE(pwritev64); RESOLVE(mmap); RESOLVE(mmap64);
    const char *log_path = getenv("JOURNAL_ENGINE_IOLOG");
    const char *dir = getenv("JOURNAL_ENGINE_IOLOG_DIR");
    const char *mark = getenv("JOURNAL_ENGINE_IOLOG_MARK_FD");
    const char *skip = getenv("JOURNAL_ENGINE_IOLOG_SKIP");
    if (log_path == NULL || dir == NULL || strlen(dir) >= PATH_MAX - 1) return;
    strcpy(watched_dir, dir);
    watched_dir_len = strlen(watched_dir);
    while (watched_dir_len > 1 && watched_dir[watched_dir_len - 1] == '/') watched_dir[--watched_dir_len] = 0;
    if (mark != NULL) mark_fd = atoi(mark);
    if (skip != NULL) {
        skip_fdatasync = strcmp(skip, "file-sync") == 0;
        skip_dirsync = strcmp(skip, "dir-sync") == 0;
    }
    log_fd = real_open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
}

/* One entry, whole; the caller holds log_lock. */
static void put(uint32_t op, int fd, uint64_t a, uint64_t b, const void *p1, size_t n1, const void *p2, size_t n2) {
    struct entry_head head = { op, fd, a, b, (uint32_t)n1, (uint32_t)n2 };
    struct iovec parts[3] = { { &head, sizeof head }, { (void *)p1, n1 }, { (void *)p2, n2 } };
    size_t total = sizeof head + n1 + n2;
    ssize_t done = real_writev(log_fd, parts, 3);
    if (done != (ssize_t)total) {   /* a log cut short would replay as a lie: stop the workload loudly */
        static const char message[] = "iorecord: the system-call log could not be written\n";
        real_write(2, message, sizeof message - 1);
        _exit(70);
    }
}

static int in_dir(const char *absolute) {
    return watched_dir_len > 0 && strncmp(absolute, watched_dir, watched_dir_len) == 0
        && (absolute[watched_dir_len] == '/' || absolute[watched_dir_len] == 0);
}

/* The absolute path a name given relative to dirfd (or the working directory) refers to; the
 * directory part resolved, the last component kept (it may not exist yet, or be a rename's target). */
static int absolute_path(int dirfd, const char *path, char *out) {
    char base[PATH_MAX], parent[PATH_MAX];
    if (path[0] == '/') {
        snprintf(base, sizeof base, "%s", path);
    } else {
        char where[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (getcwd(where, sizeof where) == NULL) return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, where, sizeof where - 1);
            if (n < 0) return -1;
            where[n] = 0;
        }
        if (snprintf(base, sizeof base, "%s/%s", where, path) >= (int)sizeof base) return -1;
    }
    char *slash = strrchr(base, '/');
    const char *name = slash + 1;
    if (slash == base) {
        strcpy(parent, "/");
    } else {
        *slash = 0;
        if (realpath(base, parent) == NULL) return -1;
    }
    if (snprintf(out, PATH_MAX, "%s/%s", strcmp(parent, "/") == 0 ? "" : parent, name) >= PATH_MAX) return -1;
    return 0;
}

static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return -1;
    out[n] = 0;
    return 0;
}

static int opened(int dirfd, const char *path, int flags, mode_t mode,
                  int (*call)(int, const char *, int, ...), int (*call_cwd)(const char *, int, ...)) {
    if (log_fd < 0) return call_cwd ? call_cwd(path, flags, mode) : call(dirfd, path, flags, mode);
    char absolute[PATH_MAX];
    int candidate = absolute_path(dirfd, path, absolute) == 0 && in_dir(absolute);
    if (!candidate) return call_cwd ? call_cwd(path, flags, mode) : call(dirfd, path, flags, mode);
    pthread_mutex_lock(&log_lock);
    struct stat before;
    int existed = stat(absolute, &before) == 0;
    int fd = call_cwd ? call_cwd(path, flags, mode) : call(dirfd, path, flags, mode);
    int saved = errno;
    if (fd >= 0 && fd < MAX_FD) {
        char resolved[PATH_MAX];
        if (fd_path(fd, resolved) == 0) strcpy(absolute, resolved);
        watched[fd] = (flags & O_APPEND) ? 2 : 1;
        put(OP_OPEN, fd, (uint64_t)flags, (uint64_t)existed, absolute, strlen(absolute), NULL, 0);
    }
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return fd;
}

static mode_t mode_of(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args);
    return opened(AT_FDCWD, path, flags, mode, NULL, real_open);
}

int open64(const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args);
    return opened(AT_FDCWD, path, flags, mode, NULL, real_open64);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args);
    return opened(dirfd, path, flags, mode, real_openat, NULL);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list args; va_start(args, flags); mode_t mode = mode_of(flags, args); va_end(args);
    return opened(dirfd, path, flags, mode, real_openat64, NULL);
}

int close(int fd) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_close(fd);
    pthread_mutex_lock(&log_lock);
    int rc = real_close(fd);
    int saved = errno;
    watched[fd] = 0;
    put(OP_CLOSE, fd, 0, 0, NULL, 0, NULL, 0);
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

/* Where a write without an offset lands: the end of the file with O_APPEND, else the file position. */
static off_t position_of(int fd) {
    struct stat st;
    return (watched[fd] == 2 && fstat(fd, &st) == 0) ? st.st_size : lseek(fd, 0, SEEK_CUR);
}

static ssize_t written(int fd, const void *data, size_t n, off_t offset, int positioned,
                       ssize_t (*call)(int, const void *, size_t, off_t)) {
    pthread_mutex_lock(&log_lock);
    off_t at = positioned ? offset : position_of(fd);
    ssize_t rc = positioned ? call(fd, data, n, offset) : real_write(fd, data, n);
    int saved = errno;
    if (rc > 0) put(OP_WRITE, fd, (uint64_t)at, 0, NULL, 0, data, (size_t)rc);
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

ssize_t write(int fd, const void *data, size_t n) {
    if (log_fd >= 0 && fd == mark_fd) {
        pthread_mutex_lock(&log_lock);
        ssize_t rc = real_write(fd, data, n);
        int saved = errno;
        if (rc > 0) put(OP_MARK, fd, 0, 0, NULL, 0, data, (size_t)rc);
        pthread_mutex_unlock(&log_lock);
        errno = saved;
        return rc;
    }
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_write(fd, data, n);
    return written(fd, data, n, 0, 0, NULL);
}

ssize_t pwrite(int fd, const void *data, size_t n, off_t offset) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_pwrite(fd, data, n, offset);
    return written(fd, data, n, offset, 1, real_pwrite);
}

ssize_t pwrite64(int fd, const void *data, size_t n, off_t offset) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_pwrite64(fd, data, n, offset);
    return written(fd, data, n, offset, 1, real_pwrite64);
}

/* A gathered write: logged as one write of the bytes it wrote, in order. */
static ssize_t gathered(int fd, const struct iovec *parts, int count, off_t offset, int positioned,
                        ssize_t (*call)(int, const struct iovec *, int, off_t)) {
    pthread_mutex_lock(&log_lock);
    off_t at = positioned ? offset : position_of(fd);
    ssize_t rc = positioned ? call(fd, parts, count, offset) : real_writev(fd, parts, count);
    int saved = errno;
    if (rc > 0) {
        char *joined = malloc((size_t)rc);
        if (joined == NULL) {
            static const char message[] = "iorecord: out of memory for a gathered write\n";
            real_write(2, message, sizeof message - 1);
            _exit(70);
        }
        size_t copied = 0;
        for (int i = 0; i < count && copied < (size_t)rc; i++) {
            size_t n = parts[i].iov_len < (size_t)rc - copied ? parts[i].iov_len : (size_t)rc - copied;
            memcpy(joined + copied, parts[i].iov_base, n);
            copied += n;
        }
        put(OP_WRITE, fd, (uint64_t)at, 0, NULL, 0, joined, (size_t)rc);
        free(joined);
    }
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

ssize_t writev(int fd, const struct iovec *parts, int count) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_writev(fd, parts, count);
    return gathered(fd, parts, count, 0, 0, NULL);
}

ssize_t pwritev(int fd, const struct iovec *parts, int count, off_t offset) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_pwritev(fd, parts, count, offset);
    return gathered(fd, parts, count, offset, 1, real_pwritev);
}

ssize_t pwritev64(int fd, const struct iovec *parts, int count, off_t offset) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return real_pwritev64(fd, parts, count, offset);
    return gathered(fd, parts, count, offset, 1, real_pwritev64);
}

/* A shared, writable mapping of a recorded file: its writes are stores to memory, which no log can
 * see; the replay learns which files were mapped so and says it cannot model them. */
static void *mapped(void *address, size_t length, int prot, int flags, int fd, off_t offset,
                    void *(*call)(void *, size_t, int, int, int, off_t)) {
    void *result = call(address, length, prot, flags, fd, offset);
    if (log_fd >= 0 && fd >= 0 && fd < MAX_FD && watched[fd] && result != MAP_FAILED && (prot & PROT_WRITE)
        && (flags & MAP_SHARED)) {
        int saved = errno;
        pthread_mutex_lock(&log_lock);
        put(OP_MAP, fd, (uint64_t)prot, (uint64_t)flags, NULL, 0, NULL, 0);
        pthread_mutex_unlock(&log_lock);
        errno = saved;
    }
    return result;
}

void *mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
    if (real_mmap == NULL) RESOLVE(mmap);     /* a library's constructor may map before ours ran */
    return mapped(address, length, prot, flags, fd, offset, real_mmap);
}

void *mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
    if (real_mmap64 == NULL) RESOLVE(mmap64);
    return mapped(address, length, prot, flags, fd, offset, real_mmap64);
}

static int truncated(int fd, off_t length, int (*call)(int, off_t)) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return call(fd, length);
    pthread_mutex_lock(&log_lock);
    int rc = call(fd, length);
    int saved = errno;
    if (rc == 0) put(OP_TRUNCATE, fd, (uint64_t)length, 0, NULL, 0, NULL, 0);
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

int ftruncate(int fd, off_t length) { return truncated(fd, length, real_ftruncate); }
int ftruncate64(int fd, off_t length) { return truncated(fd, length, real_ftruncate64); }

static int is_directory(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The sync covers what was written before it began: its start and its return are two entries. */
static int synced(int fd, int (*call)(int)) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD || !watched[fd]) return call(fd);
    int directory = is_directory(fd);
    if ((directory && skip_dirsync) || (!directory && skip_fdatasync)) return 0;
    pthread_mutex_lock(&log_lock);
    uint64_t serial = ++sync_serial;
    put(OP_SYNC_BEGIN, fd, serial, 0, NULL, 0, NULL, 0);
    pthread_mutex_unlock(&log_lock);
    int rc = call(fd);
    int saved = errno;
    pthread_mutex_lock(&log_lock);
    put(OP_SYNC_END, fd, serial, rc == 0, NULL, 0, NULL, 0);
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

int fsync(int fd) { return synced(fd, real_fsync); }
int fdatasync(int fd) { return synced(fd, real_fdatasync); }

static int renamed(int from_fd, const char *from, int to_fd, const char *to) {
    char source[PATH_MAX], target[PATH_MAX];
    int known = log_fd >= 0 && absolute_path(from_fd, from, source) == 0 && absolute_path(to_fd, to, target) == 0
        && (in_dir(source) || in_dir(target));
    if (!known) return from_fd == AT_FDCWD && to_fd == AT_FDCWD ? real_rename(from, to)
                                                                : real_renameat(from_fd, from, to_fd, to);
    pthread_mutex_lock(&log_lock);
    int rc = from_fd == AT_FDCWD && to_fd == AT_FDCWD ? real_rename(from, to) : real_renameat(from_fd, from, to_fd, to);
    int saved = errno;
    if (rc == 0) put(OP_RENAME, -1, 0, 0, source, strlen(source), target, strlen(target));
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

int rename(const char *from, const char *to) { return renamed(AT_FDCWD, from, AT_FDCWD, to); }
int renameat(int from_fd, const char *from, int to_fd, const char *to) { return renamed(from_fd, from, to_fd, to); }

static int unlinked(int dirfd, const char *path, int flags) {
    char absolute[PATH_MAX];
    int known = log_fd >= 0 && absolute_path(dirfd, path, absolute) == 0 && in_dir(absolute);
    if (!known) return dirfd == AT_FDCWD && flags == 0 ? real_unlink(path) : real_unlinkat(dirfd, path, flags);
    pthread_mutex_lock(&log_lock);
    int rc = dirfd == AT_FDCWD && flags == 0 ? real_unlink(path) : real_unlinkat(dirfd, path, flags);
    int saved = errno;
    if (rc == 0) put(OP_UNLINK, -1, (uint64_t)flags, 0, absolute, strlen(absolute), NULL, 0);
    pthread_mutex_unlock(&log_lock);
    errno = saved;
    return rc;
}

int unlink(const char *path) { return unlinked(AT_FDCWD, path, 0); }
int unlinkat(int dirfd, const char *path, int flags) { return unlinked(dirfd, path, flags); }
