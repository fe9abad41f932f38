//===- BenchSupport.h - Helpers shared by the C++ benchmarks ----*- C++ -*-===//
//
// What the benchmarks in bench/ have in common: the wall-clock timing of a
// phase, and the skeleton of the synthetic ONNX models they build (a model
// importing ai.onnx 17, optionally com.microsoft 1, and f32 value infos of a
// static shape). Header only: each benchmark is a single executable.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BENCH_BENCHSUPPORT_H
#define GMOPT_BENCH_BENCHSUPPORT_H

#include "onnx/onnx_pb.h"

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace gmopt {
namespace bench {

/// Seconds of wall-clock time since \p start.
inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// An empty model named \p graphName (IR version 8, ai.onnx opset 17, and
/// com.microsoft opset 1 when \p withMicrosoft).
inline onnx::ModelProto makeBenchModel(const std::string &graphName,
                                       bool withMicrosoft) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("gmopt-bench");
  auto addOpset = [&](const char *domain, int64_t version) {
    onnx::OperatorSetIdProto *opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  };
  addOpset("", 17);
  if (withMicrosoft)
    addOpset("com.microsoft", 1);
  model.mutable_graph()->set_name(graphName);
  return model;
}

/// Names \p info \p name and types it f32 of \p shape.
inline void setF32Type(onnx::ValueInfoProto *info, const std::string &name,
                       std::initializer_list<int64_t> shape) {
  info->set_name(name);
  auto *tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t extent : shape)
    tensor->mutable_shape()->add_dim()->set_dim_value(extent);
}

} // namespace bench
} // namespace gmopt

#endif // GMOPT_BENCH_BENCHSUPPORT_H
