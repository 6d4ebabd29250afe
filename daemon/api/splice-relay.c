/*
 * The bulk body of a proxied download, moved from the guest's socket to the client's inside the
 * kernel (daemon/api/guest-exchange.ts): splice(2) from the guest's socket into a pipe and from the
 * pipe into the client's, on a thread of its own. Relayed through Node instead, every byte was
 * copied into a JavaScript buffer and out again, with a callback per 64 KiB read; on a 2-core
 * machine that held a proxied download to about 0.7 of the guest service's own speed.
 *
 * A Node-API module of two functions:
 *   relay(guestFd, clientFd, length, done) -> handle   done(error: string | undefined, moved: number)
 *   cancel(handle)
 * The thread works on duplicates of the two descriptors, so Node closing a socket meanwhile cannot
 * hand its number to another file under the thread. `done` is called once, on Node's thread. It
 * declares the few Node-API functions it calls (a stable C ABI) instead of needing Node's headers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef struct napi_threadsafe_function__ *napi_threadsafe_function;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
typedef void (*napi_finalize)(napi_env, void *, void *);
typedef void (*napi_threadsafe_function_call_js)(napi_env, napi_value, void *, void *);
enum { napi_tsfn_release = 0 };
enum { napi_tsfn_blocking = 1 };
napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
napi_status napi_get_value_int32(napi_env, napi_value, int32_t *);
napi_status napi_get_value_int64(napi_env, napi_value, int64_t *);
napi_status napi_get_value_external(napi_env, napi_value, void **);
napi_status napi_create_external(napi_env, void *, napi_finalize, void *, napi_value *);
napi_status napi_create_string_utf8(napi_env, const char *, size_t, napi_value *);
napi_status napi_create_double(napi_env, double, napi_value *);
napi_status napi_get_undefined(napi_env, napi_value *);
napi_status napi_call_function(napi_env, napi_value, napi_value, size_t, const napi_value *, napi_value *);
napi_status napi_throw_error(napi_env, const char *, const char *);
napi_status napi_create_threadsafe_function(napi_env, napi_value, napi_value, napi_value, size_t, size_t, void *, napi_finalize, void *,
                                            napi_threadsafe_function_call_js, napi_threadsafe_function *);
napi_status napi_call_threadsafe_function(napi_threadsafe_function, void *, int);
napi_status napi_release_threadsafe_function(napi_threadsafe_function, int);

/* Bytes asked of one splice: a pipe of this size holds them (the default pipe is 64 KiB). */
#define CHUNK (1 << 20)

struct relay {
  int guest, client, wake; /* duplicates of the sockets (the thread's), and an eventfd that cancel() writes */
  int64_t left;            /* body bytes still to read from the guest */
  int64_t moved;           /* bytes written to the client */
  char error[160];         /* empty when the whole body went through */
  atomic_int refs;         /* the thread and the JavaScript handle */
  napi_threadsafe_function done;
};

/* The eventfd lives as long as the struct: cancel() may write to it after the thread has ended. */
static void release(struct relay *r) {
  if (atomic_fetch_sub(&r->refs, 1) != 1) return;
  close(r->wake);
  free(r);
}

/* Moves `left` bytes, waiting on the sockets (and the eventfd) whenever neither side can go on. */
static void move(struct relay *r) {
  int pipefd[2];
  if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
    snprintf(r->error, sizeof r->error, "no pipe for the relay: %s", strerror(errno));
    return;
  }
  int capacity = fcntl(pipefd[1], F_SETPIPE_SZ, CHUNK);
  if (capacity < 0) capacity = fcntl(pipefd[1], F_GETPIPE_SZ);
  int64_t queued = 0; /* in the pipe */
  while (r->left > 0 || queued > 0) {
    int progress = 0, guest_dry = 0;
    if (r->left > 0 && queued < capacity) {
      int64_t want = r->left < capacity - queued ? r->left : capacity - queued;
      ssize_t n = splice(r->guest, NULL, pipefd[1], NULL, (size_t)want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        r->left -= n;
        queued += n;
        progress = 1;
      } else if (n == 0) {
        snprintf(r->error, sizeof r->error, "the guest closed the body %lld bytes short", (long long)r->left);
        break;
      } else if (errno == EAGAIN) {
        guest_dry = 1;
      } else {
        snprintf(r->error, sizeof r->error, "reading the guest: %s", strerror(errno));
        break;
      }
    }
    if (queued > 0) {
      ssize_t n = splice(pipefd[0], NULL, r->client, NULL, (size_t)queued, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        queued -= n;
        r->moved += n;
        progress = 1;
      } else if (n < 0 && errno != EAGAIN) {
        snprintf(r->error, sizeof r->error, "the client went away");
        break;
      }
    }
    if (progress) continue;
    /* The guest is polled only with an empty pipe: a pipe short of free slots also answers EAGAIN,
     * and the guest being readable then would spin. A negative descriptor is not polled at all. */
    struct pollfd fds[3] = {
      {guest_dry && queued == 0 ? r->guest : -1, POLLIN, 0},
      {queued > 0 ? r->client : -1, POLLOUT, 0},
      {r->wake, POLLIN, 0},
    };
    if (poll(fds, 3, -1) < 0 && errno != EINTR) {
      snprintf(r->error, sizeof r->error, "waiting on the sockets: %s", strerror(errno));
      break;
    }
    if (fds[2].revents) {
      snprintf(r->error, sizeof r->error, "cancelled");
      break;
    }
    if (fds[1].revents & (POLLERR | POLLHUP)) {
      snprintf(r->error, sizeof r->error, "the client went away");
      break;
    }
  }
  if (!r->error[0]) {
    char extra;
    if (recv(r->guest, &extra, 1, MSG_PEEK | MSG_DONTWAIT) > 0) snprintf(r->error, sizeof r->error, "the guest sent more than the body it announced");
  }
  close(pipefd[0]);
  close(pipefd[1]);
}

