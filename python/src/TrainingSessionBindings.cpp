//===- TrainingSessionBindings.cpp - gmopt_runtime in Python ----*- C++ -*-===//
//
// Binds gmopt_runtime's CheckpointState and TrainingSession (TrainingSession.h)
// as _core.CheckpointState and _core.TrainingSession, close to the C++ API;
// gmopt.Session and gmopt.training.api (ONNX Runtime's Python API) are
// written in Python over these. Arrays cross without copies where
// NumpyTensor.h allows, and every step releases the GIL while it runs.
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"
#include "python/src/Errors.h"
#include "python/src/NumpyTensor.h"

#include "tools/runtime/TrainingSession.h"

#include <pybind11/stl.h>

#include <optional>

namespace py = pybind11;
using namespace gmopt;
using namespace gmopt::python;

namespace {

/// A property value as Python sees it: int, float or str.
py::object propertyToPython(const PropertyValue &value) {
  if (const auto *i = std::get_if<int64_t>(&value))
    return py::int_(*i);
  if (const auto *f = std::get_if<float>(&value))
    return py::float_(static_cast<double>(*f));
  return py::str(std::get<std::string>(value));
}

/// A Python property value as a PropertyValue; ONNX Runtime takes int, float
/// and str (bool is an int in Python).
PropertyValue propertyFromPython(const std::string &name,
                                 const py::handle &value) {
  if (py::isinstance<py::int_>(value))
    return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value))
    return value.cast<float>();
  if (py::isinstance<py::str>(value))
    return value.cast<std::string>();
  throw py::type_error("property '" + name +
                       "': values are int, float or str, not " +
                       py::str(value.get_type()).cast<std::string>());
}

/// Runs a step on \p inputs with the GIL released and returns its outputs
/// as arrays.
template <typename StepFn>
py::list runStep(const py::sequence &inputs, const std::string &what,
                 StepFn step) {
  std::vector<HostTensor> tensors = tensorsFromArrays(inputs, what);
  std::optional<llvm::Expected<std::vector<HostTensor>>> outputs;
  {
    py::gil_scoped_release release;
    outputs.emplace(step(tensors));
  }
  std::vector<HostTensor> values = unwrap(std::move(*outputs));
  py::list arrays;
  for (const HostTensor &value : values)
    arrays.append(arrayFromTensor(value));
  return arrays;
}

/// The session's memory figures as a dict: the plan's and the measured,
/// each category's bytes by name.
py::dict memoryToPython(const SessionMemory &memory) {
  py::dict planned;
  planned["peak_bytes"] = memory.planned.plannedBytes();
  planned["arena_bytes"] = memory.planned.arenaBytes;
  planned["host_arena_bytes"] = memory.planned.hostArenaBytes;
  planned["lower_bound_bytes"] = memory.planned.lowerBoundBytes;
  planned["naive_bytes"] = memory.planned.naiveBytes;
  planned["eager_estimate_bytes"] = memory.planned.eagerEstimateBytes;
  planned["workspace_bytes"] = memory.planned.workspaceBytes;
  planned["in_place_saved_bytes"] = memory.planned.inPlaceSavedBytes;
  py::dict persistent, measuredAtPeak;
  for (MemoryCategory category : kAllMemoryCategories) {
    std::string name = memoryCategoryName(category).str();
    persistent[py::str(name)] =
        memory.planned.persistentBytes[static_cast<unsigned>(category)];
    measuredAtPeak[py::str(name)] = memory.measured.atPeak(category);
  }
  planned["persistent_bytes"] = persistent;
  py::dict measured;
  measured["peak_bytes"] = memory.measured.peakBytes;
  measured["peak_by_category"] = measuredAtPeak;
  measured["host_peak_bytes"] = memory.measured.hostPeakBytes;
  py::dict result;
  result["planned"] = planned;
  result["measured"] = measured;
  result["pipeline"] = memory.pipeline;
  return result;
}

SessionBackend parseBackend(const std::string &name) {
  if (name == "auto")
    return SessionBackend::Auto;
  if (name == "cpu")
    return SessionBackend::Cpu;
  if (name == "cuda")
    return SessionBackend::Cuda;
  throw py::value_error("backend '" + name +
                        "': expected 'auto', 'cpu' or 'cuda'");
}

} // namespace

