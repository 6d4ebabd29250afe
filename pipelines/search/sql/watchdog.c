/*
 * A SQLite extension that lets `query` and `find` run their statement in the command's own thread
 * and still stop it: at the deadline, or on SIGINT/SIGTERM, a watchdog thread calls
 * sqlite3_interrupt(), and the running statement returns SQLITE_INTERRUPT at its next step.
 *
 * Why: SQLite cannot be interrupted from JavaScript (better-sqlite3 exposes neither
 * sqlite3_interrupt nor a progress handler, which its build compiles out), and a statement run on
 * a worker thread cannot even be abandoned (the process hangs at exit until it ends). Starting a
 * child process per statement made it killable but cost a second Node start-up on every command.
 *
 * Use: load the extension on the connection, then run `SELECT trajstore_watchdog(MS)` once before
 * the statement. The first call arms the watchdog; later calls fail, so the statement being
 * guarded cannot move its own deadline. The watchdog is disarmed (its thread joined, the signal
 * handlers restored) when the connection closes. One armed watchdog per process at a time.
 *
 * While armed, SIGINT and SIGTERM go to the watchdog first, then to the handler that was there
 * before (Node's), so the command still sees the signal once the statement has stopped.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAKE_SIGNAL 'S'
#define WAKE_QUIT 'Q'
/* How often a stopping statement is interrupted again. */
#define REPEAT_MS 10

typedef struct Watchdog {
  sqlite3 *db;
  int pipe_read;
  int pipe_write;
  int armed;
  pthread_t thread;
  long long deadline_ns; /* CLOCK_MONOTONIC, the clock of Node's process.hrtime */
  struct sigaction previous_int;
  struct sigaction previous_term;
} Watchdog;

/* The armed watchdog, for the signal handler. */
static Watchdog *volatile armed_watchdog;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

/*
 * Waits for the deadline, a signal or the quit byte. From the deadline or the signal on, it
 * interrupts the connection again every REPEAT_MS until it is told to quit: SQLite forgets an
 * interrupt that arrives while no statement runs (between two statements, or while one is being
 * prepared), and the statement to stop may start after it.
 */
static void *watch(void *arg) {
  Watchdog *w = (Watchdog *)arg;
  int stopping = 0;
  for (;;) {
    /* Rounded up: woken early, the caller would take the interrupt for a signal's. */
    long long left = (w->deadline_ns - now_ns() + 999999) / 1000000;
    int timeout = stopping ? REPEAT_MS : (left <= 0 ? 0 : (left > 0x7fffffff ? 0x7fffffff : (int)left));
    struct pollfd pfd = {w->pipe_read, POLLIN, 0};
    int ready = poll(&pfd, 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0) {
      char wake;
      if (read(w->pipe_read, &wake, 1) == 1 && wake == WAKE_QUIT) return NULL;
    } else if (!stopping && now_ns() < w->deadline_ns) {
      continue; /* woken before the deadline */
    }
    stopping = 1;
    sqlite3_interrupt(w->db);
  }
}

static void arm(sqlite3_context *context, int argc, sqlite3_value **argv) {
  Watchdog *w = (Watchdog *)sqlite3_user_data(context);
  (void)argc;
  if (w->armed || armed_watchdog) {
    sqlite3_result_error(context, "trajstore_watchdog: already armed", -1);
    return;
  }
  /* JavaScript numbers arrive as REAL: any whole, non-negative number will do. */
  int type = sqlite3_value_numeric_type(argv[0]);
  double value = sqlite3_value_double(argv[0]);
  sqlite3_int64 ms = sqlite3_value_int64(argv[0]);
  if ((type != SQLITE_INTEGER && type != SQLITE_FLOAT) || value < 0 || value != (double)ms) {
    sqlite3_result_error(context, "trajstore_watchdog: the timeout must be a whole number of milliseconds", -1);
    return;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    sqlite3_result_error(context, "trajstore_watchdog: pipe() failed", -1);
    return;
  }
  w->pipe_read = fds[0];
  w->pipe_write = fds[1];
  w->deadline_ns = now_ns() + ms * 1000000LL;
  if (pthread_create(&w->thread, NULL, watch, w) != 0) {
    close(fds[0]);
    close(fds[1]);
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
  }
  sqlite3_free(w);
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
  return sqlite3_create_function_v2(db, "trajstore_watchdog", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, w, arm, NULL, NULL, disarm);
}
