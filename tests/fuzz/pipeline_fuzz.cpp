//===- pipeline_fuzz.cpp - libFuzzer target for the whole compile path ----===//
//
// Does what gmopt-compile does, on arbitrary bytes: load an ONNX model or a
// text-IR module (FuzzInput.h: the first byte picks the loader, the next
// eight bind symbolic dimensions), run the default pipeline (with one of
// the recompute modes, amp, pack-dropout-masks or tie-weights before the
// schedule, picked by the input's length, so every rewrite meets arbitrary
// graphs), write the `.gm` bytes and load them again. Every failure up to and
// including the write must be an llvm::Error; crashes, sanitizer reports, hangs
// and leaks are bugs. What was written must load (an error there aborts), and
// the loaded modules must equal the written ones: the same text-IR print of the
// rewritten and the original module, the same plan, the same pipeline.
// Nothing reads or writes a file.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "ir/Module.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "tools/driver/ToolSupport.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>

using namespace gmopt;

namespace {

/// The name the written bytes are loaded under (in a directory that does
/// not exist).
constexpr const char *kFuzzFile = "/nonexistent/gmopt-fuzz/fuzz.gm";

std::string printText(const Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os);
  return text;
}

std::string printPlan(const Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.plan.print(module, os);
  return text;
}

[[noreturn]] void fail(llvm::StringRef what, llvm::StringRef written,
                       llvm::StringRef loaded) {
  llvm::errs() << "pipeline_fuzz: " << what << "\n--- written\n"
               << written << "\n--- loaded\n"
               << loaded << '\n';
  std::abort();
}

/// Checks that \p loaded prints like \p written (and plans alike).
void expectSame(llvm::StringRef which, const Module &written,
                const Module &loaded) {
  std::string writtenText = printText(written), loadedText = printText(loaded);
  if (writtenText != loadedText)
    fail((which + " module differs after the .gm round trip").str(),
         writtenText, loadedText);
  std::string writtenPlan = printPlan(written), loadedPlan = printPlan(loaded);
  if (writtenPlan != loadedPlan)
    fail((which + " plan differs after the .gm round trip").str(), writtenPlan,
         loadedPlan);
}

/// The default pipeline, with recompute in one of its modes, amp,
/// pack-dropout-masks or tie-weights (or none) before the schedule, chosen
/// by \p size.
std::string pipelineFor(size_t size) {
  static const char *const kRecompute[] = {
      "",
      "recompute{mode=selective},",
      "recompute{mode=sqrt},",
      "recompute{mode=full},",
      "recompute{mode=budget,memory-limit=80%},",
      "pack-dropout-masks,",
      "amp{dtype=fp16},pack-dropout-masks,",
      "amp{dtype=bf16},recompute{mode=selective},",
      "tie-weights,",
  };
  std::string pipeline = kDefaultPipeline.str();
  size_t at = pipeline.find("schedule");
  pipeline.insert(at, kRecompute[size % std::size(kRecompute)]);
  return pipeline;
}

void compile(const fuzz::FuzzInput &input, size_t size) {
  llvm::Expected<std::unique_ptr<Module>> module = fuzz::loadFuzzModule(input);
  if (!module) {
    llvm::consumeError(module.takeError());
    return;
  }
  if (llvm::Error err = checkDimsBound(**module)) {
    llvm::consumeError(std::move(err));
    return;
  }
  // The container's original: a second load, as gmopt-compile makes it.
  llvm::Expected<std::unique_ptr<Module>> original =
      fuzz::loadFuzzModule(input);
  if (!original) {
    llvm::errs() << "pipeline_fuzz: the second load failed: "
                 << llvm::toString(original.takeError()) << '\n';
    std::abort();
  }

  PassManager passManager;
  if (llvm::Error err = passManager.addPipeline(pipelineFor(size))) {
    llvm::errs() << "pipeline_fuzz: the pipeline does not parse: "
                 << llvm::toString(std::move(err)) << '\n';
    std::abort();
  }
  if (llvm::Error err = passManager.run(**module)) {
    llvm::consumeError(std::move(err));
    return;
  }
  std::string pipeline = passManager.getPipelineString();
  recordPipeline(**module, pipeline);

  // Export names gmopt the producer of a model that names none and a graph
  // without a name (ONNX requires one), and imports com.microsoft at
  // version 1 for contrib ops when the module has no import for it; doing
  // all three here first leaves the comparison below only real differences.
  for (Module *written : {module->get(), original->get()}) {
    if (written->producerName.empty())
      written->producerName = "gmopt";
    if (written->getGraph().getName().empty())
      written->getGraph().setName("gmopt");
    for (const Node &node : written->getGraph().getNodes())
      if (node.getDomain() == kMsDomain)
        written->opsetImports.emplace(kMsDomain.str(), 1);
  }

  llvm::Expected<std::string> bytes =
      writeGmBytes(**module, **original, pipeline);
  if (!bytes) {
    llvm::consumeError(bytes.takeError());
    return;
  }
  llvm::Expected<CompiledModule> loaded = readGmBytes(*bytes, kFuzzFile);
  if (!loaded) {
    llvm::errs() << "pipeline_fuzz: written but cannot be loaded: "
                 << llvm::toString(loaded.takeError()) << '\n'
                 << printText(**module);
    std::abort();
  }
  expectSame("rewritten", **module, *loaded->module);
  expectSame("original", **original, *loaded->original);
  if (loaded->pipeline != pipeline)
    fail("pipeline differs after the .gm round trip", pipeline,
         loaded->pipeline);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (std::optional<fuzz::FuzzInput> input = fuzz::decodeFuzzInput(data, size))
    compile(*input, size);
  return 0;
}
