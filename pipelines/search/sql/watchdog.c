/*
 * A SQLite extension that lets `query` and `find` run their statement in the command's own thread
 * and still stop it: at the deadline, on SIGINT/SIGTERM, when the process has grown by more
 * memory than the statement is allowed, or when another thread cancels it, a watchdog thread
 * calls sqlite3_interrupt(), and the running statement returns SQLITE_INTERRUPT at its next step.
 *
 * Why: SQLite cannot be interrupted from JavaScript (better-sqlite3 exposes neither
 * sqlite3_interrupt nor a progress handler, which its build compiles out), and a statement run on
 * a worker thread cannot even be abandoned (the process hangs at exit until it ends). Starting a
 * child process per statement made it killable but cost a second Node start-up on every command.
 *
 * Why memory is watched here: better-sqlite3 builds SQLite with SQLITE_DEFAULT_MEMSTATUS=0, so
 * SQLite counts no memory and never enforces its heap limits (sqlite3_hard_heap_limit64), and one
 * statement could grow the process until the kernel killed it (four randomblob(500000000) reached
 * 4 GB). So the watchdog thread reads the process's resident size every CHECK_MS (a pread of
 * /proc/self/statm, a few microseconds, on its own thread: the statement pays nothing). That stops
 * what grows over many steps; within one step SQLite looks for no interrupt while it computes the
 * values of a row, so each value is bounded by the length limit set at arming.
 *
 * Use: load the extension on the connection, then run
 * `SELECT trajstore_watchdog(TIMEOUT_MS, MAX_GROWTH_BYTES, MAX_VALUE_BYTES, TICKET)` once before
 * the statement. The first call arms the watchdog; later calls fail, so the statement being guarded
 * cannot move its own limits. The watchdog is disarmed (its thread joined, the signal handlers
 * restored) when the connection closes. One armed watchdog per process at a time.
 *
 * The other functions run on connections of their own, which load the extension at the entry
 * point sqlite3_watchdog_control_init, so that the guarded statement cannot call them:
 * - `trajstore_sql_stop_reason()`: why the statement was stopped. Asked there, not on the guarded
 *   connection, as the watchdog interrupts that one again until it is disarmed (see watch()).
 * - `trajstore_sql_ticket()` and `trajstore_sql_cancel(TICKET)`: `serve`'s event loop stops the
 *   statement its SQL thread runs when the request's client goes away. A statement armed with a
 *   ticket (0: none) is stopped once that ticket is cancelled, whether before it started or while
 *   it runs. Tickets are numbered from one counter of the process (the extension is loaded once per
 *   process, so its globals are shared by every connection and thread) and never reused, so a
 *   cancel that comes after its statement ended reaches no later one. (A pipe per statement was
 *   rejected: its descriptor, closed with the statement, could be reused by then.)
 *
 * While armed, SIGINT and SIGTERM go to the watchdog first, then to the handler that was there
 * before (Node's), so the command still sees the signal once the statement has stopped.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAKE_SIGNAL 'S'
#define WAKE_QUIT 'Q'
/* How often a stopping statement is interrupted again. */
#define REPEAT_MS 10
/* How often the process's memory and the cancelled ticket are looked at while the statement runs. */
#define CHECK_MS 10

/* Why the watchdog stopped the statement; the names are what trajstore_sql_stop_reason() returns. */
enum { RUNNING, STOP_TIMEOUT, STOP_SIGNAL, STOP_MEMORY, STOP_CANCEL };
static const char *const STOP_REASONS[] = {NULL, "timeout", "signal", "memory", "cancel"};

/* The last ticket handed out, and the highest one cancelled (see the top). */
static atomic_llong last_ticket;
static atomic_llong cancelled_ticket;

typedef struct Watchdog {
  sqlite3 *db;
  int pipe_read;
  int pipe_write;
  int armed;
  pthread_t thread;
  long long deadline_ns; /* CLOCK_MONOTONIC, the clock of Node's process.hrtime */
  int statm;              /* /proc/self/statm, or -1 where there is none */
  long long max_resident; /* bytes: the resident size at arming plus the growth allowed; -1: not watched */
  sqlite3_int64 ticket;   /* 0: none */
  atomic_int reason;
  struct sigaction previous_int;
  struct sigaction previous_term;
} Watchdog;

