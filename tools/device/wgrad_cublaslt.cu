// Weight gradients through cuBLASLt as Transformer Engine calls it (issue 17, fourth call):
// D (m x n, column-major) = A^T B (+ C) with A k x m and B k x n ("TN", the layout cuBLASLt
// needs for FP8), fp32 compute, a 32 MiB workspace and the first heuristic's algorithm
// (TE's cublaslt_gemm.cu). Per shape: BF16 or FP8 (E4M3) inputs; output BF16 (beta 0) or
// accumulated into an fp32 C = D (beta 1, Megatron's fused main_grad accumulation).
// Build and run on the GPU machine: nvcc -O2 -arch=sm_90 wgrad_cublaslt.cu -lcublasLt -o w && ./w
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdio>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("cuda error %s at %d\n", cudaGetErrorString(e), __LINE__); return -1.0; } } while (0)
#define LK(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { printf("# cublasLt status %d at line %d\n", (int)s, __LINE__); return -1.0; } } while (0)

static cublasLtHandle_t handle;
static void* workspace;
static const size_t WORKSPACE = 32u << 20;

// Mean time of one GEMM in microseconds, or -1 when cuBLASLt refuses it.
static double time_gemm(int m, int n, int k, cudaDataType_t in, cudaDataType_t out, float beta,
                        void* a, void* b, void* d) {
  cublasLtMatmulDesc_t op;
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, lc;
  LK(cublasLtMatrixLayoutCreate(&la, in, k, m, k));
  LK(cublasLtMatrixLayoutCreate(&lb, in, k, n, k));
  LK(cublasLtMatrixLayoutCreate(&lc, out, m, n, m));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = WORKSPACE;
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, 1, &h, &found));
  if (found == 0) { printf("# no algorithm\n"); return -1.0; }
  float alpha = 1.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; i++)
    LK(cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, lc, d, lc, &h.algo, workspace, WORKSPACE, 0));
  const int reps = 20;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; i++)
    LK(cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, lc, d, lc, &h.algo, workspace, WORKSPACE, 0));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return ms * 1000.0 / reps;
}

int main() {
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) { printf("no cublasLt\n"); return 1; }
  cudaMalloc(&workspace, WORKSPACE);
  struct Shape { const char* name; int m, n, k; };
  // m x n is the weight (in x out), k the tokens.
  Shape shapes[] = {
    {"gpt3-tp4-fc1", 12288, 12288, 2048},
    {"gpt3-tp4-proj", 3072, 12288, 2048},
    {"llama3-405b-tp8-fc1", 16384, 6656, 8192},
    {"llama3-8b-fc1", 4096, 28672, 8192},
    {"dsv3-expert-fc1-4096", 7168, 4096, 4096},
    {"dsv3-expert-fc1-512", 7168, 4096, 512},
    {"dsv3-expert-fc1-128", 7168, 4096, 128},
  };
  printf("pass,shape,m,n,k,inputs,output,us,tflops\n");
  // Pass 0 runs at whatever clock the GPU starts at; pass 1, after it, under sustained load.
  for (int pass = 0; pass < 2; pass++)
  for (const Shape& s : shapes) {
    size_t in_elems = (size_t)s.k * (s.m > s.n ? s.m : s.n);
    void *a, *b, *d;
    if (cudaMalloc(&a, in_elems * 2) != cudaSuccess || cudaMalloc(&b, in_elems * 2) != cudaSuccess ||
        cudaMalloc(&d, (size_t)s.m * s.n * 4) != cudaSuccess) { printf("oom\n"); return 1; }
    cudaMemset(a, 0, in_elems * 2);
    cudaMemset(b, 0, in_elems * 2);
    cudaMemset(d, 0, (size_t)s.m * s.n * 4);
    struct Variant { const char* in_name; cudaDataType_t in; const char* out_name; cudaDataType_t out; float beta; };
    Variant vs[] = {
      {"bf16", CUDA_R_16BF, "bf16 (beta 0)", CUDA_R_16BF, 0.0f},
      {"bf16", CUDA_R_16BF, "fp32 accumulate (beta 1)", CUDA_R_32F, 1.0f},
      {"fp8e4m3", CUDA_R_8F_E4M3, "bf16 (beta 0)", CUDA_R_16BF, 0.0f},
      {"fp8e4m3", CUDA_R_8F_E4M3, "fp32 accumulate (beta 1)", CUDA_R_32F, 1.0f},
      {"fp8e4m3", CUDA_R_8F_E4M3, "fp32 (beta 0)", CUDA_R_32F, 0.0f},
    };
    for (const Variant& v : vs) {
      double us = time_gemm(s.m, s.n, s.k, v.in, v.out, v.beta, a, b, d);
      double tf = us > 0 ? 2.0 * s.m * s.n * (double)s.k / (us * 1e6) : 0.0;
      printf("%d,%s,%d,%d,%d,%s,%s,%.2f,%.1f\n", pass, s.name, s.m, s.n, s.k, v.in_name, v.out_name, us, tf);
      fflush(stdout);
    }
    cudaFree(a); cudaFree(b); cudaFree(d);
  }
  return 0;
}
