"""A small DeepSpeed training script, as a team writes one (issue 40): init_distributed, then
deepspeed.initialize with ZeRO stage 2 and CPU Adam (the optimizer offloaded to the CPU:
DeepSpeedCPUAdam, the cpu_adam op), three steps. Run under torchrun in the image; prints one
line TRAINED <json> from rank 0."""
import json

import deepspeed
import torch
import torch.distributed as dist

deepspeed.init_distributed()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
config = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
losses = []
for step in range(3):
    g = torch.Generator().manual_seed(100 + step + dist.get_rank())
    x, y = torch.randn(4, 32, generator=g), torch.randn(4, 8, generator=g)
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
    losses.append(round(loss.item(), 6))
inner = getattr(optimizer, "optimizer", optimizer)
if dist.get_rank() == 0:
    print("TRAINED " + json.dumps({"steps": len(losses), "losses": losses,
                                   "optimizer": type(inner).__module__ + "." + type(inner).__name__,
                                   "world_size": dist.get_world_size(),
                                   "deepspeed": deepspeed.__version__}), flush=True)
