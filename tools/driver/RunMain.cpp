//===- RunMain.cpp - The gmopt-run driver ---------------------------------===//
//
// gmopt-run trains a compiled model: a `.gm` file from gmopt-compile, or an
// ONNX training graph directly (imported, dimensions bound from --dim or
// from the --inputs shapes, canonicalized). It picks the backend, gives
// every graph input a value, runs --steps optimizer steps of --accumulate
// micro-steps each, and optionally checks the first step against reference
// outputs (--check), a loss curve and the final parameters against a
// reference run (--loss-reference, alias --sgd-reference), and the memory and
// gradients against the original graph run eagerly (--baseline), and writes
// the step's gradients as NumPy files (--dump-gradients); --timeline,
// --trace and the progress line (off with --quiet) show the run. This file only
// maps the command line onto a RunConfig; the work is runSession (RunSession.h)
// over Runtime.h.
//
// Exit status: 0 success; 1 usage or input error (one line
// `gmopt-run: error: FILE: what`); 2 numerical failure (a NaN/inf loss, or a
// --check / --loss-reference comparison beyond tolerance).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/DataParallelRun.h"
#include "tools/driver/Driver.h"
#include "tools/driver/RunSession.h"
#include "tools/driver/ToolSupport.h"

#include "backend/cpu/Mpi.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;
namespace cl = llvm::cl;

namespace {

constexpr llvm::StringLiteral kTool = "gmopt-run";

/// Prints \p err once and returns its exit status. In a data-parallel run
/// the line names this rank, and the other ranks are told to stop (under
/// MPI this does not return: MPI_Abort ends every rank).
int report(llvm::Error err) {
  // What was printed so far comes first, also when both streams are piped.
  llvm::outs().flush();
  int code = exitCodeFor(err);
  if (!isDataParallelRun()) {
    reportToolError(kTool, std::move(err));
    return code;
  }
  std::string message = llvm::formatv("rank {0}: {1}", cpu::getMpiRank(),
                                      llvm::toString(std::move(err)));
  reportToolError(
      kTool, llvm::createStringError(llvm::inconvertibleErrorCode(), message));
  llvm::errs().flush();
  stopDataParallelWorld(message, code);
  return code;
}

} // namespace

