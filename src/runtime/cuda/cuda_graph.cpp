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
  // A capture ends joined even when a failed op left side work open.
  if (on_side()) end_side_work();
  join_side_work();
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

void CudaBackend::begin_side_work() {
  DI_CHECK(!on_side(), "side work does not nest");
  join_side_work();
  DI_CUDA_CHECK(cudaEventRecord(fork_event_, main_stream_));
  DI_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_event_, 0));
  stream_.switch_to(side_stream_);
}

void CudaBackend::end_side_work() {
  DI_CHECK(on_side(), "end_side_work without begin_side_work");
  stream_.switch_to(main_stream_);
  side_unjoined_ = true;
  DI_CUDA_CHECK(cudaEventRecord(join_event_, side_stream_));
}

void CudaBackend::join_side_work() {
  if (!side_unjoined_) return;
  side_unjoined_ = false;
  DI_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, join_event_, 0));
}

void* CudaBackend::take_workspace(size_t size_bytes) {
  // Workspace is reused in stream order on the main stream; side work would race with it.
  DI_CHECK(!on_side(), "side work may not take op workspace");
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
