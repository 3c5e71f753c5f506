// CudaBackend's CUDA graphs: stream capture of a forward step, instantiation, replay, and the
// workspace blocks a graph keeps for as long as it lives.
#include <utility>

#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::vector<void*> blocks, DeviceAllocator& allocator, cudaStream_t stream)
      : exec_(exec), blocks_(std::move(blocks)), allocator_(allocator), stream_(stream) {}
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() override {
    // A replay may still run; its workspaces go back to the allocator only after it ends.
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
    for (void* p : blocks_) allocator_.deallocate(p);
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
  std::vector<void*> blocks_;
  DeviceAllocator& allocator_;
  cudaStream_t stream_;
};

}  // namespace

void CudaBackend::begin_capture() {
  DI_CHECK(graphs_ && !capturing_, "begin_capture needs graphs on and no capture in progress");
  // Relaxed: a cudaMalloc by the allocator (a workspace bigger than any cached block) is allowed;
  // it is not recorded and the block then belongs to the graph.
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  gemm_.forget_staged();
}

std::unique_ptr<CapturedGraph> CudaBackend::end_capture() {
  DI_CHECK(capturing_, "end_capture without begin_capture");
  capturing_ = false;
  gemm_.forget_staged();
  std::vector<void*> blocks = std::move(capture_blocks_);
  capture_blocks_.clear();
  capture_block_bytes_ = 0;
  const auto give_back = [&] {
    for (void* p : blocks) allocator_.deallocate(p);
  };
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess) {
    give_back();
    (void)cudaGetLastError();
    kc::throw_cuda_error(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    give_back();
    kc::throw_cuda_error(made, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  return std::make_unique<CudaGraph>(exec, std::move(blocks), allocator_, stream_);
}

void CudaBackend::replay(const CapturedGraph& graph) {
  const auto* cuda_graph = dynamic_cast<const CudaGraph*>(&graph);
  DI_CHECK(cuda_graph != nullptr, "replay of a graph another backend captured");
  gemm_.forget_staged();
  DI_CUDA_CHECK(cudaGraphLaunch(cuda_graph->exec(), stream_));
}

void* CudaBackend::take_workspace(size_t size_bytes) {
  if (!capturing_) return allocator_.allocate(size_bytes);
  // One block serves every op of the capture: the graph runs them one after another.
  if (capture_blocks_.empty() || capture_block_bytes_ < size_bytes) {
    capture_blocks_.push_back(allocator_.allocate(size_bytes));
    capture_block_bytes_ = size_bytes;
  }
  return capture_blocks_.back();
}

void CudaBackend::give_back_workspace(void* p) {
  if (!capturing_) allocator_.deallocate(p);
}

}  // namespace deepinfer
