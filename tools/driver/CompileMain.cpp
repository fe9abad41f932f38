//===- CompileMain.cpp - The gmopt-compile driver -------------------------===//
//
// gmopt-compile is the user's tool: it takes an ONNX training graph (ONNX
// Runtime's training_model.onnx, or a graph exposing `X_grad` outputs),
// insists every symbolic dimension is bound and that the graph really has
// gradients, runs the default pipeline (passes/DefaultPipeline.h) or the
// one given with --passes, prints the pipeline it ran so the run can be
// replayed, and writes the rewritten model (with the optimizer merged in
// first when --optimizer-model or --optimizer=adamw|sgd asks for one): a `.gm`
// container (ir/serialization/GmFile.h) holding the rewritten and the original
// model, or plain ONNX when -o names an `.onnx` file. --report and
// --report-json give the static memory figures of the plan; when no planning
// pass ran they come from the trivial (no-reuse) plan, and the report says so.
// External-data weights are not read (the .gm refers to them): a note on
// stderr, and the report's `external_data`, list the tensors left unread and
// whether their files are there. --timeline draws the plan's live bytes beside
// the original graph's (PlanTimeline.h). --time-compile times every phase
// (import, each pass, planning, verification, baseline, writing).
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"
#include "tools/compiler/FitMemory.h"
#include "tools/compiler/PhaseTimer.h"
#include "tools/driver/Driver.h"
#include "tools/driver/ExternalDataReport.h"
#include "tools/driver/OptimizerCLOptions.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/PlanTimeline.h"
#include "tools/driver/ToolSupport.h"
#include "tools/runtime/Checkpoint.h"

#include "ir/Module.h"
#include "ir/Plan.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/planning/PlanBuffers.h"
#include "passes/planning/PlanReport.h"
#include "passes/planning/StepCost.h"
#include "passes/transforms/Canonicalize.h"
#include "passes/transforms/TieWeights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;
namespace cl = llvm::cl;

namespace {

constexpr llvm::StringLiteral kTool = "gmopt-compile";

/// Prints the trainable set --train chose (after the pipeline: tie-weights
/// may have merged some): count and bytes of the trainable parameters, the
/// frozen ones and the data inputs, by name (the first few), so a user sees
/// at once when a mask or a table was taken for a weight, or a weight left
/// out.
void printTrainableSet(const Module &module, llvm::raw_ostream &os) {
  constexpr size_t kMaxNames = 8;
  auto printNames = [&os](llvm::ArrayRef<const Value *> values) {
    for (size_t i = 0; i != values.size() && i != kMaxNames; ++i)
      os << (i ? ", " : " (") << values[i]->getName();
    if (values.size() > kMaxNames)
      os << ", ... " << values.size() - kMaxNames << " more";
    if (!values.empty())
      os << ')';
  };
  uint64_t trainableBytes = 0;
  std::vector<const Value *> trainable, frozen;
  for (const ParamInfo &info : module.getSignature().getParams()) {
    if (info.trainable) {
      trainable.push_back(info.param);
      if (info.param->getType().hasStaticShape())
        trainableBytes += info.param->getType().getSizeInBytes();
    } else {
      frozen.push_back(info.param);
    }
  }
  std::vector<const Value *> data(module.getSignature().getDataInputs().begin(),
                                  module.getSignature().getDataInputs().end());
  os << kTool << ": trainable: " << trainable.size() << " parameters, "
     << llvm::formatv("{0:F2} MiB ({1} B)", trainableBytes / 1048576.0,
                      trainableBytes)
     << "; frozen: " << frozen.size();
  printNames(frozen);
  os << "; data: " << data.size();
  printNames(data);
  os << '\n';
}

llvm::Error fileError(llvm::StringRef file, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 file + ": " + message);
}

/// The trivial (no-reuse) plan of \p module, made for the memory report
/// when no planning pass ran. Errors name \p inputName.
llvm::Expected<ExecutionPlan> makeReportPlan(const Module &module,
                                             llvm::StringRef inputName,
                                             const WorkspaceModel &workspace) {
  llvm::Expected<ExecutionPlan> trivial = makeTrivialPlan(module, workspace);
  if (!trivial)
    return fileError(inputName, "cannot make the memory report: " +
                                    llvm::toString(trivial.takeError()));
  return trivial;
}

} // namespace

