// add_one(x) = x + 1, through ATen: the extension links libtorch/libc10 of the image's torch.
#include <torch/extension.h>

torch::Tensor add_one(const torch::Tensor& x) { return x + 1; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one, "x + 1"); }
