"""Modeled on pytorch/examples' word_language_model/main.py: batches sliced
from a tensor (no DataLoader), model.train()/model.eval() each epoch, the
best model saved whole with torch.save and reloaded with torch.load for the
test pass.  Plain PyTorch, nothing of dftracer."""

import sys

import torch
import torch.nn as nn


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(50, 16)
        self.rnn = nn.LSTM(16, 16)
        self.decoder = nn.Linear(16, 50)

    def forward(self, x):
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


def batches(data, n):
    for i in range(n):
        yield data[i:i + 5], data[i + 1:i + 6]


def main(path, epochs, train_batches, eval_batches):
    torch.manual_seed(0)
    data = torch.randint(0, 50, (64, 4))
    model, criterion = RNNModel(), nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        model.train()
        for x, y in batches(data, train_batches):
            opt.zero_grad()
            loss = criterion(model(x).view(-1, 50), y.reshape(-1))
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for x, y in batches(data, eval_batches):
                criterion(model(x).view(-1, 50), y.reshape(-1))
    torch.save(model, path)
    model = torch.load(path, weights_only=False)  # the test pass: a new model object
    model.eval()
    with torch.no_grad():
        for x, y in batches(data, eval_batches):
            criterion(model(x).view(-1, 50), y.reshape(-1))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:5]))