static int runGmoptCompile(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory &category = getGmoptCategory();
  cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<input.onnx>"),
                                     cl::cat(category));
  cl::opt<std::string> outputFilename(
      "o",
      cl::desc("Output file (required): a .gm container, or the rewritten "
               "graph alone as ONNX when the name ends in .onnx"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<std::string> emitOnnx(
      "emit-onnx", cl::desc("Also write the rewritten graph as ONNX here"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<bool> report("report",
                       cl::desc("Print the static memory figures of the plan"),
                       cl::cat(category));
  cl::opt<std::string> reportJson(
      "report-json",
      cl::desc("Write the static memory figures as JSON here (- for stdout)"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<bool> timeCompile(
      "time-compile",
      cl::desc("Print the wall time of each compile phase (import, each "
               "pass, plan, verifier, eager baseline, writing) to stderr; "
               "with --report-json also write them there as compile_timing"),
      cl::cat(category));
  cl::opt<std::string> timeline(
      "timeline",
      cl::desc("Write the memory timeline of the plan (live bytes over the "
               "schedule by category, beside the original graph run "
               "eagerly) as one self-contained HTML page"),
      cl::value_desc("file.html"), cl::cat(category));
  cl::list<std::string> dims(
      "dim", cl::desc("Bind symbolic dimension NAME to N"),
      cl::value_desc("NAME=N"), cl::CommaSeparated, cl::cat(category));
  cl::opt<std::string> weightsFile(
      "weights",
      cl::desc("Initial parameter values for passes that compare them "
               "(tie-weights): an ONNX model's initializers, an ONNX "
               "Runtime checkpoint or a .pbseq; read only, never written "
               "into the output"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<bool> train(
      "train",
      cl::desc("The input is a forward model: build its backward pass, "
               "gradient accumulators and training signature first (the "
               "autodiff pass, with --loss, --frozen, --trainable and "
               "--data), then tie an exporter's copies of one parameter "
               "(tie-weights, auto)"),
      cl::cat(category));
  cl::opt<unsigned> ranksOption(
      "ranks",
      cl::desc("Data-parallel world size: run the data-parallel pass first "
               "(bucketed gradient all-reduce, mean over the ranks); the "
               "output runs under `mpirun -np N gmopt-run`"),
      cl::init(1), cl::value_desc("N"), cl::cat(category));
  cl::opt<unsigned> zeroOption(
      "zero",
      cl::desc("With --ranks: the ZeRO stage, 0 (every rank keeps all "
               "state; gradients all-reduced), 1 (each rank keeps 1/N of "
               "the optimizer state) or 2 (and 1/N of the accumulated "
               "gradients); 1 and 2 need the optimizer in the graph"),
      cl::init(0), cl::value_desc("0|1|2"), cl::cat(category));
  cl::opt<std::string> bucketBytesOption(
      "bucket-bytes",
      cl::desc("With --ranks: the smallest gradient bucket (default 25MiB)"),
      cl::init("25MiB"), cl::value_desc("bytes"), cl::cat(category));
  cl::opt<bool> overlapOption(
      "overlap",
      cl::desc("With --ranks (ZeRO stage 0): split each bucket's all-reduce "
               "into a start and a wait so it runs while the rest of the "
               "backward pass computes (data-parallel{overlap=true})"),
      cl::init(false), cl::cat(category));
  cl::opt<std::string> lossSpec(
      "loss",
      cl::desc("With --train: KIND[:OUTPUT[,TARGET]], KIND one of output "
               "(the model's scalar output), cross-entropy, mse, "
               "bce-with-logits, l1 (default output)"),
      cl::init("output"), cl::value_desc("spec"), cl::cat(category));
  cl::opt<std::string> frozenParams(
      "frozen",
      cl::desc("With --train: comma-separated parameters that get no "
               "gradient"),
      cl::value_desc("names"), cl::cat(category));
  cl::opt<std::string> trainableParams(
      "trainable",
      cl::desc("With --train: comma-separated parameters to train, the "
               "explicit list (every other float input or initializer gets "
               "no gradient). Default: every float initializer of more than "
               "one element that is not a Constant node's value or a mask, "
               "and every float input that is not data"),
      cl::value_desc("names"), cl::cat(category));
  cl::opt<std::string> dataInputs(
      "data",
      cl::desc("With --train: comma-separated data inputs (default: "
               "non-float inputs and those named input*, labels, target*)"),
      cl::value_desc("names"), cl::cat(category));
  cl::opt<bool> trainMode(
      "train-mode",
      cl::desc("With --train: run Dropout and BatchNormalization in training "
               "mode, as ONNX Runtime's training graph does (default true; "
               "false keeps the forward model's modes)"),
      cl::init(true), cl::cat(category));
  cl::opt<std::string> memoryLimit(
      "memory-limit",
      cl::desc("Fit the step into this planned peak: bytes (24GiB, 512MiB, "
               "2GB), a percentage of the unrewritten step's planned peak "
               "(50%), or 'device' (the CUDA device's memory). Weighs the "
               "recompute budget, gradient accumulation and, with "
               "--allow-amp, mixed precision (a recompute pass in the "
               "pipeline gives way to the search's); prints the candidates "
               "and compiles the cheapest that fits"),
      cl::value_desc("size"), cl::cat(category));
  cl::opt<std::string> allowAmp(
      "allow-amp",
      cl::desc("With --memory-limit: let the search use amp with this 16-bit "
               "type (fp16 or bf16); numerics change"),
      cl::value_desc("fp16|bf16"), cl::cat(category));
  cl::opt<bool> allowAccumulate(
      "allow-accumulate",
      cl::desc("With --memory-limit: let the search split the batch into "
               "micro-batches (gradient accumulation, recorded in the .gm "
               "for gmopt-run); default true"),
      cl::init(true), cl::cat(category));
  cl::opt<std::string> batchDim(
      "batch-dim",
      cl::desc("The batch dimension accumulation splits (default batch); "
               "dimensions whose names contain it (batch_x_seq) scale with "
               "it"),
      cl::init("batch"), cl::value_desc("name"), cl::cat(category));
  cl::opt<std::string> maxBatch(
      "max-batch",
      cl::desc("With --memory-limit: find the largest value of this "
               "dimension whose step fits (recompute and allowed amp; no "
               "accumulation) and compile that"),
      cl::value_desc("dim"), cl::cat(category));
  cl::opt<std::string> costModel(
      "cost-model",
      cl::desc("Throughputs the --memory-limit search predicts step time "
               "with: cpu or cuda (default: cuda where a CUDA device is "
               "present, else cpu)"),
      cl::value_desc("backend"), cl::cat(category));
  cl::opt<std::string> fitObjective(
      "fit-objective",
      cl::desc("With --memory-limit: what the choice minimises among the "
               "candidates that fit: time (predicted step time, the "
               "default) or flops (extra FLOPs: never fewer as the limit "
               "falls, even where a slower accumulation is chosen over a "
               "faster recompute)"),
      cl::init("time"), cl::value_desc("time|flops"), cl::cat(category));
  PassManagerCLOptions passOptions(
      "Pass pipeline to run (default: " + kDefaultPipeline.str() + ")");
  OptimizerCLOptions optimizerOptions(OptimizerChoice::None);

  if (!parseToolCommandLine(
          argc, argv, kTool,
          "gmopt-compile: rewrite an ONNX training graph to use less memory\n"))
    return 1;
  if (passOptions.shouldListPasses()) {
    printRegisteredPasses(llvm::outs());
    return 0;
  }

  if (inputFilename.empty())
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "no input file (expected an ONNX "
                                       "training graph)"));
  if (outputFilename.empty())
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "no output file: -o FILE.gm (or "
                                       "FILE.onnx) is required"));
  if (outputFilename == "-")
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "-o must name a file, not stdout"));
  bool writeGm =
      !llvm::StringRef(outputFilename).ends_with_insensitive(".onnx");
  auto dimBindings = parseDimBindings(dims);
  if (!dimBindings)
    return reportToolError(kTool, dimBindings.takeError());
  if (!train &&
      (lossSpec.getNumOccurrences() || frozenParams.getNumOccurrences() ||
       trainableParams.getNumOccurrences() || dataInputs.getNumOccurrences() ||
       trainMode.getNumOccurrences()))
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "--loss, --frozen, --trainable, --data "
                                       "and --train-mode need --train"));
  AutodiffPass::Options autodiffOptions;
  autodiffOptions.loss = lossSpec;
  autodiffOptions.frozen = frozenParams;
  autodiffOptions.trainable = trainableParams;
  autodiffOptions.data = dataInputs;
  autodiffOptions.trainMode = trainMode;
  if (train)
    if (auto spec = parseLossSpec(lossSpec); !spec)
      return reportToolError(
          kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "--loss=" + lossSpec + ": " +
                                             llvm::toString(spec.takeError())));
  auto optimizer = optimizerOptions.getSpec();
  if (!optimizer)
    return reportToolError(kTool, optimizer.takeError());
  std::string pipelineText = passOptions.hasPipeline()
                                 ? passOptions.getPipeline()
                                 : kDefaultPipeline.str();
  std::optional<WeightSet> weights;
  if (!weightsFile.empty()) {
    auto read = readWeightFile(weightsFile);
    if (!read)
      return reportToolError(kTool, read.takeError());
    weights = std::move(*read);
  }
  CompileOptions compileOptions;
  compileOptions.inputPath = inputFilename;
  compileOptions.dims = *dimBindings;
  compileOptions.pipeline = pipelineText;
  if (*optimizer)
    compileOptions.optimizer = **optimizer;
  compileOptions.train = train;
  compileOptions.autodiff = autodiffOptions;
  if (weights) {
    const WeightSet *set = &*weights;
    compileOptions.parameterValue =
        [set](llvm::StringRef name) -> const TensorData * {
      const NamedTensor *tensor = set->lookup(name);
      return tensor ? &tensor->data : nullptr;
    };
  }
  compileOptions.configurePasses = [&passOptions](PassManager &target) {
    return passOptions.configure(target);
  };
  // The pipeline is checked before any work.
  if (llvm::Error err = checkPipeline(compileOptions))
    return reportToolError(kTool, std::move(err));
  if (ranksOption == 0)
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "--ranks must be at least 1"));
  if (zeroOption > 2)
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "--zero must be 0, 1 or 2"));
  if (zeroOption > 0 && ranksOption == 1)
    return reportToolError(
        kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "--zero needs --ranks N with N > 1"));
  if (overlapOption &&
      (ranksOption == 1 || zeroOption > 0 || !memoryLimit.empty()))
    return reportToolError(
        kTool, llvm::createStringError(
                   llvm::inconvertibleErrorCode(),
                   "--overlap needs --ranks N with N > 1 at --zero=0, and no "
                   "--memory-limit (ZeRO's collectives are not split)"));
  std::optional<FitRequest> fit;
  if (!memoryLimit.empty()) {
    auto request =
        makeFitRequest(memoryLimit, allowAmp, allowAccumulate, batchDim,
                       costModel, *dimBindings, pipelineText, fitObjective);
    if (!request)
      return reportToolError(kTool, request.takeError());
    fit = std::move(*request);
    // With --ranks the candidates are one rank's plans; without an explicit
    // --zero the stage is a lever (1 and 2 need the in-graph optimizer).
    if (ranksOption > 1) {
      fit->ranks = ranksOption;
      fit->bucketBytes = bucketBytesOption;
      if (zeroOption.getNumOccurrences())
        fit->zeroStages = {int64_t(zeroOption)};
      else if (*optimizer)
        fit->zeroStages = {0, 1, 2};
    }
  } else if (!allowAmp.empty() || !maxBatch.empty() ||
             allowAccumulate.getNumOccurrences() ||
             batchDim.getNumOccurrences() || costModel.getNumOccurrences() ||
             fitObjective.getNumOccurrences()) {
    return reportToolError(
        kTool, llvm::createStringError(
                   llvm::inconvertibleErrorCode(),
                   "--allow-amp, --allow-accumulate, --batch-dim, "
                   "--max-batch, --cost-model and --fit-objective need "
                   "--memory-limit"));
  }

  // Every output is checked (against the input and each other) and
  // reserved before any work, and all are committed together at the end:
  // a failure anywhere leaves no output and every old file as it was.
  OutputFileSet outputs;
  outputs.addInput(inputFilename, "the input model");
  if (llvm::Error err = outputs.reserve(outputFilename, "-o"))
    return reportToolError(kTool, std::move(err));
  if (!emitOnnx.empty())
    if (llvm::Error err = outputs.reserve(emitOnnx, "--emit-onnx"))
      return reportToolError(kTool, std::move(err));
  if (!reportJson.empty())
    if (llvm::Error err = outputs.reserve(reportJson, "--report-json"))
      return reportToolError(kTool, std::move(err));
  if (!timeline.empty())
    if (llvm::Error err = outputs.reserve(timeline, "--timeline"))
      return reportToolError(kTool, std::move(err));

  PhaseTimer timer;
  timer.start("import", PhaseKind::Import);
  // Read once: the input may be stdin, which cannot be read twice.
  auto input = readInputFile(inputFilename);
  if (!input)
    return reportToolError(kTool, input.takeError());
  compileOptions.inputBytes = (*input)->getBuffer();
  compileOptions.ranks = ranksOption;
  compileOptions.zeroStage = zeroOption;
  compileOptions.bucketBytes = bucketBytesOption;
  compileOptions.overlap = overlapOption;
  compileOptions.fit = fit;
  compileOptions.maxBatch = maxBatch;
  compileOptions.keepOriginal =
      writeGm || report || !reportJson.empty() || !timeline.empty();
  compileOptions.timer = &timer;
  compileOptions.log = &llvm::outs();
  auto compiled = compile(compileOptions);
  if (!compiled)
    return reportToolError(kTool, compiled.takeError());
  std::unique_ptr<Module> &module = compiled->module;
  std::unique_ptr<Module> &original = compiled->original;
  const std::string &pipeline = compiled->pipeline;
  PassManager &passManager = *compiled->passManager;
  unsigned accumulate = compiled->accumulate;
  std::optional<llvm::json::Object> &fitJson = compiled->fitJson;
  llvm::outs() << kTool << ": pipeline: " << pipeline << '\n';
  if (train)
    printTrainableSet(*module, llvm::outs());
  if (passOptions.shouldPrintPipeline())
    llvm::errs() << "// pipeline: " << pipeline << '\n';

  // With no planning pass in the pipeline the report shows the trivial
  // plan; it is made before anything is written (so a failure leaves no
  // output) and given to the module only after (so no output stores it).
  bool wantReport = report || !reportJson.empty();
  bool trivialReport =
      (wantReport || !timeline.empty()) && module->plan.empty();
  ExecutionPlan reportPlan;
  if (trivialReport) {
    timer.start("trivial plan for the report", PhaseKind::Report);
    llvm::Expected<ExecutionPlan> trivial =
        makeReportPlan(*module, inputFilename, passOptions.getWorkspaceModel());
    if (!trivial)
      return reportToolError(kTool, trivial.takeError());
    reportPlan = std::move(*trivial);
  }

  // The container makes names unique; the ONNX copy written after it
  // carries the same names.
  timer.start(writeGm ? "write .gm" : "write ONNX", PhaseKind::Write);
  if (writeGm) {
    llvm::Expected<std::string> bytes =
        writeGmBytes(*module, *original, pipeline);
    if (!bytes)
      return reportToolError(
          kTool, fileError(outputFilename, llvm::toString(bytes.takeError())));
    if (llvm::Error err = outputs.write(outputFilename, *bytes))
      return reportToolError(kTool, std::move(err));
  } else if (llvm::Error err =
                 exportOnnxFile(*module, outputFilename, outputs)) {
    return reportToolError(kTool, std::move(err));
  }
  if (!emitOnnx.empty()) {
    timer.start("write --emit-onnx", PhaseKind::Write);
    if (llvm::Error err = exportOnnxFile(*module, emitOnnx, outputs))
      return reportToolError(kTool, std::move(err));
  }
  // Compiling needs shapes only: external weights stay unread (the .gm
  // refers to them), and the user learns which and where.
  std::vector<UnreadExternalTensor> unread = findUnreadExternalData(*module);

  if (trivialReport)
    module->plan = std::move(reportPlan);
  if (!timeline.empty()) {
    timer.start("memory timeline", PhaseKind::Report);
    auto page = renderPlanTimeline(
        *module, *original, passOptions.getWorkspaceModel(), inputFilename);
    if (!page)
      return reportToolError(
          kTool, fileError(inputFilename, llvm::toString(page.takeError())));
    if (llvm::Error err = outputs.write(timeline, *page))
      return reportToolError(kTool, std::move(err));
  }
  if (wantReport) {
    timer.start("eager baseline and report", PhaseKind::Report);
    // The reference a user compares against: the graph as imported, run
    // eagerly (allocate at definition, free after last use).
    auto eagerBaseline =
        estimateEagerPeakBytes(*original, passOptions.getWorkspaceModel());
    if (!eagerBaseline)
      return reportToolError(
          kTool,
          fileError(inputFilename, llvm::toString(eagerBaseline.takeError())));
    if (report) {
      if (trivialReport)
        llvm::outs() << kTool
                     << ": no planning pass ran; reporting the trivial plan "
                        "(no reuse)\n";
      printPlanReport(*module, llvm::outs(), *eagerBaseline);
    }
    if (!reportJson.empty()) {
      llvm::json::Object json = planReportJson(*module, *eagerBaseline);
      json["plan"] = trivialReport ? "trivial" : "planned";
      json["pipeline"] = pipeline;
      if (!unread.empty())
        json["external_data"] = unreadExternalDataJson(unread);
      json["imported_nodes"] =
          static_cast<int64_t>(original->getGraph().getNumNodes());
      json["nodes"] = static_cast<int64_t>(module->getGraph().getNumNodes());
      // Per pass, what it did: recompute's saved bytes before and after and
      // its FLOPs, plan-buffers' arena...
      json["pass_statistics"] = passStatisticsJson(passManager.getContext());
      if (fitJson)
        json[maxBatch.empty() ? "memory_fit" : "max_batch"] =
            std::move(*fitJson);
      json["accumulate"] = static_cast<int64_t>(accumulate);
      // The compiled step's predicted cost (passes/planning/StepCost.h) per
      // backend preset, for one step of `accumulate` micro-steps.
      llvm::json::Object predicted;
      for (StepThroughput preset :
           {StepThroughput::cpu(), StepThroughput::cuda()}) {
        StepCost cost = estimateStepCost(*module, preset);
        predicted[preset.name] = llvm::json::Object{
            {"seconds", cost.accumulatedSeconds(accumulate)},
            {"flops", static_cast<int64_t>(cost.accumulatedFlops(accumulate))},
            {"kernels", static_cast<int64_t>(cost.kernels)}};
      }
      json["predicted_step"] = std::move(predicted);
      // Everything up to here; committing the files comes after.
      if (timeCompile) {
        timer.stop();
        json["compile_timing"] = timer.toJson();
      }
      std::string text =
          llvm::formatv("{0:2}\n", llvm::json::Value(std::move(json)));
      if (llvm::Error err = outputs.write(reportJson, text))
        return reportToolError(kTool, std::move(err));
    }
  }
  timer.start("commit outputs", PhaseKind::Write);
  if (llvm::Error err = outputs.commit())
    return reportToolError(kTool, std::move(err));
  printUnreadExternalDataNote(llvm::errs(), kTool, unread);
  timer.stop();
  if (timeCompile)
    timer.print(llvm::errs());
  return 0;
}

int gmopt::gmoptCompileMain(int argc, char **argv) {
  return finishToolOutput(kTool, runGmoptCompile(argc, argv));
}
