// CudaBackend's CUDA graphs: stream capture of a forward step, instantiation, replay, and the
// shared workspace blocks a graph keeps for as long as it lives.
#include <memory>
#include <utility>

#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::vector<std::shared_ptr<void>> blocks, cudaStream_t stream)
      : exec_(exec), blocks_(std::move(blocks)), stream_(stream) {}
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() override {
    // A replay may still run; its workspaces go back to the allocator only after it ends.
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
    blocks_.clear();
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
  std::vector<std::shared_ptr<void>> blocks_;
  cudaStream_t stream_;
};

}  // namespace

void CudaBackend::begin_capture() {
  DI_CHECK(graphs_ && !capturing_, "begin_capture needs graphs on and no capture in progress");
  // Relaxed: a cudaMalloc by the allocator (a workspace bigger than any cached block) is allowed;
  // it is not recorded and the block then belongs to the graph.
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream_.for_op(), cudaStreamCaptureModeRelaxed));
  capturing_ = true;
}

std::unique_ptr<CapturedGraph> CudaBackend::end_capture() {
  DI_CHECK(capturing_, "end_capture without begin_capture");
  capturing_ = false;
  std::vector<std::shared_ptr<void>> blocks = std::move(capture_blocks_);
  capture_blocks_.clear();
  const auto give_back = [&] { blocks.clear(); };
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_.for_op(), &graph);
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
  return std::make_unique<CudaGraph>(exec, std::move(blocks), stream_.for_op());
}

void CudaBackend::replay(const CapturedGraph& graph) {
  const auto* cuda_graph = dynamic_cast<const CudaGraph*>(&graph);
  DI_CHECK(cuda_graph != nullptr, "replay of a graph another backend captured");
  DI_CUDA_CHECK(cudaGraphLaunch(cuda_graph->exec(), stream_.for_op()));
}

void* CudaBackend::take_workspace(size_t size_bytes) {
  if (!capturing_) return allocator_.allocate(size_bytes);
  if (!capture_workspace_ || capture_workspace_bytes_ < size_bytes) {
    capture_workspace_ = std::shared_ptr<void>(allocator_.allocate(size_bytes), [this](void* p) { allocator_.deallocate(p); });
    capture_workspace_bytes_ = size_bytes;
  }
  if (capture_blocks_.empty() || capture_blocks_.back() != capture_workspace_) capture_blocks_.push_back(capture_workspace_);
  return capture_workspace_.get();
}

void CudaBackend::give_back_workspace(void* p) {
  if (!capturing_) allocator_.deallocate(p);
}

}  // namespace deepinfer
