//===- CompilerBindings.cpp - Compiling a model from Python -----*- C++ -*-===//
//
// _core.compile_plan: compiles a training graph the way a TrainingSession
// does (gmopt_runtime's loadRunnableModel: import, the optimizer model merged,
// the default or a given pipeline, the buffer plan) without running it, and
// returns the plan's figures and its timeline: the schedule's steps and one
// band per tensor with storage of its own (what `gmopt-compile --timeline`
// draws), so Python can plot or query where the peak comes from.
//
// A stand-in until the compiler library's compile(CompileOptions) exists
// (issue 37 item 1); gmopt.compile is written against this call only.
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"
#include "python/src/Errors.h"

#include "backend/Memory.h"
#include "ir/Module.h"
#include "ir/Optimizer.h"
#include "tools/driver/PlanTimeline.h"
#include "tools/driver/Runtime.h"

#include <pybind11/stl.h>

namespace py = pybind11;
using namespace gmopt;
using namespace gmopt::python;

namespace {

/// Bytes per category name.
py::dict categoryDict(const CategoryBytes &bytes) {
  py::dict result;
  for (MemoryCategory category : kAllMemoryCategories)
    result[py::str(memoryCategoryName(category).str())] =
        bytes[static_cast<unsigned>(category)];
  return result;
}

py::dict figuresDict(const MemoryFigures &figures) {
  py::dict planned;
  planned["peak_bytes"] = figures.plannedBytes();
  planned["arena_bytes"] = figures.arenaBytes;
  planned["host_arena_bytes"] = figures.hostArenaBytes;
  planned["lower_bound_bytes"] = figures.lowerBoundBytes;
  planned["lower_bound_step"] = figures.lowerBoundStep;
  planned["naive_bytes"] = figures.naiveBytes;
  planned["eager_estimate_bytes"] = figures.eagerEstimateBytes;
  planned["workspace_bytes"] = figures.workspaceBytes;
  planned["in_place_saved_bytes"] = figures.inPlaceSavedBytes;
  planned["persistent_bytes"] = categoryDict(figures.persistentBytes);
  return planned;
}

py::dict timelineDict(const TimelinePanel &panel) {
  py::list bands;
  for (const TimelineBand &band : panel.bands) {
    py::dict entry;
    entry["tensor"] = band.tensor;
    entry["producer"] = band.producer;
    entry["category"] = memoryCategoryName(band.category).str();
    entry["bytes"] = band.bytes;
    entry["first_step"] = band.firstStep;
    entry["last_step"] = band.lastStep;
    bands.append(entry);
  }
  py::dict result;
  result["title"] = panel.title;
  result["steps"] = panel.steps;
  result["recompute"] = panel.recompute;
  result["bands"] = bands;
  result["reserved_bytes"] = panel.reservedBytes
                                 ? py::object(py::int_(*panel.reservedBytes))
                                 : py::object(py::none());
  return result;
}

} // namespace

void gmopt::python::bindCompiler(py::module_ &m) {
  m.def(
      "compile_plan",
      [](const std::string &model, std::map<std::string, int64_t> dims,
         const std::string &pipeline, const std::string &optimizerModel,
         const std::string &backend) {
        BackendKind kind;
        if (backend == "cpu")
          kind = BackendKind::Cpu;
        else if (backend == "cuda")
          kind = BackendKind::Cuda;
        else
          throw py::value_error("backend '" + backend +
                                "': expected 'cpu' or 'cuda'");
        std::optional<RunnableModel> compiled;
        {
          py::gil_scoped_release release;
          std::optional<OptimizerSpec> optimizer;
          if (!optimizerModel.empty())
            optimizer = unwrap(importOptimizerModelFile(optimizerModel));
          compiled = unwrap(loadRunnableModel(model, dims, /*inputs=*/nullptr,
                                              /*wantOriginal=*/false, pipeline,
                                              optimizer ? &*optimizer : nullptr,
                                              /*externalDataDir=*/"", kind));
        }
        const Module &module = *compiled->module;
        py::dict result;
        result["pipeline"] = compiled->pipeline;
        result["dims"] = compiled->dims;
        result["planned"] = figuresDict(module.plan.figures);
        result["timeline"] = timelineDict(timelinePanelFromPlan(
            module, module.plan, "gmopt: planned", /*showReserved=*/true));
        return result;
      },
      py::arg("model"), py::arg("dims") = std::map<std::string, int64_t>(),
      py::arg("pipeline") = "", py::arg("optimizer_model") = "",
      py::arg("backend") = "cpu",
      "Compiles a training graph as a session would, without running it: "
      "the pipeline, the dimension bindings, the plan's figures and its "
      "timeline (steps and per-tensor bands).");
}
