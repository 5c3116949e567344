/*
 * dist/native/oats.node: the few system calls a digest makes per file, made
 * from C where their cost from JavaScript showed in the profiles
 * (docs/design/performance.md, "The native addon and its fallback").
 * src/engine/native-reads.ts loads
 * it; without it every caller falls back to the JavaScript it replaces.
 */
#include "addon.h"

static const struct {
  const char *name;
  napi_callback function;
} FUNCTIONS[] = {
    {"readSmallFiles", read_small_files},
    {"smallReadsBlockReads", small_reads_block_reads},
    {"threadBlockReads", thread_block_reads_of_caller},
    {"openDirectoryAt", open_directory_at},
    {"listDirectory", list_directory},
    {"closeDirectory", close_directory},
    {"startPrefetch", start_prefetch},
    {"advancePrefetch", advance_prefetch},
    {"warmDirectories", warm_directories},
    {"stopThreads", stop_threads},
    {"threadsRunning", threads_running},
    {"createRing", create_ring},
    {"ringMemory", ring_memory},
    {"ringRead", ring_read},
    {"ringNext", ring_next},
    {"ringStop", ring_stop},
};

NAPI_MODULE_INIT() {
  for (size_t index = 0; index < sizeof FUNCTIONS / sizeof FUNCTIONS[0]; index++) {
    napi_value function;
    if (napi_create_function(env, FUNCTIONS[index].name, NAPI_AUTO_LENGTH, FUNCTIONS[index].function, NULL, &function) != napi_ok) return NULL;
    if (napi_set_named_property(env, exports, FUNCTIONS[index].name, function) != napi_ok) return NULL;
  }
  return exports;
}