/* The armed watchdog, for the signal handler and for trajstore_sql_stop_reason(). */
static Watchdog *volatile armed_watchdog;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The process's resident size in bytes (all threads: /proc/self is the process), or -1. */
static long long resident_bytes(int statm) {
  char text[128];
  ssize_t n = pread(statm, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  long long size, resident;
  if (sscanf(text, "%lld %lld", &size, &resident) != 2) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

static void chain(const struct sigaction *previous, int sig, siginfo_t *info, void *context) {
  if (previous->sa_flags & SA_SIGINFO) {
    if (previous->sa_sigaction) previous->sa_sigaction(sig, info, context);
  } else if (previous->sa_handler == SIG_DFL) {
    /* Nobody handled it before us: do what the default would have done. */
    sigaction(sig, previous, NULL);
    raise(sig);
  } else if (previous->sa_handler != SIG_IGN) {
    previous->sa_handler(sig);
  }
}

static void on_signal(int sig, siginfo_t *info, void *context) {
  int saved_errno = errno;
  Watchdog *w = armed_watchdog;
  if (w) {
    char wake = WAKE_SIGNAL;
    ssize_t ignored = write(w->pipe_write, &wake, 1);
    (void)ignored;
    chain(sig == SIGINT ? &w->previous_int : &w->previous_term, sig, info, context);
  }
  errno = saved_errno;
}

/* The first reason to stop is the one reported. */
static void stop(Watchdog *w, int reason) {
  int running = RUNNING;
  atomic_compare_exchange_strong(&w->reason, &running, reason);
}

/*
 * Waits for the deadline, a signal or the quit byte, and looks at the process's memory and the
 * cancelled ticket every CHECK_MS. From the first reason to stop on, it interrupts the connection
 * again every REPEAT_MS until it is told to quit: SQLite forgets an interrupt that arrives while no
 * statement runs (between two statements, or while one is being prepared), and the statement to
 * stop may start after it.
 */
static void *watch(void *arg) {
  Watchdog *w = (Watchdog *)arg;
  for (;;) {
    int stopping = atomic_load(&w->reason) != RUNNING;
    long long left = (w->deadline_ns - now_ns() + 999999) / 1000000;
    int timeout = stopping ? REPEAT_MS : (left <= 0 ? 0 : (left > CHECK_MS ? CHECK_MS : (int)left));
    struct pollfd pfd = {w->pipe_read, POLLIN, 0};
    int ready = poll(&pfd, 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0) {
      char wake;
      if (read(w->pipe_read, &wake, 1) == 1 && wake == WAKE_QUIT) return NULL;
      stop(w, STOP_SIGNAL);
    } else if (!stopping) {
      if (now_ns() >= w->deadline_ns) stop(w, STOP_TIMEOUT);
      else if (w->ticket != 0 && atomic_load(&cancelled_ticket) == w->ticket) stop(w, STOP_CANCEL);
      else if (w->max_resident >= 0 && resident_bytes(w->statm) > w->max_resident) stop(w, STOP_MEMORY);
    }
    if (atomic_load(&w->reason) != RUNNING) sqlite3_interrupt(w->db);
  }
}

/* A whole, non-negative number; JavaScript numbers arrive as REAL. */
static int whole_number(sqlite3_value *value, sqlite3_int64 *out) {
  int type = sqlite3_value_numeric_type(value);
  double real = sqlite3_value_double(value);
  *out = sqlite3_value_int64(value);
  return (type == SQLITE_INTEGER || type == SQLITE_FLOAT) && real >= 0 && real == (double)*out;
}

static void arm(sqlite3_context *context, int argc, sqlite3_value **argv) {
  Watchdog *w = (Watchdog *)sqlite3_user_data(context);
  (void)argc;
  if (w->armed || armed_watchdog) {
    sqlite3_result_error(context, "trajstore_watchdog: already armed", -1);
    return;
  }
  sqlite3_int64 ms, max_growth, max_value, ticket;
  if (!whole_number(argv[0], &ms) || !whole_number(argv[1], &max_growth) || !whole_number(argv[2], &max_value) || !whole_number(argv[3], &ticket)) {
    sqlite3_result_error(context, "trajstore_watchdog: the timeout (ms), the limits (bytes) and the ticket must be whole numbers", -1);
    return;
  }
  /* Only ever lowered: better-sqlite3 sets it to the longest string V8 can hold. */
  if (max_value < sqlite3_limit(w->db, SQLITE_LIMIT_LENGTH, -1)) sqlite3_limit(w->db, SQLITE_LIMIT_LENGTH, (int)max_value);
  int fds[2];
  if (pipe(fds) != 0) {
    sqlite3_result_error(context, "trajstore_watchdog: pipe() failed", -1);
    return;
  }
  w->pipe_read = fds[0];
  w->pipe_write = fds[1];
  w->deadline_ns = now_ns() + ms * 1000000LL;
  w->statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  long long resident = w->statm >= 0 ? resident_bytes(w->statm) : -1;
  w->max_resident = resident < 0 ? -1 : resident + max_growth;
  w->ticket = ticket;
  atomic_store(&w->reason, RUNNING);
  if (pthread_create(&w->thread, NULL, watch, w) != 0) {
    close(fds[0]);
    close(fds[1]);
    if (w->statm >= 0) close(w->statm);
    sqlite3_result_error(context, "trajstore_watchdog: cannot start its thread", -1);
    return;
  }
  w->armed = 1;
  armed_watchdog = w;
  struct sigaction ours;
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = on_signal;
  ours.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  sigaction(SIGINT, &ours, &w->previous_int);
  sigaction(SIGTERM, &ours, &w->previous_term);
  sqlite3_result_int(context, 1);
}

/* Called when the connection closes (the function's user data is destroyed). */
static void disarm(void *arg) {
  Watchdog *w = (Watchdog *)arg;
  if (w->armed) {
    sigaction(SIGINT, &w->previous_int, NULL);
    sigaction(SIGTERM, &w->previous_term, NULL);
    armed_watchdog = NULL;
    char quit = WAKE_QUIT;
    ssize_t ignored = write(w->pipe_write, &quit, 1);
    (void)ignored;
    pthread_join(w->thread, NULL);
    close(w->pipe_read);
    close(w->pipe_write);
    if (w->statm >= 0) close(w->statm);
  }
  sqlite3_free(w);
}

/* Why the armed watchdog stopped its statement ('timeout', 'signal', 'memory', 'cancel'), or NULL. */
static void stop_reason(sqlite3_context *context, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  Watchdog *w = armed_watchdog;
  const char *reason = w ? STOP_REASONS[atomic_load(&w->reason)] : NULL;
  if (reason) sqlite3_result_text(context, reason, -1, SQLITE_STATIC);
  else sqlite3_result_null(context);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_extension_init(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
  SQLITE_EXTENSION_INIT2(api);
  (void)error;
  Watchdog *w = (Watchdog *)sqlite3_malloc(sizeof(Watchdog));
  if (!w) return SQLITE_NOMEM;
  memset(w, 0, sizeof *w);
  w->db = db;
  w->statm = -1;
  return sqlite3_create_function_v2(db, "trajstore_watchdog", 4, SQLITE_UTF8 | SQLITE_DIRECTONLY, w, arm, NULL, NULL, disarm);
}

static void next_ticket(sqlite3_context *context, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_int64(context, atomic_fetch_add(&last_ticket, 1) + 1);
}

/* Never lowered: a late cancel of an earlier ticket cannot undo the cancel of a later one. */
static void cancel(sqlite3_context *context, int argc, sqlite3_value **argv) {
  (void)argc;
  long long ticket = sqlite3_value_int64(argv[0]);
  long long seen = atomic_load(&cancelled_ticket);
  while (ticket > seen && !atomic_compare_exchange_weak(&cancelled_ticket, &seen, ticket)) {
  }
  sqlite3_result_null(context);
}

/* The entry point of the connections that stop a statement from elsewhere and say why it stopped (see the top). */
#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_watchdog_control_init(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
  SQLITE_EXTENSION_INIT2(api);
  (void)error;
  int flags = SQLITE_UTF8 | SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function_v2(db, "trajstore_sql_stop_reason", 0, flags, NULL, stop_reason, NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_create_function_v2(db, "trajstore_sql_ticket", 0, flags, NULL, next_ticket, NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_create_function_v2(db, "trajstore_sql_cancel", 1, flags, NULL, cancel, NULL, NULL, NULL);
  return rc;
}
