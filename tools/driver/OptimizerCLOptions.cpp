//===- OptimizerCLOptions.cpp - In-graph optimizer flags of the tools -----===//
//
// Implements OptimizerCLOptions: the options live in a Storage struct so a
// tool registers them by constructing the object before parsing.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/OptimizerCLOptions.h"

#include "tools/driver/ToolSupport.h"

#include "llvm/Support/CommandLine.h"

using namespace gmopt;
namespace cl = llvm::cl;

struct OptimizerCLOptions::Storage {
  explicit Storage(OptimizerChoice defaultChoice)
      : choice("optimizer",
               cl::desc("In-graph optimizer to build when the module has none "
                        "(and no --optimizer-model is given)"),
               cl::init(defaultChoice),
               cl::values(clEnumValN(OptimizerChoice::SGD, "sgd",
                                     "SGDOptimizerV2: p -= lr * grad"),
                          clEnumValN(OptimizerChoice::AdamW, "adamw",
                                     "AdamWOptimizer with --adam-* and "
                                     "--weight-decay"),
                          clEnumValN(OptimizerChoice::None, "none",
                                     "No optimizer, no update")),
               cl::cat(getGmoptCategory())),
        optimizerModel(
            "optimizer-model",
            cl::desc("ONNX Runtime's optimizer_model.onnx to merge into the "
                     "training module (its AdamWOptimizer or SGDOptimizerV2 "
                     "and every attribute)"),
            cl::value_desc("file"), cl::cat(getGmoptCategory())),
        beta1("adam-beta1",
              cl::desc("AdamW alpha, the first-moment decay (default 0.9)"),
              cl::init(0.9f), cl::cat(getGmoptCategory())),
        beta2("adam-beta2",
              cl::desc("AdamW beta, the second-moment decay (default 0.999)"),
              cl::init(0.999f), cl::cat(getGmoptCategory())),
        epsilon("adam-epsilon",
                cl::desc("AdamW epsilon, added to the denominator (default "
                         "1e-6)"),
                cl::init(1e-6f), cl::cat(getGmoptCategory())),
        weightDecay("weight-decay", cl::desc("AdamW weight_decay (default 0)"),
                    cl::init(0.0f), cl::cat(getGmoptCategory())),
        adamMode("adam-mode",
                 cl::desc("AdamW adam_mode: 0 PyTorch (decay first, bias "
                          "correction on the moments), 1 Hugging Face "
                          "(correction in the learning rate, decay last; "
                          "default)"),
                 cl::init(1), cl::cat(getGmoptCategory())),
        correctBias("correct-bias",
                    cl::desc("AdamW correct_bias: 1 applies bias correction "
                             "(default), 0 does not"),
                    cl::init(1), cl::cat(getGmoptCategory())) {}

  cl::opt<OptimizerChoice> choice;
  cl::opt<std::string> optimizerModel;
  cl::opt<float> beta1, beta2, epsilon, weightDecay;
  cl::opt<int64_t> adamMode, correctBias;
};

OptimizerCLOptions::OptimizerCLOptions(OptimizerChoice defaultChoice)
    : storage(std::make_unique<Storage>(defaultChoice)) {}

OptimizerCLOptions::~OptimizerCLOptions() = default;

OptimizerChoice OptimizerCLOptions::getChoice() const {
  return storage->choice;
}

bool OptimizerCLOptions::choiceGiven() const {
  return storage->choice.getNumOccurrences() != 0;
}

std::string OptimizerCLOptions::getOptimizerModel() const {
  return storage->optimizerModel;
}

bool OptimizerCLOptions::hyperparametersGiven() const {
  const Storage &s = *storage;
  return s.beta1.getNumOccurrences() || s.beta2.getNumOccurrences() ||
         s.epsilon.getNumOccurrences() || s.weightDecay.getNumOccurrences() ||
         s.adamMode.getNumOccurrences() || s.correctBias.getNumOccurrences();
}

llvm::Expected<std::optional<OptimizerSpec>>
OptimizerCLOptions::getSpec() const {
  const Storage &s = *storage;
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  if (!s.optimizerModel.empty()) {
    if (choiceGiven() || hyperparametersGiven())
      return fail("--optimizer-model takes the optimizer and its "
                  "hyper-parameters from the file; do not combine it with "
                  "--optimizer, --adam-* or --weight-decay");
    auto spec = importOptimizerModelFile(s.optimizerModel);
    if (!spec)
      return spec.takeError();
    return std::optional<OptimizerSpec>(*spec);
  }
  if (s.choice != OptimizerChoice::AdamW && hyperparametersGiven())
    return fail("--adam-*, --weight-decay and --correct-bias apply to "
                "--optimizer=adamw");
  if (s.choice == OptimizerChoice::None)
    return std::optional<OptimizerSpec>();
  OptimizerSpec spec;
  if (s.choice == OptimizerChoice::SGD) {
    spec.kind = OptimizerKind::SGD;
    return std::optional<OptimizerSpec>(spec);
  }
  spec.alpha = s.beta1;
  spec.beta = s.beta2;
  spec.epsilon = s.epsilon;
  spec.weightDecay = s.weightDecay;
  spec.adamMode = s.adamMode;
  spec.correctBias = s.correctBias;
  if (llvm::Error err = spec.validate())
    return err;
  return std::optional<OptimizerSpec>(spec);
}