static void *run(void *arg) {
  struct relay *r = arg;
  move(r);
  /* The sockets close with the relay, not when the handle is collected: the guest sees its
   * connection end, and a client socket Node closed meanwhile is gone for good. */
  close(r->guest);
  close(r->client);
  napi_call_threadsafe_function(r->done, r, napi_tsfn_blocking);
  napi_release_threadsafe_function(r->done, napi_tsfn_release);
  return NULL;
}

/* On Node's thread: done(error, moved), then the thread's reference goes. */
static void call_done(napi_env env, napi_value callback, void *context, void *data) {
  (void)context;
  struct relay *r = data;
  if (env && callback) {
    napi_value argv[2], undefined, result;
    napi_get_undefined(env, &undefined);
    if (r->error[0]) napi_create_string_utf8(env, r->error, strlen(r->error), &argv[0]);
    else argv[0] = undefined;
    napi_create_double(env, (double)r->moved, &argv[1]);
    napi_call_function(env, undefined, callback, 2, argv, &result);
  }
  release(r);
}

static void drop_handle(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  release(data);
}

static napi_value relay(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], handle = NULL, name;
  int32_t guest, client;
  int64_t length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != 0 || argc != 4 || napi_get_value_int32(env, argv[0], &guest) != 0 ||
      napi_get_value_int32(env, argv[1], &client) != 0 || napi_get_value_int64(env, argv[2], &length) != 0 || length < 0) {
    napi_throw_error(env, NULL, "relay(guestFd, clientFd, length, done)");
    return NULL;
  }
  struct relay *r = calloc(1, sizeof *r);
  if (!r) {
    napi_throw_error(env, NULL, "relay: out of memory");
    return NULL;
  }
  r->guest = fcntl(guest, F_DUPFD_CLOEXEC, 0);
  r->client = fcntl(client, F_DUPFD_CLOEXEC, 0);
  r->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  r->left = length;
  atomic_init(&r->refs, 2);
  pthread_t thread;
  pthread_attr_t attr;
  int ok = r->guest >= 0 && r->client >= 0 && r->wake >= 0 && napi_create_string_utf8(env, "splice-relay", 12, &name) == 0 &&
           napi_create_threadsafe_function(env, argv[3], NULL, name, 0, 1, NULL, NULL, NULL, call_done, &r->done) == 0;
  if (ok) {
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&thread, &attr, run, r) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) napi_release_threadsafe_function(r->done, napi_tsfn_release);
  }
  if (!ok) {
    if (r->guest >= 0) close(r->guest);
    if (r->client >= 0) close(r->client);
    if (r->wake >= 0) close(r->wake);
    free(r);
    napi_throw_error(env, NULL, "relay: could not start its thread");
    return NULL;
  }
  napi_create_external(env, r, drop_handle, NULL, &handle);
  return handle;
}

static napi_value cancel(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  void *data;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == 0 && argc == 1 && napi_get_value_external(env, argv[0], &data) == 0) {
    uint64_t one = 1;
    /* The handle holds a reference, so the eventfd is still open even after the thread ended. */
    /* A failed write means the eventfd is signalled already: nothing more to do. */
    ssize_t written = write(((struct relay *)data)->wake, &one, sizeof one);
    (void)written;
  }
  return NULL;
}

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "relay", 5, relay, NULL, &fn) == 0) napi_set_named_property(env, exports, "relay", fn);
  if (napi_create_function(env, "cancel", 6, cancel, NULL, &fn) == 0) napi_set_named_property(env, exports, "cancel", fn);
  return exports;
}

__attribute__((visibility("default"))) int node_api_module_get_api_version_v1(void) {
  return 8;
}
