//===- train.cpp - Training from code against the installed gmopt ---------===//
//
// An out-of-tree user of gmopt_runtime (find_package(gmopt): gmopt::runtime):
// opens ONNX Runtime's training artifacts and checkpoint in ARTIFACTS, runs
// ONNX Runtime's loop (lazy_reset_grad, train step, optimizer step) for
// STEPS steps on the directory's test_data_set_0 at learning rate 0.001, and
// prints one loss a line, which run-consumer-test.sh compares with ONNX
// Runtime's own losses (adamw_losses.json).
// Usage: train ARTIFACTS [STEPS].
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/TestDataSet.h"
#include "tools/runtime/TrainingSession.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>
#include <vector>

using namespace gmopt;

namespace {

int fail(llvm::Error err) {
  llvm::errs() << "train: error: " << llvm::toString(std::move(err)) << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    llvm::errs() << "usage: train ARTIFACTS [STEPS]\n";
    return 1;
  }
  std::string dir = argv[1];
  int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  auto state = CheckpointState::load(dir + "/checkpoint");
  if (!state)
    return fail(state.takeError());
  TrainingSessionOptions options;
  options.backend = SessionBackend::Cpu;
  options.threads = 1;
  auto session = TrainingSession::open(TrainingArtifacts::fromDirectory(dir),
                                       *state, options);
  if (!session)
    return fail(session.takeError());
  auto data = readTestDataSet(dir + "/test_data_set_0");
  if (!data)
    return fail(data.takeError());
  std::vector<HostTensor> batch;
  for (const std::string &name : (*session)->inputNames()) {
    const NamedTensor *tensor = data->findInput(name);
    if (!tensor) {
      llvm::errs() << "train: error: no input " << name << "\n";
      return 1;
    }
    auto host = HostTensor::copyOf(tensor->data.getType().getDType(),
                                   tensor->data.getType().getStaticShape(),
                                   tensor->data.getBytes());
    if (!host)
      return fail(host.takeError());
    batch.push_back(std::move(*host));
  }
  (*session)->setLearningRate(0.001f);
  for (int step = 0; step < steps; ++step) {
    (*session)->lazyResetGrad();
    auto outputs = (*session)->trainStep(batch);
    if (!outputs)
      return fail(outputs.takeError());
    if (llvm::Error err = (*session)->optimizerStep())
      return fail(std::move(err));
    llvm::outs() << llvm::format("%.9g", outputs->front().getElementAsDouble(0))
                 << "\n";
  }
  return 0;
}