void gmopt::python::bindTrainingSession(py::module_ &m) {
  py::class_<CheckpointState>(m, "CheckpointState",
                              "gmopt_runtime's CheckpointState: parameters, "
                              "optimizer state and properties (a handle: "
                              "copies share one state).")
      .def(py::init<>())
      .def_static(
          "load",
          [](const std::string &path) {
            return unwrap(CheckpointState::load(path));
          },
          py::arg("path"))
      .def(
          "save",
          [](const CheckpointState &state, const std::string &path,
             bool includeOptimizerState) {
            py::gil_scoped_release release;
            check(state.save(path, includeOptimizerState));
          },
          py::arg("path"), py::arg("include_optimizer_state") = false)
      .def(
          "add_property",
          [](CheckpointState &state, const std::string &name,
             const py::handle &value) {
            state.addProperty(name, propertyFromPython(name, value));
          },
          py::arg("name"), py::arg("value"))
      .def(
          "get_property",
          [](const CheckpointState &state, const std::string &name) {
            return propertyToPython(unwrap(state.getProperty(name)));
          },
          py::arg("name"))
      .def(
          "has_property",
          [](const CheckpointState &state, const std::string &name) {
            return state.hasProperty(name);
          },
          py::arg("name"))
      .def("property_names", &CheckpointState::getPropertyNames)
      .def("parameter_names", &CheckpointState::getParameterNames)
      .def(
          "is_trainable",
          [](const CheckpointState &state, const std::string &name) {
            return unwrap(state.isTrainable(name));
          },
          py::arg("name"))
      .def(
          "get_parameter",
          [](const CheckpointState &state, const std::string &name) {
            return arrayFromTensor(unwrap(state.getParameter(name)));
          },
          py::arg("name"))
      .def(
          "update_parameter",
          [](CheckpointState &state, const std::string &name,
             const py::handle &value) {
            check(state.updateParameter(
                name, tensorFromArray(value, "parameter '" + name + "'")));
          },
          py::arg("name"), py::arg("value"))
      .def("has_optimizer_state", &CheckpointState::hasOptimizerState)
      .def("has_session", [](const CheckpointState &state) {
        return state.getSession() != nullptr;
      });

  py::class_<TrainingSession>(
      m, "TrainingSession",
      "gmopt_runtime's TrainingSession: a compiled, planned training step.")
      .def_static(
          "open",
          [](const std::string &trainingModel, const std::string &evalModel,
             const std::string &optimizerModel, const CheckpointState *state,
             const std::string &backend, unsigned threads, uint64_t seed,
             bool planned, std::map<std::string, int64_t> dims,
             const std::string &pipeline,
             std::optional<uint64_t> memoryLimitBytes) {
            TrainingSessionOptions options;
            options.backend = parseBackend(backend);
            options.threads = threads;
            options.seed = seed;
            options.planned = planned;
            options.dims = std::move(dims);
            options.pipeline = pipeline;
            options.memoryLimitBytes = memoryLimitBytes;
            if (!state && (!evalModel.empty() || !optimizerModel.empty()))
              throw py::value_error(
                  "an eval or optimizer model is opened with a checkpoint "
                  "state");
            py::gil_scoped_release release;
            if (!state)
              return unwrap(TrainingSession::open(trainingModel, options));
            TrainingArtifacts artifacts;
            artifacts.trainingModel = trainingModel;
            artifacts.evalModel = evalModel;
            artifacts.optimizerModel = optimizerModel;
            return unwrap(TrainingSession::open(artifacts, *state, options));
          },
          py::arg("training_model"), py::arg("eval_model") = "",
          py::arg("optimizer_model") = "", py::arg("state") = nullptr,
          py::arg("backend") = "cpu", py::arg("threads") = 0,
          py::arg("seed") = 0, py::arg("planned") = true,
          py::arg("dims") = std::map<std::string, int64_t>(),
          py::arg("pipeline") = "", py::arg("memory_limit_bytes") = py::none())
      .def(
          "add_optimizer",
          [](TrainingSession &session, const std::string &path) {
            py::gil_scoped_release release;
            check(session.addOptimizer(path));
          },
          py::arg("optimizer_model"))
      .def(
          "train_step",
          [](TrainingSession &session, const py::sequence &inputs) {
            return runStep(inputs, "training input",
                           [&](llvm::ArrayRef<HostTensor> tensors) {
                             return session.trainStep(tensors);
                           });
          },
          py::arg("inputs"))
      .def(
          "train_step_and_update",
          [](TrainingSession &session, const py::sequence &inputs) {
            return runStep(inputs, "training input",
                           [&](llvm::ArrayRef<HostTensor> tensors) {
                             return session.trainStepAndUpdate(tensors);
                           });
          },
          py::arg("inputs"))
      .def(
          "eval_step",
          [](TrainingSession &session, const py::sequence &inputs) {
            return runStep(inputs, "eval input",
                           [&](llvm::ArrayRef<HostTensor> tensors) {
                             return session.evalStep(tensors);
                           });
          },
          py::arg("inputs"))
      .def("lazy_reset_grad", &TrainingSession::lazyResetGrad)
      .def("optimizer_step",
           [](TrainingSession &session) {
             py::gil_scoped_release release;
             check(session.optimizerStep());
           })
      .def("get_learning_rate", &TrainingSession::getLearningRate)
      .def("set_learning_rate", &TrainingSession::setLearningRate,
           py::arg("learning_rate"))
      .def(
          "register_linear_lr_scheduler",
          [](TrainingSession &session, int64_t warmup, int64_t total,
             float initial) {
            check(session.registerLinearLRScheduler(warmup, total, initial));
          },
          py::arg("warmup_step_count"), py::arg("total_step_count"),
          py::arg("initial_lr"))
      .def("scheduler_step",
           [](TrainingSession &session) { check(session.schedulerStep()); })
      .def("step_count", &TrainingSession::getStepCount)
      .def("input_names", &TrainingSession::inputNames,
           py::arg("training") = true)
      .def("output_names", &TrainingSession::outputNames,
           py::arg("training") = true)
      .def("parameter_names", &TrainingSession::parameterNames,
           py::arg("trainable_only") = false)
      .def(
          "get_parameter",
          [](const TrainingSession &session, const std::string &name) {
            return arrayFromTensor(unwrap(session.getParameter(name)));
          },
          py::arg("name"))
      .def(
          "set_parameter",
          [](TrainingSession &session, const std::string &name,
             const py::handle &value) {
            check(session.setParameter(
                name, tensorFromArray(value, "parameter '" + name + "'")));
          },
          py::arg("name"), py::arg("value"))
      .def(
          "get_gradient",
          [](const TrainingSession &session, const std::string &name) {
            return arrayFromTensor(unwrap(session.getGradient(name)));
          },
          py::arg("name"))
      .def("get_parameters_size", &TrainingSession::getParametersSize,
           py::arg("trainable_only") = true)
      .def(
          "get_contiguous_parameters",
          [](const TrainingSession &session, bool trainableOnly) {
            return arrayFromTensor(
                unwrap(session.getContiguousParameters(trainableOnly)));
          },
          py::arg("trainable_only") = false)
      .def(
          "copy_buffer_to_parameters",
          [](TrainingSession &session, const py::handle &buffer,
             bool trainableOnly) {
            check(session.copyBufferToParameters(
                tensorFromArray(buffer, "parameter buffer", DType::F32),
                trainableOnly));
          },
          py::arg("buffer"), py::arg("trainable_only") = true)
      .def(
          "checkpoint_state",
          [](TrainingSession &session) { return session.getCheckpointState(); })
      .def(
          "save_checkpoint",
          [](const TrainingSession &session, const std::string &path,
             bool includeOptimizerState) {
            py::gil_scoped_release release;
            check(session.saveCheckpoint(path, includeOptimizerState));
          },
          py::arg("path"), py::arg("include_optimizer_state") = false)
      .def(
          "load_checkpoint",
          [](TrainingSession &session, const std::string &path) {
            py::gil_scoped_release release;
            check(session.loadCheckpoint(path));
          },
          py::arg("path"))
      .def(
          "export_model_for_inferencing",
          [](const TrainingSession &session, const std::string &path,
             const std::vector<std::string> &outputs) {
            py::gil_scoped_release release;
            check(session.exportModelForInferencing(path, outputs));
          },
          py::arg("path"), py::arg("graph_output_names"))
      .def("memory",
           [](const TrainingSession &session) {
             return memoryToPython(unwrap(session.getMemory()));
           })
      .def("is_compiled", &TrainingSession::isCompiled);
}
