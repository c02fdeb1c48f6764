"""A PyTorch Lightning DDP job under Lightning's own launcher (no torchrun:
`Trainer(strategy="ddp", devices=2)` starts rank 1 itself, as a new
`python <this script>` with its own environment), each rank reading a
DataLoader with 2 persistent workers, for
tests/torch_integration/test_lightning_launcher.py.  Prints `done rank R`."""

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


class MLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 1))

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    loader = DataLoader(Samples(), batch_size=8, num_workers=2, persistent_workers=True)
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=2,
                        enable_progress_bar=False, enable_checkpointing=False, logger=False,
                        enable_model_summary=False)
    trainer.fit(MLP(), loader)
    print(f"done rank {trainer.global_rank}", flush=True)
