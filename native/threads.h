/*
 * What the detached threads of prefetch.c and warm-directories.c share with
 * their JavaScript handle: a stop flag, a count of the threads still
 * running, and a reference count over the threads and the handle, so that
 * whichever ends last frees the job. A job struct starts with this.
 */
#ifndef OATS_THREADS_H
#define OATS_THREADS_H
#include "addon.h"
#include <stdatomic.h>

enum job_kind { JOB_PREFETCH = 1, JOB_WARM_DIRECTORIES = 2 };

struct job {
  enum job_kind kind;
  _Atomic int stop;
  _Atomic int live;
  _Atomic int refs;
  /* Called by the last thread to end (may be NULL): gives back what only the threads use, such as a descriptor. */
  void (*finish)(struct job *job);
  void (*destroy)(struct job *job);
};

/* Set up `job` (refs 1: the handle's), start up to `threads` detached threads of `run(job)` and return the handle; NULL with an exception pending. */
napi_value start_job(napi_env env, struct job *job, enum job_kind kind, void (*finish)(struct job *), void (*destroy)(struct job *), unsigned threads,
                     void *(*run)(void *));
/* A thread's last call. */
void end_thread(struct job *job);
/* The job of a handle made by start_job, of `kind` unless it is 0; else NULL with a TypeError pending. */
struct job *job_of(napi_env env, napi_value value, enum job_kind kind, const char *caller);

#endif
