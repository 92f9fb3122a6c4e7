// Placeholder of the simulated NCCL: every call reports ncclInvalidUsage.
#include <nccl.h>

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  (void)uniqueId;
  return ncclInvalidUsage;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  (void)comm; (void)nranks; (void)commId; (void)rank;
  return ncclInvalidUsage;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  (void)comm; (void)ndev; (void)devlist;
  return ncclInvalidUsage;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  (void)comm;
  return ncclInvalidUsage;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config) {
  (void)comm; (void)color; (void)key; (void)newcomm; (void)config;
  return ncclInvalidUsage;
}

const char* ncclGetErrorString(ncclResult_t result) {
  (void)result;
  return "not simulated yet";
}

const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "not simulated yet";
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)recvbuff; (void)count; (void)datatype; (void)root; (void)comm; (void)stream;
  return ncclInvalidUsage;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)recvbuff; (void)count; (void)datatype; (void)op; (void)comm; (void)stream;
  return ncclInvalidUsage;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)recvbuff; (void)sendcount; (void)datatype; (void)comm; (void)stream;
  return ncclInvalidUsage;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)count; (void)datatype; (void)peer; (void)comm; (void)stream;
  return ncclInvalidUsage;
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  (void)recvbuff; (void)count; (void)datatype; (void)peer; (void)comm; (void)stream;
  return ncclInvalidUsage;
}

ncclResult_t ncclGroupStart() {
  
  return ncclInvalidUsage;
}

ncclResult_t ncclGroupEnd() {
  
  return ncclInvalidUsage;
}

}  // extern "C"
