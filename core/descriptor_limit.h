// The process's file descriptors: its limit (RLIMIT_NOFILE) and how many are open. A node
// raises its soft limit to the hard one at start, so that a common soft limit of 1024 is not
// what bounds its peers, stores and checkpoints; ConnectionGuard (core/connection_guard.h)
// keeps a reserve below the limit that connections cannot take, and a server counts what an
// embedding store needs before it opens one.
//
// Thread-safety: stateless functions over process-wide kernel state; safe from any thread.
#ifndef SYNCLINE_CORE_DESCRIPTOR_LIMIT_H_
#define SYNCLINE_CORE_DESCRIPTOR_LIMIT_H_

namespace syncline {

// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the soft limit now in force.
int RaiseDescriptorLimit();

// RLIMIT_NOFILE's soft limit (capped at 2^30).
int DescriptorLimit();

// Descriptors this process has open (the entries of /proc/self/fd); -1 when unknown.
int OpenDescriptorCount();

}  // namespace syncline

#endif  // SYNCLINE_CORE_DESCRIPTOR_LIMIT_H_
