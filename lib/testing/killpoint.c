/*
 * Kill points for crash tests: an LD_PRELOAD shim that counts the calls a process makes to the
 * functions a crash-safe writer depends on (rename, link and fsync, and the unlink and rmdir of its
 * clean-up) and sends the process SIGKILL right after the Nth one has returned, so a test can stop
 * a writer after each of its steps in turn instead of at random moments.
 *
 *   KILLPOINT_AT=N      SIGKILL right after the Nth counted call (unset or 0: never)
 *   KILLPOINT_SIGNAL=STOP
 *                       SIGSTOP there instead, so a race test can hold a process between two of its
 *                       steps while another runs, then let it go on with SIGCONT
 *   KILLPOINT_CALL=C    count only the calls of kind C (rename, link, fsync, fdatasync, unlink,
 *   KILLPOINT_PATH=P    rmdir, remove) and/or naming the path P exactly, and only those that succeeded:
 *                       a process whose other calls vary in number (a daemon, a retry) can then be
 *                       stopped at one step of its own
 *   KILLPOINT_LOG=FILE  append one line per counted call: "<n> <call> <path> [<path>]" (a
 *                       descriptor is shown as the path it names), for a test to count the kill
 *                       points of a clean run and to name the one it stopped at
 *
 * Calls from every thread count (a writer works on worker threads and libuv's pool), in the order
 * they return. Built by scripts/build-native.sh into dist/lib/testing/killpoint.so.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long calls;
static long kill_at;
static int stop_signal = SIGKILL;
static const char *only_call;
static const char *only_path;
static int log_fd = -1;

__attribute__((constructor)) static void killpoint_init(void) {
    const char *at = getenv("KILLPOINT_AT");
    kill_at = at ? strtol(at, NULL, 10) : 0;
    const char *signal_name = getenv("KILLPOINT_SIGNAL");
    if (signal_name && strcmp(signal_name, "STOP") == 0) stop_signal = SIGSTOP;
    const char *call = getenv("KILLPOINT_CALL");
    only_call = call && *call ? call : NULL;
    const char *path = getenv("KILLPOINT_PATH");
    only_path = path && *path ? path : NULL;
    const char *log = getenv("KILLPOINT_LOG");
    if (log && *log) log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

/* Whether a call is one KILLPOINT_CALL and KILLPOINT_PATH choose (every call when neither is set). */
static int chosen(int result, const char *call, const char *a, const char *b) {
    if (!only_call && !only_path) return 1;
    if (result != 0 || (only_call && strcmp(call, only_call) != 0)) return 0;
    return !only_path || (a && strcmp(a, only_path) == 0) || (b && strcmp(b, only_path) == 0);
}

/* The path behind a descriptor, for the log. */
static const char *fd_path(int fd, char *buf, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, size - 1);
    buf[n < 0 ? 0 : n] = '\0';
    return buf;
}

/* Counts a call that has returned `result`; logs it; stops the process at the chosen one. errno is kept. */
static void counted(int result, const char *call, const char *a, const char *b) {
    if (!chosen(result, call, a, b)) return;
    int saved = errno;
    long n = atomic_fetch_add(&calls, 1) + 1;
    if (log_fd >= 0) {
        char line[2 * PATH_MAX + 64];
        int len = snprintf(line, sizeof line, "%ld %s %s%s%s\n", n, call, a ? a : "", b ? " " : "", b ? b : "");
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        if (write(log_fd, line, (size_t)len) < 0) { /* the log is best effort */ }
    }
    if (n == kill_at) kill(getpid(), stop_signal);
    errno = saved;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static const char *at_path(int dirfd, const char *path, char *buf, size_t size) {
    if (dirfd == AT_FDCWD || path[0] == '/') return path;
    char dir[PATH_MAX];
    snprintf(buf, size, "%s/%s", fd_path(dirfd, dir, sizeof dir), path);
    return buf;
}

int rename(const char *from, const char *to) {
    int r = REAL(rename)(from, to);
    counted(r, "rename", from, to);
    return r;
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    int r = REAL(renameat)(fromfd, from, tofd, to);
    char a[PATH_MAX + 1], b[PATH_MAX + 1];
    counted(r, "rename", at_path(fromfd, from, a, sizeof a), at_path(tofd, to, b, sizeof b));
    return r;
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    int r = REAL(renameat2)(fromfd, from, tofd, to, flags);
    char a[PATH_MAX + 1], b[PATH_MAX + 1];
    counted(r, "rename", at_path(fromfd, from, a, sizeof a), at_path(tofd, to, b, sizeof b));
    return r;
}

/* A create-only publish (lib/durable.ts: renameExclusive) links the new name, then unlinks the old. */
int link(const char *from, const char *to) {
    int r = REAL(link)(from, to);
    counted(r, "link", from, to);
    return r;
}

int linkat(int fromfd, const char *from, int tofd, const char *to, int flags) {
    int r = REAL(linkat)(fromfd, from, tofd, to, flags);
    char a[PATH_MAX + 1], b[PATH_MAX + 1];
    counted(r, "link", at_path(fromfd, from, a, sizeof a), at_path(tofd, to, b, sizeof b));
    return r;
}

int fsync(int fd) {
    int r = REAL(fsync)(fd);
    char path[PATH_MAX];
    counted(r, "fsync", log_fd >= 0 || only_path ? fd_path(fd, path, sizeof path) : NULL, NULL);
    return r;
}

int fdatasync(int fd) {
    int r = REAL(fdatasync)(fd);
    char path[PATH_MAX];
    counted(r, "fdatasync", log_fd >= 0 || only_path ? fd_path(fd, path, sizeof path) : NULL, NULL);
    return r;
}

int unlink(const char *path) {
    int r = REAL(unlink)(path);
    counted(r, "unlink", path, NULL);
    return r;
}

int unlinkat(int dirfd, const char *path, int flags) {
    int r = REAL(unlinkat)(dirfd, path, flags);
    char full[PATH_MAX + 1];
    counted(r, flags & AT_REMOVEDIR ? "rmdir" : "unlink", at_path(dirfd, path, full, sizeof full), NULL);
    return r;
}

int rmdir(const char *path) {
    int r = REAL(rmdir)(path);
    counted(r, "rmdir", path, NULL);
    return r;
}

/* libstdc++'s std::filesystem (Node's recursive rm) removes through remove(3), whose own unlink and rmdir are not interposable. */
int remove(const char *path) {
    int r = REAL(remove)(path);
    counted(r, "remove", path, NULL);
    return r;
}
