//===- OptMain.cpp - The gmopt-opt driver ---------------------------------===//
//
// gmopt-opt is the developer's tool: read a module as text, ONNX or the
// rewritten model of a `.gm` container, run an arbitrary pipeline with full
// instrumentation, and print the result as text (for FileCheck) or write
// ONNX (--optimizer-model / --optimizer build the in-graph optimizer into
// the module first, as gmopt-compile does). With --split-input-file a text
// input holds several modules separated by `// -----` lines, each processed on
// its own, as mlir-opt does for golden tests. Every failure - bad option, bad
// pipeline, unreadable input, a pass or verifier error - ends in one
// `gmopt-opt: error: ...` line and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"
#include "tools/driver/ExternalDataReport.h"
#include "tools/driver/OptimizerCLOptions.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;
namespace cl = llvm::cl;

namespace {

constexpr llvm::StringLiteral kTool = "gmopt-opt";

enum class EmitFormat { Text, Onnx };

/// True for a `.gm` container, recognised by its extension.
bool isGmFile(llvm::StringRef path) {
  return path.ends_with_insensitive(".gm");
}

/// Loads the rewritten model of the `.gm` file at \p path and binds \p dims
/// (which must agree with the bindings the file records).
llvm::Expected<std::unique_ptr<Module>>
loadGmModule(llvm::StringRef path, const std::map<std::string, int64_t> &dims) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  auto compiled = readGmBytes((*buffer)->getBuffer(), path);
  if (!compiled)
    return compiled.takeError();
  std::unique_ptr<Module> module = std::move(compiled->module);
  if (llvm::Error err = bindSymbolicDims(*module, dims))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ": " +
                                       llvm::toString(std::move(err)));
  return module;
}

/// Runs the pipeline on \p module and records it; errors name \p inputName.
llvm::Error runPipeline(Module &module, PassManager &passManager,
                        const PassManagerCLOptions &passOptions,
                        llvm::StringRef inputName) {
  if (llvm::Error err = passManager.run(module))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   inputName + ": " +
                                       llvm::toString(std::move(err)));
  std::string pipeline = passManager.getPipelineString();
  if (passOptions.hasPipeline())
    recordPipeline(module, pipeline);
  if (passOptions.shouldPrintPipeline())
    llvm::errs() << "// pipeline: " << pipeline << '\n';
  return llvm::Error::success();
}

/// --split-input-file: every chunk is loaded, run and printed on its own;
/// a failing chunk is reported and the others still run.
int processSplitInput(llvm::StringRef path,
                      const std::map<std::string, int64_t> &dims,
                      PassManager &passManager,
                      const PassManagerCLOptions &passOptions,
                      OutputFileSet &outputs, llvm::StringRef outputPath) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return reportToolError(kTool, buffer.takeError());
  std::string inputName = path == "-" ? "<stdin>" : path.str();
  std::string output;
  llvm::raw_string_ostream os(output);
  bool failed = false, first = true;
  for (const std::string &chunk : splitInputChunks((*buffer)->getBuffer())) {
    auto module = loadTextModule(chunk, inputName, dims);
    llvm::Error err =
        module ? runPipeline(**module, passManager, passOptions, inputName)
               : module.takeError();
    if (err) {
      reportToolError(kTool, std::move(err));
      failed = true;
      continue;
    }
    if (!first)
      os << kSplitMarker << '\n';
    first = false;
    printModule(**module, os);
  }
  if (llvm::Error err = outputs.write(outputPath, output))
    return reportToolError(kTool, std::move(err));
  if (llvm::Error err = outputs.commit())
    return reportToolError(kTool, std::move(err));
  return failed ? 1 : 0;
}

} // namespace

