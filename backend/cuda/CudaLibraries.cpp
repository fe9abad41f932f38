//===- CudaLibraries.cpp - cuBLASLt and cuDNN opened with dlopen ----------===//
//
// Defines every cuBLASLt and cuDNN function the CUDA backend calls, under
// the library's own name and with its own signature, as a forwarder to the
// real function looked up in the library the first time it is called (the
// way TensorFlow loads its CUDA libraries lazily). The compiler checks each
// definition against the declaration in cublasLt.h / cudnn.h: a signature
// that drifted from the headers is a conflicting C declaration and does not
// compile. Where the library cannot be opened the forwarders return the
// library's NOT_INITIALIZED status, and loadCublasLt / loadCudnn say why;
// the backend asks those before it relies on either library.
//
// A function used by the backend but missing here is an undefined symbol at
// link time (nothing links libcublasLt or libcudnn), so the list cannot
// silently fall behind the call sites.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaLibraries.h"

#include "llvm/Support/FormatVariadic.h"

#include <cublasLt.h>
#ifdef GMOPT_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <dlfcn.h>

#include <cstdlib>

#include <mutex>

using namespace gmopt;

namespace {

/// One shared library opened at most once per process, on first use.
class LazyLibrary {
public:
  explicit LazyLibrary(std::string fileName) : fileName(std::move(fileName)) {}

  /// Opens the library (once); the empty string on success, else why not.
  const std::string &open() {
    std::call_once(opened, [&] {
      if (fileName.empty()) {
        failure = "gmopt was built without this library's headers";
        return;
      }
      handle = dlopen(fileName.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char *reason = dlerror();
        failure = reason ? reason : "dlopen failed";
      }
    });
    return failure;
  }

  /// The address of \p symbol, or null when the library or the symbol is
  /// missing.
  void *lookup(const char *symbol) {
    if (!open().empty())
      return nullptr;
    return dlsym(handle, symbol);
  }

  const std::string &getFileName() const { return fileName; }

private:
  std::string fileName;
  std::once_flag opened;
  void *handle = nullptr;
  std::string failure;
};

LazyLibrary &cublasLtLibrary() {
  static LazyLibrary library(cuda::getCublasLtLibraryName());
  return library;
}

#ifdef GMOPT_HAVE_CUDNN
LazyLibrary &cudnnLibrary() {
  static LazyLibrary library(cuda::getCudnnLibraryName());
  return library;
}
#endif

/// \p variable's value where it is set and not empty, else \p fallback.
std::string fromEnvironment(const char *variable, std::string fallback) {
  const char *value = std::getenv(variable);
  return value && *value ? std::string(value) : fallback;
}

template <typename Status> Status notInitialized();
template <> cublasStatus_t notInitialized<cublasStatus_t>() {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}
#ifdef GMOPT_HAVE_CUDNN
template <> cudnnStatus_t notInitialized<cudnnStatus_t>() {
  return CUDNN_STATUS_NOT_INITIALIZED;
}
#endif

llvm::Error loadFailure(const LazyLibrary &library, const llvm::Twine &what,
                        const llvm::Twine &reason) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "cannot load " + what + " (" +
                                     library.getFileName() + "): " + reason);
}

} // namespace

std::string cuda::getCublasLtLibraryName() {
  return fromEnvironment(
      "GMOPT_CUBLASLT_LIBRARY",
      llvm::formatv("libcublasLt.so.{0}", CUBLAS_VER_MAJOR).str());
}

std::string cuda::getCudnnLibraryName() {
#ifdef GMOPT_HAVE_CUDNN
  return fromEnvironment("GMOPT_CUDNN_LIBRARY",
                         llvm::formatv("libcudnn.so.{0}", CUDNN_MAJOR).str());
#else
  return std::string();
#endif
}

llvm::Error cuda::loadCublasLt() {
  LazyLibrary &library = cublasLtLibrary();
  if (const std::string &failure = library.open(); !failure.empty())
    return loadFailure(library, "cuBLASLt", failure);
  return llvm::Error::success();
}

llvm::Error cuda::loadCudnn() {
  auto version = getCudnnVersion();
  if (!version)
    return version.takeError();
  return llvm::Error::success();
}

llvm::Expected<size_t> cuda::getCublasLtVersion() {
  if (llvm::Error err = loadCublasLt())
    return err;
  return cublasLtGetVersion();
}