static int runGmoptRun(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory &category = getGmoptCategory();
  cl::opt<std::string> inputFilename(
      cl::Positional, cl::desc("<model.gm | training_model.onnx>"),
      cl::cat(category));
  cl::opt<BackendKind> backendOption(
      "backend", cl::desc("Backend to run on"), cl::init(BackendKind::Auto),
      cl::values(clEnumValN(BackendKind::Auto, "auto",
                            "CUDA where a device works, else the CPU"),
                 clEnumValN(BackendKind::Cpu, "cpu", "The CPU backend"),
                 clEnumValN(BackendKind::Cuda, "cuda", "The CUDA backend")),
      cl::cat(category));
  cl::opt<AllocationMode> modeOption(
      "mode", cl::desc("How values are placed"),
      cl::init(AllocationMode::Planned),
      cl::values(clEnumValN(AllocationMode::Planned, "planned",
                            "One arena laid out by the plan"),
                 clEnumValN(AllocationMode::Eager, "eager",
                            "Allocate at definition, free after last use")),
      cl::cat(category));
  cl::opt<unsigned> stepsOption("steps", cl::desc("Optimizer steps to run"),
                                cl::init(1), cl::cat(category));
  cl::opt<unsigned> accumulateOption(
      "accumulate",
      cl::desc("Micro-steps per optimizer step (gradient accumulation; "
               "default: what gmopt-compile --memory-limit recorded in "
               "the .gm, else 1)"),
      cl::init(1), cl::cat(category));
  OptimizerCLOptions optimizerOptions(OptimizerChoice::SGD);
  cl::opt<float> lrOption(
      "lr",
      cl::desc("Learning rate fed to the optimizer's learning_rate input "
               "every step (default 0.01)"),
      cl::init(0.01f), cl::cat(category));
  cl::opt<std::string> inputsOption(
      "inputs",
      cl::desc("Graph input values: a test_data_set directory of input_K.pb "
               "files, matched by tensor name, or a directory of "
               "test_data_set_N directories fed round-robin, one per "
               "micro-step. With N data-parallel ranks, rank r takes sets "
               "r, r + N, ... (a multiple of N sets), or its 1/N slice of "
               "one set, which then holds the global batch"),
      cl::value_desc("dir"), cl::cat(category));
  cl::opt<std::string> weightsOption(
      "weights",
      cl::desc("Parameter values: an ONNX model's initializers, an ONNX "
               "Runtime checkpoint (with its optimizer state: AdamW moments "
               "and step count), or a .pbseq TensorProto sequence"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<std::string> externalDataDirOption(
      "external-data-dir",
      cl::desc("Directory the model's external-data weight files are read "
               "from (default: the one the .gm file recorded at compile "
               "time, or the ONNX model's own). Files are mapped, not "
               "copied; locations that leave the directory are refused"),
      cl::value_desc("dir"), cl::cat(category));
  cl::opt<bool> allowMissingWeightsOption(
      "allow-missing-weights",
      cl::desc("Initialize parameters --weights does not hold"),
      cl::cat(category));
  cl::opt<bool> ignoreOptimizerStateOption(
      "ignore-optimizer-state",
      cl::desc("Load only the parameters of an ONNX Runtime --weights "
               "checkpoint, not its optimizer state: the optimizer starts "
               "afresh (zero moments, step 0)"),
      cl::cat(category));
  cl::opt<uint64_t> seedOption(
      "seed", cl::desc("Seed of synthetic inputs, initial weights, dropout"),
      cl::init(0), cl::cat(category));
  cl::opt<unsigned> threadsOption("threads",
                                  cl::desc("Worker threads (0 = all cores)"),
                                  cl::init(0), cl::cat(category));
  cl::list<std::string> dims(
      "dim", cl::desc("Bind symbolic dimension NAME to N"),
      cl::value_desc("NAME=N"), cl::CommaSeparated, cl::cat(category));
  // cl::desc keeps a StringRef: the text must outlive the option.
  static const std::string passesHelp =
      "Pipeline to run on ONNX input (default or empty: " +
      kOnnxRunPipeline.str() + "; a .gm file is already compiled)";
  cl::opt<std::string> passesOption("passes", cl::desc(passesHelp),
                                    cl::value_desc("pipeline"),
                                    cl::cat(category));
  cl::opt<std::string> checkOption(
      "check",
      cl::desc("Compare the first step's loss and gradients with the "
               "output_K.pb references in this directory"),
      cl::value_desc("dir"), cl::cat(category));
  cl::opt<std::string> lossReferenceOption(
      "loss-reference",
      cl::desc("Train with the optimizer, hyper-parameters and learning rate "
               "this reference names (adamw_losses.json, sgd_losses.json), "
               "for as many steps as it lists losses, and compare every "
               "step's loss and the final parameters"),
      cl::value_desc("file"), cl::cat(category));
  cl::alias sgdReferenceAlias(
      "sgd-reference", cl::desc("Alias for --loss-reference"),
      cl::aliasopt(lossReferenceOption), cl::cat(category));
  cl::opt<std::string> saveWeightsOption(
      "save-weights",
      cl::desc(
          "Write the parameters, optimizer state and step count after "
          "the run for --weights to restore: a FILE named *.pbseq as a "
          "TensorProto sequence, any other as an ONNX Runtime checkpoint "
          "(which ONNX Runtime's training API resumes). Data parallel: the "
          "state is whole (ZeRO shards gathered: any world size or "
          "stage restores it); rank 0 writes a path the ranks share, "
          "each rank a per-rank one ({rank} in the path is the rank)"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<std::string> dumpGradientsOption(
      "dump-gradients",
      cl::desc("Write every trainable parameter's gradient after the run's "
               "one step (--steps 1: the gradient the optimizer reads, "
               "before its update; with --optimizer=none, which updates "
               "nothing, any --steps: the last step's) to DIR, made if "
               "missing: one NumPy .npy "
               "file per parameter (numpy.load reads it; bfloat16 widened "
               "to float32) and manifest.json (format gmopt-gradients: the "
               "loss, and per parameter its name, file, dtype and shape). "
               "Data parallel: as --save-weights ({rank} in the path is the "
               "rank); not with ZeRO, whose ranks keep only a shard of the "
               "reduced gradients"),
      cl::value_desc("dir"), cl::cat(category));
  cl::opt<double> rtolOption(
      "rtol",
      cl::desc("Relative tolerance of --check/--loss-reference: ok when "
               "max|got-ref| <= max(rtol*max|ref|, atol)"),
      cl::init(1e-4), cl::cat(category));
  cl::opt<double> atolOption("atol",
                             cl::desc("Absolute floor of the tolerance"),
                             cl::init(1e-6), cl::cat(category));
  cl::opt<bool> baselineOption(
      "baseline",
      cl::desc("Also run the original graph eagerly and compare memory, time "
               "and gradients"),
      cl::cat(category));
  cl::opt<bool> profileOption(
      "profile", cl::desc("Time every kernel and print the time per op"),
      cl::cat(category));
  cl::opt<bool> allowTf32Option(
      "allow-tf32",
      cl::desc("CUDA: let fp32 matrix products use TF32 tensor cores (10-bit "
               "mantissa inputs; off: full fp32)"),
      cl::cat(category));
  cl::opt<bool> cudaGraphOption(
      "cuda-graph",
      cl::desc("CUDA, planned mode: run the first step as usual, capture the "
               "second into a CUDA graph and replay it for every later step "
               "(one launch a step; dropout and the optimizer read the step "
               "on the device). Refused, naming the reason and the node, "
               "with another backend, --mode=eager, --profile, --trace or a "
               "node that cannot be captured; --baseline's eager run is not "
               "captured"),
      cl::cat(category));
  cl::opt<std::string> reportJsonOption(
      "report-json", cl::desc("Write the measurements as JSON here"),
      cl::value_desc("file"), cl::cat(category));

  cl::opt<std::string> timelineOption(
      "timeline",
      cl::desc("Write the memory timeline (live bytes over the schedule by "
               "category, the original graph run eagerly beside the plan) as "
               "one self-contained HTML page"),
      cl::value_desc("file.html"), cl::cat(category));
  cl::opt<std::string> traceOption(
      "trace",
      cl::desc("Write every node of every micro-step, timed, and the live "
               "bytes per category as Chrome trace events (Perfetto, "
               "chrome://tracing); times every kernel"),
      cl::value_desc("file.json"), cl::cat(category));
  cl::opt<double> collectiveTimeoutOption(
      "collective-timeout",
      cl::desc("Data-parallel runs: seconds the start-up and each collective "
               "wait for the other ranks before exiting with an error naming "
               "the ranks that did not arrive (default 300, at most 604800: "
               "7 days)"),
      cl::init(cpu::kDefaultCollectiveTimeoutSeconds),
      cl::value_desc("seconds"), cl::cat(category));
  cl::opt<std::string> makeWorldSecretOption(
      "make-world-secret",
      cl::desc("Write a fresh world secret for a torchrun-style launch to a "
               "new FILE only you can read (mode 0600; - prints it) and "
               "exit. Every rank of such a launch needs the same secret, in "
               "GMOPT_WORLD_SECRET_FILE=FILE or GMOPT_WORLD_SECRET=SECRET: "
               "rank 0 admits only peers that prove they hold it"),
      cl::value_desc("FILE"), cl::cat(category));
  cl::opt<bool> verboseOption(
      "verbose",
      cl::desc("Data-parallel runs: every rank prints its log (default: rank "
               "0 only; the others print only errors)"),
      cl::cat(category));
  cl::opt<bool> quietOption(
      "quiet",
      cl::desc("No progress line (shown on a terminal for runs longer than "
               "a second)"),
      cl::cat(category));

  if (!parseToolCommandLine(argc, argv, kTool,
                            "gmopt-run: train a compiled model and measure "
                            "its memory\n\n"
                            "  --check/--loss-reference pass when, per tensor, "
                            "max|got - ref| <= max(rtol * max|ref|, atol).\n"
                            "  Exit status: 0 success; 1 usage or input error; "
                            "2 numerical failure (NaN/inf loss, a check beyond "
                            "tolerance).\n"))
    return kInputErrorExitCode;
  if (makeWorldSecretOption.getNumOccurrences()) {
    if (llvm::Error err = writeWorldSecret(makeWorldSecretOption, llvm::outs()))
      return report(std::move(err));
    return 0;
  }

  auto dimBindings = parseDimBindings(dims);
  if (!dimBindings)
    return report(dimBindings.takeError());

  // Under mpirun, or launched torchrun-style (RANK, WORLD_SIZE,
  // MASTER_ADDR, MASTER_PORT), every process is one data-parallel rank: the
  // world forms before the model loads, so the collectives' kernel finds it.
  if (llvm::Error err = startDataParallelWorld(collectiveTimeoutOption))
    return report(std::move(err));

  RunConfig config;
  config.modelPath = inputFilename;
  config.externalDataDir = externalDataDirOption;
  config.backend = backendOption;
  config.executor.mode = modeOption;
  config.executor.seed = seedOption;
  config.executor.threads = threadsOption;
  config.executor.profile = profileOption;
  config.executor.cudaGraph = cudaGraphOption;
  config.allowTf32 = allowTf32Option;
  config.steps = stepsOption;
  config.stepsGiven = stepsOption.getNumOccurrences() != 0;
  config.accumulate = accumulateOption;
  config.accumulateGiven = accumulateOption.getNumOccurrences() != 0;
  auto optimizerSpec = optimizerOptions.getSpec();
  if (!optimizerSpec)
    return report(optimizerSpec.takeError());
  config.optimizer = optimizerOptions.getChoice();
  config.optimizerGiven = optimizerOptions.choiceGiven();
  config.optimizerSpec = *optimizerSpec;
  config.optimizerSpecExplicit =
      !optimizerOptions.getOptimizerModel().empty() ||
      optimizerOptions.hyperparametersGiven();
  config.learningRate = lrOption;
  config.learningRateGiven = lrOption.getNumOccurrences() != 0;
  config.dims = std::move(*dimBindings);
  config.passes = passesOption;
  config.inputsDir = inputsOption;
  config.weightsPath = weightsOption;
  config.allowMissingWeights = allowMissingWeightsOption;
  config.ignoreOptimizerState = ignoreOptimizerStateOption;
  config.seed = seedOption;
  config.checkDir = checkOption;
  config.lossReferencePath = lossReferenceOption;
  config.saveWeightsPath = saveWeightsOption;
  config.dumpGradientsDir = dumpGradientsOption;
  config.tolerance.rtol = rtolOption;
  config.tolerance.atol = atolOption;
  config.baseline = baselineOption;
  config.reportJsonPath = reportJsonOption;
  config.timelinePath = timelineOption;
  config.tracePath = traceOption;
  config.progress = !quietOption && llvm::errs().is_displayed();
  config.verbose = verboseOption;
  if (llvm::Error err = runSession(config, llvm::outs(), llvm::errs()))
    return report(std::move(err));
  return 0;
}

int gmopt::gmoptRunMain(int argc, char **argv) {
  return finishToolOutput(kTool, runGmoptRun(argc, argv));
}
