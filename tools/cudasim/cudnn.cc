// Placeholder of the simulated cuDNN: every call reports CUDNN_STATUS_NOT_SUPPORTED.
#include <cudnn.h>

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  (void)handle;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  (void)handle;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  (void)handle; (void)streamId;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

const char * cudnnGetErrorString(cudnnStatus_t status) {
  (void)status;
  return "not simulated yet";
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
  (void)message; (void)max_size;
  if (max_size > 0) message[0] = 0;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc) {
  (void)tensorDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  (void)tensorDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType, int n, int c, int h, int w) {
  (void)tensorDesc; (void)format; (void)dataType; (void)n; (void)c; (void)h; (void)w;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc) {
  (void)filterDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  (void)filterDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format, int k, int c, int h, int w) {
  (void)filterDesc; (void)dataType; (void)format; (void)k; (void)c; (void)h; (void)w;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc) {
  (void)convDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  (void)convDesc;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType) {
  (void)convDesc; (void)pad_h; (void)pad_w; (void)u; (void)v; (void)dilation_h; (void)dilation_w; (void)mode; (void)computeType;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount) {
  (void)convDesc; (void)groupCount;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType) {
  (void)convDesc; (void)mathType;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc, const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w) {
  (void)convDesc; (void)inputTensorDesc; (void)filterDesc; (void)n; (void)c; (void)h; (void)w;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
  (void)handle; (void)xDesc; (void)wDesc; (void)convDesc; (void)yDesc; (void)algo; (void)sizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
  (void)handle; (void)wDesc; (void)dyDesc; (void)convDesc; (void)dxDesc; (void)algo; (void)sizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes) {
  (void)handle; (void)xDesc; (void)dyDesc; (void)convDesc; (void)gradDesc; (void)algo; (void)sizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes) {
  (void)handle; (void)xDesc; (void)x; (void)wDesc; (void)w; (void)convDesc; (void)yDesc; (void)y; (void)requestedAlgoCount; (void)returnedAlgoCount; (void)perfResults; (void)workSpace; (void)workSpaceSizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes) {
  (void)handle; (void)wDesc; (void)w; (void)dyDesc; (void)dy; (void)convDesc; (void)dxDesc; (void)dx; (void)requestedAlgoCount; (void)returnedAlgoCount; (void)perfResults; (void)workSpace; (void)workSpaceSizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *y, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes) {
  (void)handle; (void)xDesc; (void)x; (void)dyDesc; (void)y; (void)convDesc; (void)dwDesc; (void)dw; (void)requestedAlgoCount; (void)returnedAlgoCount; (void)perfResults; (void)workSpace; (void)workSpaceSizeInBytes;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t yDesc, void *y) {
  (void)handle; (void)alpha; (void)xDesc; (void)x; (void)wDesc; (void)w; (void)convDesc; (void)algo; (void)workSpace; (void)workSpaceSizeInBytes; (void)beta; (void)yDesc; (void)y;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx) {
  (void)handle; (void)alpha; (void)wDesc; (void)w; (void)dyDesc; (void)dy; (void)convDesc; (void)algo; (void)workSpace; (void)workSpaceSizeInBytes; (void)beta; (void)dxDesc; (void)dx;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw) {
  (void)handle; (void)alpha; (void)xDesc; (void)x; (void)dyDesc; (void)dy; (void)convDesc; (void)algo; (void)workSpace; (void)workSpaceSizeInBytes; (void)beta; (void)dwDesc; (void)dw;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t aDesc, const void *A, const void *beta, const cudnnTensorDescriptor_t cDesc, void *C) {
  (void)handle; (void)alpha; (void)aDesc; (void)A; (void)beta; (void)cDesc; (void)C;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
