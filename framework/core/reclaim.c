/*
 * glibc's allocator tuned for Node (framework/core/reclaim.ts): a Node-API module of two functions,
 * `trim` and `mmapThreshold`. Node gives freed buffers back to glibc's malloc, which keeps the pages
 * in its heap; after a flood of request bodies that is hundreds of megabytes no one uses. trim()
 * (malloc_trim(0)) returns the free pages to the system, and mmapThreshold(bytes) makes allocations
 * of that size or more (the 64 KiB socket reads that HTTP/2 DATA chunks are views of) pages of their
 * own, unmapped when freed. Declares the few Node-API functions it calls (a stable C ABI) instead of
 * needing Node's headers; Node resolves them when it loads the module.
 */
#include <malloc.h>
#include <stddef.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
napi_status napi_get_boolean(napi_env, int, napi_value *);
napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
napi_status napi_get_value_int32(napi_env, napi_value, int *);

/* trim(): true when memory was given back to the system. */
static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_get_boolean(env, malloc_trim(0), &result);
  return result;
}

/* mmapThreshold(bytes): allocations of this size or more get pages of their own, given back when freed. */
static napi_value mmap_threshold(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  int bytes = 0;
  int ok = napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == 0 && argc == 1 && napi_get_value_int32(env, argv[0], &bytes) == 0 && bytes > 0;
  napi_get_boolean(env, ok && mallopt(M_MMAP_THRESHOLD, bytes), &result);
  return result;
}

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "trim", 4, trim, NULL, &fn) == 0) napi_set_named_property(env, exports, "trim", fn);
  if (napi_create_function(env, "mmapThreshold", 13, mmap_threshold, NULL, &fn) == 0) napi_set_named_property(env, exports, "mmapThreshold", fn);
  return exports;
}

__attribute__((visibility("default"))) int node_api_module_get_api_version_v1(void) {
  return 8;
}
