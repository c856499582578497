// The one wire form of a JobSpec: the schema's wire::JobSpec struct (core/syncline.capnp),
// and a flat byte string of a message holding it (what the coordinator is given to hand out).
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_JOB_WIRE_H_
#define SYNCLINE_JOB_JOB_WIRE_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/syncline.capnp.h"
#include "syncline/job_spec.h"

namespace syncline {

void JobSpecToWire(const JobSpec& spec, wire::JobSpec::Builder out);
// Decodes and validates (ValidateJobSpec): a spec from the network is untrusted.
absl::StatusOr<JobSpec> JobSpecFromWire(wire::JobSpec::Reader in);

// A flat Cap'n Proto message whose root is the spec, and back.
std::string JobSpecToBytes(const JobSpec& spec);
absl::StatusOr<JobSpec> JobSpecFromBytes(const std::string& bytes);

}  // namespace syncline

#endif  // SYNCLINE_JOB_JOB_WIRE_H_
