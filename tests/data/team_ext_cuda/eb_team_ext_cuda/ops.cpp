// add_one(x): x + 1 by the CUDA kernel of kernel.cu for CUDA tensors, by ATen on the CPU.
#include <torch/extension.h>

#include <cstdint>

void add_one_launch(const float* in, float* out, int64_t n);

torch::Tensor add_one(const torch::Tensor& x) {
  if (!x.is_cuda()) return x + 1;
  auto in = x.contiguous().to(torch::kFloat);
  auto out = torch::empty_like(in);
  add_one_launch(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one, "x + 1"); }
