//===- CompileMain.cpp - The gmopt-compile driver -------------------------===//
//
// gmopt-compile is the user's tool: it takes an ONNX training graph (ONNX
// Runtime's training_model.onnx, or a graph exposing `X_grad` outputs),
// insists every symbolic dimension is bound and that the graph really has
// gradients, runs the default pipeline (passes/DefaultPipeline.h) or the
// one given with --passes, prints the pipeline it ran so the run can be
// replayed, and writes the rewritten model.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"

#include "ir/Module.h"
#include "ir/Onnx.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;
namespace cl = llvm::cl;

namespace {

constexpr llvm::StringLiteral kTool = "gmopt-compile";

llvm::Error fileError(llvm::StringRef file, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 file + ": " + message);
}

} // namespace

int gmopt::gmoptCompileMain(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory &category = getGmoptCategory();
  cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<input.onnx>"),
                                     cl::cat(category));
  cl::opt<std::string> outputFilename(
      "o", cl::desc("Output model (an .onnx file; required)"),
      cl::value_desc("file"), cl::cat(category));
  cl::opt<std::string> emitOnnx(
      "emit-onnx", cl::desc("Also write the rewritten graph as ONNX here"),
      cl::value_desc("file"), cl::cat(category));
  cl::list<std::string> dims(
      "dim", cl::desc("Bind symbolic dimension NAME to N"),
      cl::value_desc("NAME=N"), cl::CommaSeparated, cl::cat(category));
  PassManagerCLOptions passOptions(
      "Pass pipeline to run (default: " + kDefaultPipeline.str() + ")");

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
                                       "no output file: -o FILE.onnx is "
                                       "required"));
  if (!llvm::StringRef(outputFilename).ends_with_insensitive(".onnx"))
    return reportToolError(
        kTool, fileError(outputFilename,
                         "unsupported output file type: -o must name an "
                         ".onnx file"));
  auto dimBindings = parseDimBindings(dims);
  if (!dimBindings)
    return reportToolError(kTool, dimBindings.takeError());
  PassManager passManager;
  if (llvm::Error err = passOptions.configure(passManager))
    return reportToolError(kTool, std::move(err));
  if (llvm::Error err = passManager.addPipeline(
          passOptions.hasPipeline() ? llvm::StringRef(passOptions.getPipeline())
                                    : llvm::StringRef(kDefaultPipeline)))
    return reportToolError(kTool, std::move(err));

  auto module = loadModule(inputFilename, InputFormat::Onnx, *dimBindings);
  if (!module)
    return reportToolError(kTool, module.takeError());
  if (llvm::Error err = checkDimsBound(**module))
    return reportToolError(
        kTool, fileError(inputFilename, llvm::toString(std::move(err))));
  if (!(*module)->signature.hasGradients())
    return reportToolError(
        kTool, fileError(inputFilename,
                         "no gradients found: this is not a training graph "
                         "(expected ONNX Runtime's training_model.onnx or "
                         "gradients exposed as outputs named X_grad)"));

  if (llvm::Error err = passManager.run(**module))
    return reportToolError(
        kTool, fileError(inputFilename, llvm::toString(std::move(err))));
  std::string pipeline = passManager.getPipelineString();
  recordPipeline(**module, pipeline);
  llvm::outs() << kTool << ": pipeline: " << pipeline << '\n';
  if (passOptions.shouldPrintPipeline())
    llvm::errs() << "// pipeline: " << pipeline << '\n';

  if (llvm::Error err = writeModuleOnnx(**module, outputFilename))
    return reportToolError(kTool, std::move(err));
  if (!emitOnnx.empty())
    if (llvm::Error err = writeModuleOnnx(**module, emitOnnx))
      return reportToolError(kTool, std::move(err));
  return 0;
}
