#include "launch/launch_flags.h"

#include <string>

#include "job/job_spec.h"
#include "job/node_join.h"

namespace syncline {
namespace {

void AddRunFlags(CLI::App& app, LaunchFlags& f) {
  const std::string checkpoints = FlagGroupName(FlagGroup::kCheckpoints);
  app.add_flag("--external-workers", f.external_workers,
               "Start the coordinator and the servers only, print the coordinator's address "
               "(also in OUT/coordinator.address while the job runs), and wait for --workers "
               "programs of your own to join it (include/syncline/worker_session.h; "
               "examples/embed_client). No data is generated for them: syncline-worker processes "
               "need --train")
      ->group(FlagGroupName(FlagGroup::kCluster));
  app.add_flag("--resume", f.resume,
               "Restart the job from the newest complete checkpoint in --checkpoint-dir "
               "(damaged or partial ones are reported and skipped)")
      ->group(checkpoints);
  app.add_flag("--resume-if-any", f.resume_if_any,
               "Like --resume when --checkpoint-dir holds a complete checkpoint, else start "
               "afresh: one command for every attempt of a job that a scheduler may requeue")
      ->group(checkpoints);
}

void AddMetricsFlags(CLI::App& app, LaunchFlags& f) {
  const std::string output = FlagGroupName(FlagGroup::kOutput);
  app.add_option("--metrics-port", f.metrics_port,
                 "Prometheus metrics: the coordinator serves http://HOST:PORT/metrics (0: any "
                 "free port, in --port-range), every node its own page at a free port, and "
                 "OUT/prometheus/ holds targets.json (file_sd, kept up to date as nodes come "
                 "and go) and a ready prometheus.yml; off: no metrics (the default)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return ParseMetricsPort(text) ? "" : "must be a port in [0, 65535] or off";
          },
          "PORT|off"))
      ->capture_default_str()
      ->group(output);
  app.add_option("--metrics-scrape-interval", f.metrics_scrape_interval,
                 "Seconds between Prometheus's scrapes in the prometheus.yml it writes; a node "
                 "that leaves stays listed for two of them, so that its up falls to 0 first")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str()
      ->group(output);
}

void AddClusterFlags(CLI::App& app, LaunchFlags& f) {
  ClusterOptions& cluster = f.cluster;
  // Every option added below is in the Cluster section (where the nodes run: see "Run on a
  // cluster" in the README); the default section comes back at the end.
  const std::string before = app.option_defaults()->get_group();
  app.option_defaults()->group(FlagGroupName(FlagGroup::kCluster));
  app.add_option("--launcher", f.launcher,
                 "What starts the nodes: local (children of this process), ssh (one --rsh per "
                 "node on --hosts), mpirun (Open MPI across --hosts), slurm (srun inside an "
                 "allocation)")
      ->capture_default_str();
  app.add_option("--hosts", f.hosts,
                 "ssh/mpirun: hosts to spread the nodes over, HOST[:SLOTS],... e.g. h1,h2:4");
  app.add_option("--hostfile", f.hostfile,
                 "ssh/mpirun: an Open MPI hostfile (lines 'HOST slots=N') instead of --hosts");
  app.add_option("--servers-per-host", cluster.servers_per_host,
                 "ssh: put the servers K to a host on the first hosts (default: round-robin "
                 "with the workers, one per host and turn)")
      ->check(CLI::Range(0, kMostNodes));
  app.add_option("--rsh", cluster.rsh,
                 "ssh/mpirun: the command that runs COMMAND on HOST, called as RSH HOST "
                 "COMMAND (mpirun: its plm_rsh_agent)")
      ->capture_default_str();
  app.add_option("--interface", cluster.interface,
                 "network interface the coordinator and the nodes listen on (default: the one "
                 "whose route reaches the first host; loopback for a local job)");
  app.add_option("--coordinator-interface", cluster.coordinator_interface,
                 "the coordinator's interface, when it is not the nodes' --interface (a "
                 "launcher on a login node)");
  app.add_option("--port-range", f.port_range,
                 "listen only on ports FIRST-LAST (coordinator and nodes), for firewalls");
  app.add_option("--launcher-args", cluster.launcher_args,
                 "mpirun/slurm: extra arguments for mpirun or srun, e.g. '--mca "
                 "btl_tcp_if_include eth0' or '--overcommit'");
  app.add_flag("--sbatch", f.sbatch,
               "slurm: write OUT/job.sbatch, a batch script that runs this job with "
               "--launcher slurm (and --resume-if-any when it checkpoints, so that a requeued "
               "job resumes), and submit it with sbatch");
  app.add_option("--sbatch-args", f.sbatch_args, "extra arguments for sbatch, e.g. '--wait'");
  app.add_flag("--insecure", f.insecure,
               "Off loopback, send plaintext without authentication (trusted networks only). "
               "Default: every connection encrypted and authenticated, each node with a key of "
               "its own (OUT/keys) derived from the job key (OUT/job.key)");
  app.add_option("--key-file", cluster.key_file,
                 "the job key to use instead of a new OUT/job.key (an earlier run's job.key; a "
                 "node's key file is refused): read by the launcher, and by every host only "
                 "with --node-keys off or --max-workers");
  app.add_option_function<std::string>(
         "--node-keys", [&cluster](const std::string& v) { cluster.node_keys = v == "on"; },
         "on (default): every node gets a key of its own, OUT/keys/<id>.key, derived from the "
         "job key, which the launcher keeps: holding only its own, a node cannot act as, or "
         "read the traffic of, another (files of one user: docs/SECURITY.md); a node "
         "restarted in place gets a new control key. off: every node gets the job key (also the "
         "case "
         "when workers may join, --max-workers)")
      ->check(CLI::IsMember({"on", "off"}));
  app.option_defaults()->group(before);
}

}  // namespace

void AddLaunchFlags(CLI::App& app, LaunchFlags* flags) {
  AddRunFlags(app, *flags);
  AddMetricsFlags(app, *flags);
  AddClusterFlags(app, *flags);
}

}  // namespace syncline
