// syncline-launch's flags besides the job's own (launch/job_config.h): where the nodes run (the
// cluster flags) and how this run relates to others (--resume, --external-workers). The
// launcher registers them, and so does its experiment, which passes them on to every run.
//
// LaunchFlags is a plain struct; the functions are thread-compatible.
#ifndef SYNCLINE_LAUNCH_LAUNCH_FLAGS_H_
#define SYNCLINE_LAUNCH_LAUNCH_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "launch/cluster.h"
#include "launch/job_config.h"

namespace syncline {

struct LaunchFlags {
  JobConfig config;
  ClusterOptions cluster;
  // The cluster flags as text, parsed by the launcher into `cluster`.
  std::string launcher = "local", hosts, hostfile, port_range, sbatch_args;
  bool sbatch = false, insecure = false;
  bool resume = false, resume_if_any = false, external_workers = false;
  // --metrics-port: the coordinator's /metrics port ("off": no metrics anywhere; 0: any free
  // port); every node then serves its own page at a free port, listed for Prometheus.
  std::string metrics_port = "off";
  double metrics_scrape_interval = 5;  // --metrics-scrape-interval, seconds
};

// Registers the launcher's own flags on `app`, bound to `*flags`, each in its FlagGroup
// section. `flags` must outlive `app`'s parsing.
void AddLaunchFlags(CLI::App& app, LaunchFlags* flags);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_LAUNCH_FLAGS_H_
