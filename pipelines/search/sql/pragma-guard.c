/*
 * A SQLite extension that refuses, at prepare time, every PRAGMA given a value other than the name
 * of a table or index to report on. Loaded on the read-only connection of `query` and `find` after
 * the mounts are attached and `query_only` is set (connection.ts).
 *
 * Why: the runner runs a statement only when SQLite calls it read-only and it returns rows, but
 * SQLite calls `PRAGMA mmap_size = N`, `locking_mode = exclusive`, `busy_timeout = N`, `threads = N`
 * and the heap limits read-only (they touch no file) and they answer with a row. They change the
 * connection, or the whole process for the heap limits (all of `serve`'s later requests). SQLite's
 * authorizer sees each pragma's name and value after parsing, so no SQL text is read here; the
 * table-valued forms (`pragma_table_info('runs')`) are prepared as pragmas and checked the same way.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <stddef.h>

/* Pragmas whose value names the table, index or row count to report on: reads, whatever the value. */
static const char *const REPORTING[] = {
  "table_info", "table_xinfo", "table_list", "index_info", "index_xinfo", "index_list",
  "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check", NULL,
};

static int authorize(void *unused, int action, const char *name, const char *value, const char *schema, const char *trigger) {
  (void)unused;
  (void)schema;
  (void)trigger;
  if (action != SQLITE_PRAGMA || value == NULL) return SQLITE_OK;
  for (const char *const *p = REPORTING; *p; p++) {
    if (sqlite3_stricmp(name, *p) == 0) return SQLITE_OK;
  }
  return SQLITE_DENY;
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_extension_init(sqlite3 *db, char **error, const sqlite3_api_routines *api) {
  SQLITE_EXTENSION_INIT2(api);
  (void)error;
  return sqlite3_set_authorizer(db, authorize, NULL);
}