llvm::Expected<size_t> cuda::getCudnnVersion() {
#ifdef GMOPT_HAVE_CUDNN
  LazyLibrary &library = cudnnLibrary();
  if (const std::string &failure = library.open(); !failure.empty())
    return loadFailure(library, "cuDNN", failure);
  // The soname pins the major version; a library renamed by hand does not
  // keep that promise, and cuDNN's ABI changes between major versions.
  using GetVersion = size_t (*)();
  auto getVersion =
      reinterpret_cast<GetVersion>(library.lookup("cudnnGetVersion"));
  if (!getVersion)
    return loadFailure(library, "cuDNN", "it has no cudnnGetVersion");
  size_t version = getVersion();
  if (version / 10000 != CUDNN_MAJOR)
    return loadFailure(library, "cuDNN",
                       llvm::formatv("version {0} found, gmopt was built "
                                     "against major version {1}",
                                     version, CUDNN_MAJOR));
  return version;
#else
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "gmopt was built without cuDNN (no cudnn.h "
                                 "at configure time)");
#endif
}

/// The body of every forwarder: look the real function up once, return the
/// library's NOT_INITIALIZED status where it cannot be had, else call it.
#define GMOPT_FORWARD(LIBRARY, NAME, ...)                                      \
  static const auto real =                                                     \
      reinterpret_cast<decltype(&NAME)>(LIBRARY().lookup(#NAME));              \
  if (!real)                                                                   \
    return notInitialized<decltype(real(__VA_ARGS__))>();                      \
  return real(__VA_ARGS__)

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

size_t cublasLtGetVersion() {
  using GetVersion = size_t (*)();
  static const auto real = reinterpret_cast<GetVersion>(
      cublasLtLibrary().lookup("cublasLtGetVersion"));
  return real ? real() : 0;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtCreate, lightHandle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtDestroy, lightHandle);
}

cublasStatus_t
cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
               const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
               const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
               const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
               cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
               void *workspace, size_t workspaceSizeInBytes,
               cudaStream_t stream) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmul, lightHandle, computeDesc,
                alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulAlgoGetHeuristic, lightHandle,
                operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulDescCreate, matmulDesc,
                computeType, scaleType);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulDescDestroy, matmulDesc);
}

cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                               cublasLtMatmulDescAttributes_t attr,
                               const void *buf, size_t sizeInBytes) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulDescSetAttribute, matmulDesc,
                attr, buf, sizeInBytes);
}

cublasStatus_t
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr,
                                     const void *buf, size_t sizeInBytes) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatmulPreferenceSetAttribute, pref,
                attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatrixLayoutCreate, matLayout, type,
                rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatrixLayoutDestroy, matLayout);
}

cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                 cublasLtMatrixLayoutAttribute_t attr,
                                 const void *buf, size_t sizeInBytes) {
  GMOPT_FORWARD(cublasLtLibrary, cublasLtMatrixLayoutSetAttribute, matLayout,
                attr, buf, sizeInBytes);
}

#ifdef GMOPT_HAVE_CUDNN

//===----------------------------------------------------------------------===//
// cuDNN
//===----------------------------------------------------------------------===//

const char *cudnnGetErrorString(cudnnStatus_t status) {
  using GetErrorString = const char *(*)(cudnnStatus_t);
  static const auto real = reinterpret_cast<GetErrorString>(
      cudnnLibrary().lookup("cudnnGetErrorString"));
  if (!real)
    return "cuDNN could not be loaded";
  return real(status);
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
                             const cudnnTensorDescriptor_t aDesc, const void *A,
                             const void *beta,
                             const cudnnTensorDescriptor_t cDesc, void *C) {
  GMOPT_FORWARD(cudnnLibrary, cudnnAddTensor, handle, alpha, aDesc, A, beta,
                cDesc, C);
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alphaDataDiff,
    const void *betaDataDiff, const void *alphaParamDiff,
    const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc,
    const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnTensorDescriptor_t dxDesc, void *dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale,
    void *dBnScaleResult, void *dBnBiasResult, double epsilon,
    const void *savedMean, const void *savedInvVariance) {
  GMOPT_FORWARD(cudnnLibrary, cudnnBatchNormalizationBackward, handle, mode,
                alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                xDesc, x, dyDesc, dy, dxDesc, dx, dBnScaleBiasDesc, bnScale,
                dBnScaleResult, dBnBiasResult, epsilon, savedMean,
                savedInvVariance);
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha,
    const void *beta, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t yDesc, void *y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, const void *estimatedMean,
    const void *estimatedVariance, double epsilon) {
  GMOPT_FORWARD(cudnnLibrary, cudnnBatchNormalizationForwardInference, handle,
                mode, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc,
                bnScale, bnBias, estimatedMean, estimatedVariance, epsilon);
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha,
    const void *beta, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t yDesc, void *y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, double exponentialAverageFactor,
    void *resultRunningMean, void *resultRunningVariance, double epsilon,
    void *resultSaveMean, void *resultSaveInvVariance) {
  GMOPT_FORWARD(cudnnLibrary, cudnnBatchNormalizationForwardTraining, handle,
                mode, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc,
                bnScale, bnBias, exponentialAverageFactor, resultRunningMean,
                resultRunningVariance, epsilon, resultSaveMean,
                resultSaveInvVariance);
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle,
                                           const void *alpha,
                                           const cudnnTensorDescriptor_t dyDesc,
                                           const void *dy, const void *beta,
                                           const cudnnTensorDescriptor_t dbDesc,
                                           void *db) {
  GMOPT_FORWARD(cudnnLibrary, cudnnConvolutionBackwardBias, handle, alpha,
                dyDesc, dy, beta, dbDesc, db);
}

cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha,
    const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
    size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
  GMOPT_FORWARD(cudnnLibrary, cudnnConvolutionBackwardData, handle, alpha,
                wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                workSpaceSizeInBytes, beta, dxDesc, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
    size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw) {
  GMOPT_FORWARD(cudnnLibrary, cudnnConvolutionBackwardFilter, handle, alpha,
                xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                workSpaceSizeInBytes, beta, dwDesc, dw);
}

cudnnStatus_t
cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                        const cudnnTensorDescriptor_t xDesc, const void *x,
                        const cudnnFilterDescriptor_t wDesc, const void *w,
                        const cudnnConvolutionDescriptor_t convDesc,
                        cudnnConvolutionFwdAlgo_t algo, void *workSpace,
                        size_t workSpaceSizeInBytes, const void *beta,
                        const cudnnTensorDescriptor_t yDesc, void *y) {
  GMOPT_FORWARD(cudnnLibrary, cudnnConvolutionForward, handle, alpha, xDesc, x,
                wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
                yDesc, y);
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  GMOPT_FORWARD(cudnnLibrary, cudnnCreate, handle);
}

cudnnStatus_t
cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnCreateConvolutionDescriptor, convDesc);
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnCreateFilterDescriptor, filterDesc);
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnCreateTensorDescriptor, tensorDesc);
}

cudnnStatus_t
cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
                              const cudnnTensorDescriptor_t xDesc,
                              cudnnBatchNormMode_t mode) {
  GMOPT_FORWARD(cudnnLibrary, cudnnDeriveBNTensorDescriptor, derivedBnDesc,
                xDesc, mode);
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  GMOPT_FORWARD(cudnnLibrary, cudnnDestroy, handle);
}

cudnnStatus_t
cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnDestroyConvolutionDescriptor, convDesc);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnDestroyFilterDescriptor, filterDesc);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  GMOPT_FORWARD(cudnnLibrary, cudnnDestroyTensorDescriptor, tensorDesc);
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t inputTensorDesc,
    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolution2dForwardOutputDim, convDesc,
                inputTensorDesc, filterDesc, n, c, h, w);
}

cudnnStatus_t
cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle,
                                                 int *count) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
                handle, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionBackwardDataAlgorithm_v7,
                handle, filterDesc, diffDesc, convDesc, gradDesc,
                requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
    const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo,
    size_t *sizeInBytes) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionBackwardDataWorkspaceSize,
                handle, wDesc, dyDesc, convDesc, dxDesc, algo, sizeInBytes);
}

cudnnStatus_t
cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle,
                                                   int *count) {
  GMOPT_FORWARD(cudnnLibrary,
                cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, handle,
                count);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                handle, srcDesc, diffDesc, convDesc, gradDesc,
                requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionBackwardFilterWorkspaceSize,
                handle, xDesc, dyDesc, convDesc, gradDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle,
                                                          int *count) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionForwardAlgorithmMaxCount,
                handle, count);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionForwardAlgorithm_v7, handle,
                srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount,
                returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo,
    size_t *sizeInBytes) {
  GMOPT_FORWARD(cudnnLibrary, cudnnGetConvolutionForwardWorkspaceSize, handle,
                xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(
    cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v,
    int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
    cudnnDataType_t computeType) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetConvolution2dDescriptor, convDesc, pad_h,
                pad_w, u, v, dilation_h, dilation_w, mode, computeType);
}

cudnnStatus_t
cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                              int groupCount) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetConvolutionGroupCount, convDesc,
                groupCount);
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetConvolutionMathType, convDesc, mathType);
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k,
                                         int c, int h, int w) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetFilter4dDescriptor, filterDesc, dataType,
                format, k, c, h, w);
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetStream, handle, streamId);
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c,
                                         int h, int w) {
  GMOPT_FORWARD(cudnnLibrary, cudnnSetTensor4dDescriptor, tensorDesc, format,
                dataType, n, c, h, w);
}

#endif // GMOPT_HAVE_CUDNN
