// What one kernel launch costs the host from C++ (cudaLaunchKernel), and one CUDA graph
// launch of 100 kernels: the floor under hosts.toml's launch_us. Issue 17.
// Build and run on the GPU machine: nvcc -O2 -arch=sm_90 launch.cu -o launch && ./launch
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>

__global__ void empty_kernel(int) {}

using Clock = std::chrono::steady_clock;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  cudaFree(0);
  cudaStream_t s;
  cudaStreamCreate(&s);
  for (int i = 0; i < 2000; i++) empty_kernel<<<1, 32, 0, s>>>(i);
  cudaStreamSynchronize(s);
  // Batches of 256 launches stay below the launch queue's depth, so the host never waits.
  const int batch = 256;
  std::vector<double> per_launch;
  for (int rep = 0; rep < 200; rep++) {
    auto t0 = Clock::now();
    for (int i = 0; i < batch; i++) empty_kernel<<<1, 32, 0, s>>>(i);
    auto t1 = Clock::now();
    per_launch.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
    cudaStreamSynchronize(s);
  }
  // The GPU's time per empty kernel back to back.
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < batch; i++) empty_kernel<<<1, 32, 0, s>>>(i);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float gpu_ms = 0;
  cudaEventElapsedTime(&gpu_ms, a, b);
  // One graph of 100 kernels.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < 100; i++) empty_kernel<<<1, 32, 0, s>>>(i);
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  for (int i = 0; i < 20; i++) cudaGraphLaunch(exec, s);
  cudaStreamSynchronize(s);
  std::vector<double> per_graph;
  for (int rep = 0; rep < 50; rep++) {
    auto t0 = Clock::now();
    for (int i = 0; i < 8; i++) cudaGraphLaunch(exec, s);
    auto t1 = Clock::now();
    per_graph.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 8);
    cudaStreamSynchronize(s);
  }
  cudaEventRecord(a, s);
  for (int i = 0; i < 8; i++) cudaGraphLaunch(exec, s);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float graph_gpu_ms = 0;
  cudaEventElapsedTime(&graph_gpu_ms, a, b);
  printf("what,value,unit\n");
  printf("cudaLaunchKernel host time per launch (median of 200 batches of %d),%.3f,us\n", batch,
         median(per_launch));
  printf("empty kernel GPU time back to back,%.3f,us\n", gpu_ms * 1000.0 / batch);
  printf("cudaGraphLaunch host time per graph of 100 kernels (median of 50 x 8),%.3f,us\n",
         median(per_graph));
  printf("graph of 100 empty kernels GPU time,%.3f,us\n", graph_gpu_ms * 1000.0 / 8);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
