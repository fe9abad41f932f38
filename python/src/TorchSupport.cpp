//===- TorchSupport.cpp - A forward model's training step, compiled -------===//
//
// _core.compile_forward: what gmopt.torch needs beyond a session on ONNX
// Runtime's artifacts. A forward model (an exporter's graph whose output is
// the loss) is imported with its dimensions bound, its training step is
// built by a pipeline (gmopt.torch's `canonicalize,autodiff{...},
// tie-weights`, what gmopt-compile --train runs), an in-graph optimizer is
// appended when asked (ir/Optimizer.h's buildOptimizer, as --optimizer
// does), the step is compiled by the pipeline given (empty: gmopt's default,
// passes/DefaultPipeline.h) and the result is
// written as a `.gm` file, which gmopt.Session opens and gmopt.compile
// plans. The original module the container keeps is the same step before
// that pipeline (gmopt-run --baseline's reference).
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"
#include "python/src/Errors.h"

#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "passes/DefaultPipeline.h"
#include "passes/PassManager.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>

namespace py = pybind11;
using namespace gmopt;
using namespace gmopt::python;

namespace {

/// The optimizer \p options describe: None, or a dict with `kind` (`sgd`,
/// `adamw`) and AdamW's `beta1`, `beta2`, `epsilon`, `weight_decay`,
/// `adam_mode`, `correct_bias`.
std::optional<OptimizerSpec> optimizerFrom(const py::object &options) {
  if (options.is_none())
    return std::nullopt;
  py::dict dict = options.cast<py::dict>();
  OptimizerSpec spec;
  std::string kind = dict.contains("kind")
                         ? py::str(dict["kind"]).cast<std::string>()
                         : std::string("adamw");
  if (kind == "sgd") {
    spec.kind = OptimizerKind::SGD;
  } else if (kind != "adamw") {
    throw py::value_error("optimizer kind '" + kind +
                          "': expected 'sgd' or 'adamw'");
  }
  auto readFloat = [&](const char *key, float &target) {
    if (dict.contains(key))
      target = dict[key].cast<float>();
  };
  auto readInt = [&](const char *key, int64_t &target) {
    if (dict.contains(key))
      target = dict[key].cast<int64_t>();
  };
  readFloat("beta1", spec.alpha);
  readFloat("beta2", spec.beta);
  readFloat("epsilon", spec.epsilon);
  readFloat("weight_decay", spec.weightDecay);
  readInt("adam_mode", spec.adamMode);
  readInt("correct_bias", spec.correctBias);
  check(spec.validate());
  return spec;
}

/// \p path's model with \p dims bound and its training step built by
/// \p stepPipeline, then \p optimizer appended.
std::unique_ptr<Module>
buildStep(const std::string &path, const std::map<std::string, int64_t> &dims,
          const std::string &stepPipeline,
          const std::optional<OptimizerSpec> &optimizer) {
  std::unique_ptr<Module> module =
      unwrap(loadModule(path, InputFormat::Onnx, dims));
  PassManager stepPasses;
  check(stepPasses.addPipeline(stepPipeline));
  if (llvm::Error err = stepPasses.run(*module))
    throw GmoptError(path + ": " + llvm::toString(std::move(err)));
  check(checkDimsBound(*module));
  if (optimizer)
    unwrap(buildOptimizer(*module, *optimizer));
  return module;
}

} // namespace

void gmopt::python::bindTorchSupport(py::module_ &m) {
  // What an empty pipeline runs, for callers that vary one of its passes.
  m.attr("default_pipeline") = kDefaultPipeline.str();
  m.def(
      "compile_forward",
      [](const std::string &path, const std::map<std::string, int64_t> &dims,
         const std::string &stepPipeline, const std::string &pipeline,
         const py::object &optimizerOptions, const std::string &output,
         const std::string &backend) {
        WorkspaceTarget target;
        if (backend == "cpu")
          target = WorkspaceTarget::Cpu;
        else if (backend == "cuda")
          target = WorkspaceTarget::Cuda;
        else
          throw py::value_error("backend '" + backend +
                                "': expected 'cpu' or 'cuda'");
        std::optional<OptimizerSpec> optimizer =
            optimizerFrom(optimizerOptions);
        py::gil_scoped_release release;
        std::unique_ptr<Module> module =
            buildStep(path, dims, stepPipeline, optimizer);
        std::unique_ptr<Module> original =
            buildStep(path, dims, stepPipeline, optimizer);
        PassManager passes;
        passes.getContext().setWorkspaceModel(getWorkspaceModel(target),
                                              workspaceModelName(target).str());
        check(passes.addPipeline(pipeline.empty()
                                     ? llvm::StringRef(kDefaultPipeline)
                                     : llvm::StringRef(pipeline)));
        if (llvm::Error err = passes.run(*module))
          throw GmoptError(path + ": " + llvm::toString(std::move(err)));
        std::string ran =
            stepPipeline + "," +
            (optimizer ? "(+" + optimizer->str() + ")," : std::string()) +
            passes.getPipelineString();
        recordPipeline(*module, ran);
        check(writeGmFile(output, *module, *original, ran));
        return ran;
      },
      py::arg("path"), py::arg("dims"), py::arg("step_pipeline"),
      py::arg("pipeline"), py::arg("optimizer"), py::arg("output"),
      py::arg("backend") = "cpu",
      "Builds a forward model's training step (step_pipeline: autodiff and "
      "what goes with it), appends the optimizer (None, or a dict with kind "
      "'sgd' or 'adamw' and AdamW's hyper-parameters), compiles it with "
      "pipeline (empty: the default one), writes it as a .gm file and "
      "returns the pipeline that ran.");
}