static int runGmoptOpt(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory &category = getGmoptCategory();
  cl::opt<std::string> inputFilename(cl::Positional,
                                     cl::desc("<input file, - for stdin>"),
                                     cl::init("-"), cl::cat(category));
  cl::opt<std::string> outputFilename(
      "o", cl::desc("Output file (- for stdout, the default)"),
      cl::value_desc("file"), cl::init("-"), cl::cat(category));
  cl::opt<InputFormat> inputFormat(
      "input-format",
      cl::desc("Input format (default: ONNX for *.onnx, the rewritten model "
               "for *.gm, text otherwise)"),
      cl::init(InputFormat::Auto),
      cl::values(clEnumValN(InputFormat::Text, "text", "gmopt text IR"),
                 clEnumValN(InputFormat::Onnx, "onnx", "ONNX ModelProto")),
      cl::cat(category));
  cl::opt<EmitFormat> emit(
      "emit",
      cl::desc("Output format (default: ONNX for -o *.onnx, text otherwise)"),
      cl::values(clEnumValN(EmitFormat::Text, "text", "gmopt text IR"),
                 clEnumValN(EmitFormat::Onnx, "onnx", "ONNX ModelProto")),
      cl::cat(category));
  cl::list<std::string> dims(
      "dim", cl::desc("Bind symbolic dimension NAME to N"),
      cl::value_desc("NAME=N"), cl::CommaSeparated, cl::cat(category));
  cl::opt<bool> splitInputFile(
      "split-input-file",
      cl::desc("Process each `// -----`-separated chunk of a text input as "
               "its own module"),
      cl::cat(category));
  cl::opt<bool> listOps(
      "list-ops",
      cl::desc("List every op the registry knows with its versions and "
               "mixed-precision (AMP) class, then exit"),
      cl::cat(category));
  PassManagerCLOptions passOptions(
      "Pass pipeline to run, e.g. canonicalize{dce=false} (default: none)");
  OptimizerCLOptions optimizerOptions(OptimizerChoice::None);

  if (!parseToolCommandLine(argc, argv, kTool,
                            "gmopt-opt: run gmopt passes on a module\n"))
    return 1;
  if (passOptions.shouldListPasses()) {
    printRegisteredPasses(llvm::outs());
    return 0;
  }
  if (listOps) {
    printOpTable(llvm::outs());
    return 0;
  }

  auto dimBindings = parseDimBindings(dims);
  if (!dimBindings)
    return reportToolError(kTool, dimBindings.takeError());
  PassManager passManager;
  if (llvm::Error err = passOptions.configure(passManager))
    return reportToolError(kTool, std::move(err));
  if (passOptions.hasPipeline())
    if (llvm::Error err = passManager.addPipeline(passOptions.getPipeline()))
      return reportToolError(kTool, std::move(err));

  // The output is checked against the input and reserved before any work;
  // it replaces its target only once it has been written in full.
  OutputFileSet outputs;
  outputs.addInput(inputFilename, "the input");
  if (llvm::Error err = outputs.reserve(outputFilename, "-o"))
    return reportToolError(kTool, std::move(err));

  bool emitOnnx =
      emit.getNumOccurrences()
          ? emit == EmitFormat::Onnx
          : llvm::StringRef(outputFilename).ends_with_insensitive(".onnx");
  if (splitInputFile) {
    bool onnxInput =
        inputFormat == InputFormat::Onnx ||
        (inputFormat == InputFormat::Auto &&
         (llvm::StringRef(inputFilename).ends_with_insensitive(".onnx") ||
          isGmFile(inputFilename)));
    if (onnxInput || emitOnnx)
      return reportToolError(
          kTool, llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "--split-input-file needs text input "
                                         "and text output"));
    return processSplitInput(inputFilename, *dimBindings, passManager,
                             passOptions, outputs, outputFilename);
  }

  auto module = inputFormat == InputFormat::Auto && isGmFile(inputFilename)
                    ? loadGmModule(inputFilename, *dimBindings)
                    : loadModule(inputFilename, inputFormat, *dimBindings);
  if (!module)
    return reportToolError(kTool, module.takeError());
  std::string inputName =
      inputFilename == "-" ? std::string("<stdin>") : inputFilename.getValue();
  auto optimizer = optimizerOptions.getSpec();
  if (!optimizer)
    return reportToolError(kTool, optimizer.takeError());
  if (*optimizer) {
    auto node = buildOptimizer(**module, **optimizer);
    if (!node)
      return reportToolError(
          kTool,
          llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s",
                                  inputName.c_str(),
                                  llvm::toString(node.takeError()).c_str()));
  }
  if (llvm::Error err =
          runPipeline(**module, passManager, passOptions, inputName))
    return reportToolError(kTool, std::move(err));

  llvm::Error written =
      emitOnnx ? exportOnnxFile(**module, outputFilename, outputs)
               : outputs.write(outputFilename, printModuleText(**module));
  if (written)
    return reportToolError(kTool, std::move(written));
  if (llvm::Error err = outputs.commit())
    return reportToolError(kTool, std::move(err));
  printUnreadExternalDataNote(llvm::errs(), kTool,
                              findUnreadExternalData(**module));
  return 0;
}

int gmopt::gmoptOptMain(int argc, char **argv) {
  return finishToolOutput(kTool, runGmoptOpt(argc, argv));
}
