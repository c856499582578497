#include "testing/job_on_threads.h"

#include <thread>

#include "core/coordinator.h"
#include "core/inproc_transport.h"
#include "programs/worker_backends.h"
#include "ps/server_node.h"
#include "worker/worker_node.h"

namespace syncline {
namespace {

class EvaluationObserver : public CoordinatorObserver {
 public:
  void OnEvaluation(int worker, wire::Evaluation::Reader e) override {
    evaluation = EvaluationReport{.loss = e.getLoss(),
                                  .auc = e.getAuc(),
                                  .accuracy = e.getAccuracy(),
                                  .examples = e.getExamples()};
  }
  std::optional<EvaluationReport> evaluation;
};

}  // namespace

ThreadedJobResult RunJobOnThreads(const JobSpec& spec) {
  ThreadedJobResult result;
  InprocTransport transport;
  EvaluationObserver observer;
  auto coordinator = Coordinator::Create(transport, "inproc://coordinator",
                                         CoordinatorOptionsFor(spec), &observer);
  if (!coordinator.ok()) {
    result.status = coordinator.status();
    return result;
  }
  result.servers.resize(spec.servers);
  result.workers.resize(spec.workers);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { result.status = (*coordinator)->Run(); });
  NodeOptions node;
  node.coordinator = (*coordinator)->address();
  node.bind = "inproc://";  // the in-process transport names endpoints by their ids
  for (int r = 0; r < spec.servers; ++r) {
    threads.emplace_back([&, r, node]() mutable {
      node.rank = r;
      result.servers[r] = ServerNode(transport, node).Run();
    });
  }
  for (int r = 0; r < spec.workers; ++r) {
    threads.emplace_back([&, r, node]() mutable {
      node.rank = r;
      result.workers[r] =
          WorkerNode(transport, node, MakeServerlessBackendFactory(), MakeHybridBackendFactory())
              .Run();
    });
  }
  for (std::thread& t : threads) t.join();
  result.evaluation = observer.evaluation;
  return result;
}

}  // namespace syncline
